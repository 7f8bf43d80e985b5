"""The message-history API and pagination of the PostgreSQL backend.

Positions are the ``seq`` column (dense: 0..count-1), ids are found through the
``UNIQUE (session, id)`` index and counts are kept in the session row, so a count is O(1),
an id lookup O(log n), a window or a page O(log n + page) by ``(session, seq)``: flat in
the session's length. A page reads its rows in one ``REPEATABLE READ READ ONLY``
transaction (one snapshot, however many chunks it fetches).

Lenient like :meth:`load`: a row that does not parse is skipped with a logged warning; it
is not a message (it does not count towards a page's ``limit``) but it holds a position.
The mutations are strict.
"""

from __future__ import annotations

from collections.abc import Iterator

from .. import rows
from ..dbfront import usable_id
from ..errors import MessageNotFoundError, SessionNotFoundError
from ..keys import validate_key
from ..pagination import TURN_SEARCH_LINES, Item, Lines, Reading, page_back, page_forward
from ..records import calls, decode_or_none
from ..types import ChatMessage, Page
from .base import PostgresCore, SessionRow, nul_free
from .db import Conn, lit


class HistoryMethods(PostgresCore):
    """Part of :class:`PostgresSessionStore` (which inherits it)."""

    def _chunks(self, c: Conn, sid: int, edge: int, chunk: int, *, back: bool) -> Iterator[Item]:
        """``(seq, line)`` of the rows before position ``edge`` newest first (``back``), or
        from ``edge`` on oldest first, fetched by the primary key in growing chunks."""
        op, order = ("<", "DESC") if back else (">=", "ASC")
        query = (f"SELECT seq, line FROM {self._s}.messages WHERE session = %s AND seq {op} %s "
                 f"ORDER BY seq {order} LIMIT %s")
        while not back or edge > 0:
            got = c.execute(query, (sid, edge, chunk)).fetchall()
            if not got:
                return
            for seq, line in got:
                yield seq, line.encode()
            edge = got[-1][0] + (0 if back else 1)
            chunk = min(chunk * 4, 4096)

    def _seq_of(self, c: Conn, sid: int, message_id: object) -> int | None:
        """The position of the message with that id. O(log n)."""
        if not usable_id(message_id):
            return None
        mid = nul_free(str(message_id))
        row = c.execute(f"SELECT seq FROM {self._s}.messages WHERE session = %s AND md5(id) = md5(%s) AND id = %s",
                        (sid, mid, mid)).fetchone()
        return None if row is None else int(row[0])

    def _find_valid(self, c: Conn, s: SessionRow, message_id: str) -> int:
        """The position of ``message_id`` for a mutation: MessageNotFoundError when absent,
        CorruptTranscriptError when its row does not parse."""
        seq = self._seq_of(c, s.id, message_id)
        if seq is None:
            raise MessageNotFoundError(key=s.key, message_id=message_id)
        self._strict(c, s, self._rows(c, s.id, seq, seq + 1))
        return seq

    def _existing(self, c: Conn, key: str, *, for_update: bool = False) -> SessionRow:
        s = self._session(c, key, for_update=for_update)
        if s is None:
            raise SessionNotFoundError(key=key)
        return s

    # -- counting and lookup ---------------------------------------------------------------
    def get_message_count(self, key: str) -> int:
        # O(1): the counter column kept by every writer
        validate_key(key)
        found = self._db.read_one(f"SELECT message_count FROM {self._s}.sessions WHERE key = {lit(key)}")
        if not found:
            raise SessionNotFoundError(key=key)
        return int(found[0][0])

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        # O(log n) through the id index
        validate_key(key)
        if not usable_id(message_id):
            return None
        found = self._db.read_one(
            f"SELECT m.seq, m.line FROM {self._s}.messages m JOIN {self._s}.sessions s ON m.session = s.id "
            f"WHERE s.key = {lit(key)} AND md5(m.id) = md5({lit(nul_free(message_id))}) "
            f"AND m.id = {lit(nul_free(message_id))}")
        if not found:
            return None
        got = rows.decode_rows([(found[0][0], found[0][1].encode())], key=key, path=self._path, strict=False)
        return got[0] if got else None

    def _get_messages(self, key: str, limit: int | None, offset: int) -> list[ChatMessage]:
        def read(c: Conn) -> list[tuple[int, bytes]]:
            s = self._existing(c, key)
            if limit == 0 or offset >= s.count:
                return []
            # clamped to the count: a bigint holds no position past 2**63 - 1
            return self._rows(c, s.id, offset, None if limit is None or limit >= s.count - offset else offset + limit)

        return rows.decode_rows(self._db.read(read), key=key, path=self._path, strict=False)

    # -- pages -------------------------------------------------------------------------------
    def _read_page(self, key: str, limit: int, before: str | None, after: str | None, reading: Reading,
                   breakpoint: bool, whole_turns: bool) -> Page:
        """A page (see :meth:`page`), its rows read by ``(session, seq)`` in one ``REPEATABLE
        READ READ ONLY`` transaction (one snapshot however many chunks it fetches)."""
        chunk = min(limit + 1, 4096)

        def read(c: Conn) -> Page:
            s = self._existing(c, key)
            if after is None:
                end, newer = (s.count, False) if before is None else (self._cursor(c, s, before), True)
                return page_back(Lines(self._chunks(c, s.id, end, chunk, back=True)), reading, limit, breakpoint,
                                 whole_turns, newer)
            start = 0 if after == "" else self._cursor(c, s, after) + 1
            return page_forward(Lines(self._chunks(c, s.id, start, chunk, back=False)), reading, limit, breakpoint,
                                whole_turns, lambda seq, tool_call_id: self._call_before(c, s.id, seq, tool_call_id),
                                lambda seq: seq == 0)

        return self._db.read(read)

    def _cursor(self, c: Conn, s: SessionRow, message_id: str) -> int:
        seq = self._seq_of(c, s.id, message_id)
        if seq is None:
            raise MessageNotFoundError(key=s.key, message_id=message_id)
        return seq

    def _call_before(self, c: Conn, sid: int, seq: int, tool_call_id: str) -> bool:
        """Whether the call of ``tool_call_id`` is among the TURN_SEARCH_LINES rows before ``seq``."""
        for (line,) in c.execute(f"SELECT line FROM {self._s}.messages WHERE session = %s AND seq < %s AND seq >= %s "
                                 "AND strpos(line, 'tool_calls') > 0 ORDER BY seq DESC",
                                 (sid, seq, seq - TURN_SEARCH_LINES)):
            found = decode_or_none(line.encode())
            if found is not None and calls(found, tool_call_id):
                return True
        return False

    # -- fork and revert ---------------------------------------------------------------------
    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        # rows copied inside the server under both guards (sorted order): O(log n + copied rows)
        validate_key(source)
        validate_key(target)

        def write(c: Conn) -> str | None:
            src = self._existing(c, source, for_update=True)
            end, fork_point, sid = self._fork_target(c, src, target, up_to_message_id)
            c.execute(f"INSERT INTO {self._s}.messages (session, seq, id, created_at, role, kind, line, folded) "
                      f"SELECT %s, seq, id, created_at, role, kind, line, folded FROM {self._s}.messages "
                      "WHERE session = %s AND seq < %s", (sid, src.id, end))
            row = c.execute(f"SELECT count(*), coalesce(sum(octet_length(line) + 1), 0) FROM {self._s}.messages "
                            "WHERE session = %s", (sid,)).fetchone()
            assert row is not None
            self._set_counts(c, sid, int(row[0]), int(row[1]))
            return fork_point

        return self._db.write([source, target], write, name=source)

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        # the newer rows go in one DELETE under the guard: O(log n + deleted rows)
        validate_key(key)

        def write(c: Conn) -> int:
            s = self._existing(c, key, for_update=True)
            keep = self._find_valid(c, s, up_to_message_id) + 1
            removed = self._rows(c, s.id, keep)
            if not removed:
                return 0
            self._strict(c, s, removed)
            c.execute(f"DELETE FROM {self._s}.messages WHERE session = %s AND seq >= %s", (s.id, keep))
            self._set_counts(c, s.id, keep, s.size - rows.sizes([line for _, line in removed]))
            return len(removed)

        return self._db.write([key], write)


__all__ = ["HistoryMethods"]
