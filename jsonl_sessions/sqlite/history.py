"""The message-history API and pagination of the SQLite backend.

Positions are the ``seq`` column (dense: 0..count-1), ids are found through the
``(session, id)`` index and counts are kept in the session row, so a count is O(1), an id
lookup O(log n), a window or a page O(log n + page): flat in the session's length. Reads
run in one read transaction (one snapshot).

Lenient like :meth:`load`: a row that does not parse is skipped with a logged warning; it
is not a message (it does not count towards a page's ``limit``) but it holds a position
(``get_message_count`` and ``get_messages`` offsets count it). The mutations are strict.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from .. import rows
from ..dbfront import usable_id
from ..errors import MessageNotFoundError
from ..keys import validate_key
from ..pagination import TURN_SEARCH_LINES, Item, Lines, Reading, page_back, page_forward
from ..records import calls, decode_or_none
from ..types import ChatMessage, Page
from .base import SessionRow, SqliteCore


def _backward(c: sqlite3.Connection, sid: int, end: int, chunk: int = 32) -> Iterator[Item]:
    """``(seq, line)`` of the rows before position ``end``, newest first, fetched in
    growing chunks (the first of ``chunk`` rows)."""
    while end > 0:
        got = c.execute("SELECT seq, line FROM messages WHERE session = ? AND seq < ? "
                        "ORDER BY seq DESC LIMIT ?", (sid, end, chunk)).fetchall()
        if not got:
            return
        yield from got
        end = got[-1][0]
        chunk = min(chunk * 4, 4096)


def _forward(c: sqlite3.Connection, sid: int, start: int, chunk: int = 32) -> Iterator[Item]:
    """``(seq, line)`` of the rows from position ``start`` on, oldest first, fetched in
    growing chunks (the first of ``chunk`` rows)."""
    while True:
        got = c.execute("SELECT seq, line FROM messages WHERE session = ? AND seq >= ? "
                        "ORDER BY seq LIMIT ?", (sid, start, chunk)).fetchall()
        if not got:
            return
        yield from got
        start = got[-1][0] + 1
        chunk = min(chunk * 4, 4096)


class HistoryMethods(SqliteCore):
    """Part of :class:`SqliteSessionStore` (which inherits it)."""

    def _seq_of(self, c: sqlite3.Connection, sid: int, message_id: object) -> int | None:
        """The position of the message with that id (the first, should there be two). O(log n)."""
        if not usable_id(message_id):
            return None
        row = c.execute("SELECT seq FROM messages WHERE session = ? AND id = ? ORDER BY seq LIMIT 1",
                        (sid, message_id)).fetchone()
        return None if row is None else int(row[0])

    def _find_valid(self, c: sqlite3.Connection, s: SessionRow, message_id: str) -> int:
        """The position of ``message_id`` for a mutation: MessageNotFoundError when absent,
        CorruptTranscriptError when its row does not parse."""
        seq = self._seq_of(c, s.id, message_id)
        if seq is None:
            raise MessageNotFoundError(key=s.key, message_id=message_id)
        line = c.execute("SELECT line FROM messages WHERE session = ? AND seq = ?", (s.id, seq)).fetchone()[0]
        try:
            rows.decode(line)
        except ValueError as exc:
            raise rows.corrupt(s.key, self._path, seq, self._offset_of(c, s.id, seq), str(exc)) from None
        return seq

    # -- counting and lookup ---------------------------------------------------------------
    def get_message_count(self, key: str) -> int:
        # O(1): kept in the session row by every writer
        validate_key(key)
        with self._db.read() as c:
            return int(self._existing(c, key).count)

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        # O(log n) through the id index
        validate_key(key)
        if not usable_id(message_id):
            return None
        with self._db.read() as c:
            row = c.execute("SELECT m.seq, m.line FROM messages m JOIN sessions s ON m.session = s.id "
                            "WHERE s.key = ? AND m.id = ? ORDER BY m.seq LIMIT 1", (key, message_id)).fetchone()
        if row is None:
            return None
        got = rows.decode_rows([row], key=key, path=self._path, strict=False)
        return got[0] if got else None

    def _get_messages(self, key: str, limit: int | None, offset: int) -> list[ChatMessage]:
        with self._db.read() as c:
            s = self._existing(c, key)
            if limit == 0 or offset >= s.count:
                return []
            # clamped to the count: SQLite binds no int past 2**63 - 1 (any size is list slicing)
            stop = None if limit is None or limit >= s.count - offset else offset + limit
            data = self._rows(c, s.id, offset, stop)
        return rows.decode_rows(data, key=key, path=self._path, strict=False)

    # -- pages -------------------------------------------------------------------------------
    def _read_page(self, key: str, limit: int, before: str | None, after: str | None, reading: Reading,
                   breakpoint: bool, whole_turns: bool) -> Page:
        """A page (see :meth:`page`), in one read transaction."""
        with self._db.read() as c:
            s = self._existing(c, key)
            if after is None:
                return self._page_backward(c, s, limit, before, reading, breakpoint, whole_turns)
            return self._page_forward(c, s, limit, after, reading, breakpoint, whole_turns)

    def _cursor(self, c: sqlite3.Connection, s: SessionRow, message_id: str) -> int:
        seq = self._seq_of(c, s.id, message_id)
        if seq is None:
            raise MessageNotFoundError(key=s.key, message_id=message_id)
        return seq

    def _page_backward(self, c: sqlite3.Connection, s: SessionRow, limit: int, before: str | None,
                       reading: Reading, breakpoint: bool, whole_turns: bool) -> Page:
        end, newer = (s.count, False) if before is None else (self._cursor(c, s, before), True)
        return page_back(Lines(_backward(c, s.id, end, min(limit + 1, 4096))), reading, limit, breakpoint,
                         whole_turns, newer)

    def _page_forward(self, c: sqlite3.Connection, s: SessionRow, limit: int, after: str,
                      reading: Reading, breakpoint: bool, whole_turns: bool) -> Page:
        start = 0 if after == "" else self._cursor(c, s, after) + 1
        return page_forward(Lines(_forward(c, s.id, start, min(limit + 1, 4096))), reading, limit, breakpoint,
                            whole_turns, lambda seq, tool_call_id: self._call_before(c, s.id, seq, tool_call_id),
                            lambda seq: seq == 0)

    @staticmethod
    def _call_before(c: sqlite3.Connection, sid: int, seq: int, tool_call_id: str) -> bool:
        """Whether the call of ``tool_call_id`` is among the TURN_SEARCH_LINES rows before ``seq``."""
        for (line,) in c.execute("SELECT line FROM messages WHERE session = ? AND seq < ? AND seq >= ? "
                                 "ORDER BY seq DESC", (sid, seq, seq - TURN_SEARCH_LINES)):
            if b"tool_calls" in line:
                found = decode_or_none(line)
                if found is not None and calls(found, tool_call_id):
                    return True
        return False

    # -- fork and revert ---------------------------------------------------------------------
    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        # one transaction; the rows are copied inside SQLite: O(log n + copied rows)
        validate_key(source)
        validate_key(target)
        with self._db.write(source) as c:
            src = self._existing(c, source)
            end, fork_point, sid = self._fork_target(c, src, target, up_to_message_id)
            c.execute("INSERT INTO messages (session, seq, id, created_at, role, kind, line) "
                      "SELECT ?, seq, id, created_at, role, kind, line FROM messages WHERE session = ? AND seq < ?",
                      (sid, src.id, end))
            count, size = c.execute("SELECT count(*), total(length(line) + 1) FROM messages WHERE session = ?",
                                    (sid,)).fetchone()
            self._set_counts(c, sid, int(count), int(size))
        return fork_point

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        # one transaction: O(log n + removed rows)
        validate_key(key)
        with self._db.write(key) as c:
            s = self._existing(c, key)
            keep = self._find_valid(c, s, up_to_message_id) + 1
            removed = self._rows(c, s.id, keep)
            if not removed:
                return 0
            self._strict(c, s, removed)
            c.execute("DELETE FROM messages WHERE session = ? AND seq >= ?", (s.id, keep))
            self._set_counts(c, s.id, keep, s.size - rows.sizes([line for _, line in removed]))
            return len(removed)
