"""The core of the SQLite backend: opening the file, ids, append / load / rewrite / replace.

Every mutation is one SQLite transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``): all or
nothing, also after SIGKILL or an I/O error (SQLite's WAL), durable when it returns in
fsync mode (``synchronous=FULL``). Readers run in a read transaction and see one
committed snapshot without waiting for writers.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .. import codec, rows, sidecar
from ..base import DEFAULT_MAX_MESSAGE_BYTES
from ..dbfront import DatabaseFront
from ..ids import assign_ids, replacement_record
from ..keys import validate_key
from ..types import ChatMessage, Durability
from .db import Database

_T = TypeVar("_T")


class SessionRow:
    """A session's row: its id, counters, meta (raw) and activity time."""

    __slots__ = ("activity_ns", "count", "id", "key", "meta", "size")

    def __init__(self, key: str, row: tuple[int, bytes, int, int, int]) -> None:
        self.key = key
        self.id, self.meta, self.count, self.size, self.activity_ns = row


_SESSION_COLUMNS = "id, meta, message_count, size_bytes, activity_ns"


class SqliteCore(DatabaseFront):
    """A session store in one SQLite file: the core (see :class:`SqliteSessionStore`)."""

    _db: Database

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "fsync",
        lock_timeout: float | None = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._options(durability, lock_timeout, max_message_bytes, clock)
        self._path = os.path.abspath(os.fspath(path))
        parent = os.path.dirname(self._path)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o700, exist_ok=True)
        self._db = Database(self._path, durability=durability, lock_timeout=lock_timeout)

    # -- guard ---------------------------------------------------------------------------
    def lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        # the file's writers' lock: see the class docstring; a bad key raises here, not at `with`
        validate_key(key)
        return self._db.hold(key)

    # -- rows ------------------------------------------------------------------------------
    def _read(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._db.read() as c:
            return fn(c)

    def _write(self, key: str, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._db.write(key) as c:
            return fn(c)

    def _locked(self, c: sqlite3.Connection, key: str) -> SessionRow | None:
        return self._session(c, key)  # the writers' lock keeps every row from other writers

    def _row(self, key: str, columns: Sequence[Any]) -> SessionRow:
        return SessionRow(key, tuple(columns))

    def _session(self, c: sqlite3.Connection, key: str) -> SessionRow | None:
        row = c.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE key = ?", (key,)).fetchone()
        return None if row is None else SessionRow(key, row)

    def _rows(self, c: sqlite3.Connection, sid: int, start: int = 0, stop: int | None = None) -> list[tuple[int, bytes]]:
        """``(seq, line)`` of the rows at positions ``[start, stop)``, in order."""
        if stop is None:
            return c.execute("SELECT seq, line FROM messages WHERE session = ? AND seq >= ? ORDER BY seq",
                             (sid, start)).fetchall()
        return c.execute("SELECT seq, line FROM messages WHERE session = ? AND seq >= ? AND seq < ? ORDER BY seq",
                         (sid, start, stop)).fetchall()

    def _offset_of(self, c: sqlite3.Connection, sid: int, seq: int) -> int:
        """The byte offset of row ``seq`` in the session's export. O(seq): error paths only."""
        got = c.execute("SELECT total(length(line) + 1) FROM messages WHERE session = ? AND seq < ?",
                        (sid, seq)).fetchone()[0]
        return int(got)

    def _last_id(self, c: sqlite3.Connection, sid: int, before: int | None = None) -> str | None:
        """The newest ULID of the session (of the rows before position ``before``), the id new
        ids are made after (None: none); ids that are not ULIDs are passed over. O(log n)
        (plus the rows passed over)."""
        row = c.execute(f"SELECT id FROM messages WHERE session = ? AND seq < ? AND id GLOB '{rows.ULID_GLOB}' "
                        "ORDER BY seq DESC LIMIT 1", (sid, rows.MAX_INTEGER if before is None else before)).fetchone()
        return None if row is None else (row[0] or None)

    def _has_id(self, c: sqlite3.Connection, sid: int, message_id: str) -> bool:
        return c.execute("SELECT 1 FROM messages WHERE session = ? AND id = ?", (sid, message_id)).fetchone() is not None

    def _insert(self, c: sqlite3.Connection, sid: int, first_seq: int, lines: Sequence[bytes],
                records: Sequence[dict[str, Any]] | None = None) -> None:
        if records is None:
            index = [rows.index_of(line) for line in lines]
        else:
            index = [(r["id"], rows.created_column(r["created_at"]), r["role"], r["kind"]) for r in records]
        c.executemany(
            "INSERT INTO messages (session, seq, id, created_at, role, kind, line) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(sid, first_seq + i, *cols, line) for i, (cols, line) in enumerate(zip(index, lines))])

    def _create(self, c: sqlite3.Connection, key: str, meta: Mapping[str, Any]) -> int:
        cur = c.execute("INSERT INTO sessions (key, meta, activity_ns) VALUES (?, ?, ?)",
                        (key, rows.encode_meta(meta), time.time_ns()))
        return int(cur.lastrowid or 0)

    def _set_counts(self, c: sqlite3.Connection, sid: int, count: int, size: int, activity_ns: int | None = None) -> None:
        c.execute("UPDATE sessions SET message_count = ?, size_bytes = ?, activity_ns = ? WHERE id = ?",
                  (count, size, time.time_ns() if activity_ns is None else activity_ns, sid))

    def _replace_rows(self, c: sqlite3.Connection, sid: int, lines: Sequence[bytes],
                      records: Sequence[dict[str, Any]] | None = None) -> None:
        c.execute("DELETE FROM messages WHERE session = ?", (sid,))
        self._insert(c, sid, 0, lines, records)
        self._set_counts(c, sid, len(lines), rows.sizes(lines))

    def _write_meta(self, c: sqlite3.Connection, s: SessionRow, meta: dict[str, Any]) -> None:
        meta["updated_at"] = self._clock()
        c.execute("UPDATE sessions SET meta = ?, activity_ns = ? WHERE id = ?",
                  (rows.encode_meta(meta), time.time_ns(), s.id))

    def _newest(self, c: sqlite3.Connection, s: SessionRow) -> tuple[int, bytes, dict[str, Any]] | None:
        """``(seq, line, record)`` of the newest row; None when there is none. A row that does
        not parse raises :class:`CorruptTranscriptError`, its offset summed from the rows
        before it (not from ``size_bytes``, which another tool's edit leaves stale). O(log n)."""
        row = c.execute("SELECT seq, line FROM messages WHERE session = ? ORDER BY seq DESC LIMIT 1",
                        (s.id,)).fetchone()
        if row is None:
            return None
        seq, line = row
        try:
            return seq, line, codec.decode_record(line)
        except ValueError as exc:
            raise rows.corrupt(s.key, self._path, seq, self._offset_of(c, s.id, seq), str(exc)) from None

    def _last_row(self, c: sqlite3.Connection, key: str) -> tuple[SessionRow, tuple[int, bytes, dict[str, Any]]] | None:
        """The session's row and its newest message row (see :meth:`_newest`); None when
        the session does not exist or is empty."""
        s = self._session(c, key)
        newest = None if s is None else self._newest(c, s)
        return None if s is None or newest is None else (s, newest)

    # -- ids and encoding ------------------------------------------------------------------
    def _assign(self, key: str, messages: Sequence[ChatMessage], previous: str | None,
                exists: Callable[[str], bool] = lambda _mid: False) -> list[dict[str, Any]]:
        """Records with ids and times for ``messages`` (see :func:`assign.assign_ids`)."""
        return assign_ids(key, messages, previous, self._clock(), exists)

    # -- reading ---------------------------------------------------------------------------
    def _load(self, key: str, *, strict: bool) -> list[ChatMessage]:
        with self._db.read() as c:
            s = self._session(c, key)
            if s is None:
                return []
            data = self._rows(c, s.id)
        return rows.decode_rows(data, key=key, path=self._path, strict=strict)

    def session_exists(self, key: str) -> bool:
        # O(log sessions)
        validate_key(key)
        with self._db.read() as c:
            return c.execute("SELECT 1 FROM sessions WHERE key = ?", (key,)).fetchone() is not None

    def list_sessions(self) -> list[str]:
        # O(sessions)
        with self._db.read() as c:
            return sorted(k for (k,) in c.execute("SELECT key FROM sessions"))

    # -- appending -------------------------------------------------------------------------
    def _append_many(self, key: str, msgs: list[ChatMessage]) -> list[str]:
        with self._db.write(key) as c:
            s = self._session(c, key)
            if s is None:
                records = self._assign(key, msgs, None)
                lines = self._encode(key, records)
                sid, count, size = self._create(c, key, sidecar.new_sidecar(key, self._clock())), 0, 0
            else:
                sid, count, size = s.id, s.count, s.size
                records = self._assign(key, msgs, self._last_id(c, sid), lambda mid: self._has_id(c, sid, mid))
                lines = self._encode(key, records)
            self._insert(c, sid, count, lines, records)
            self._set_counts(c, sid, count + len(lines), size + rows.sizes(lines))
        return [r["id"] for r in records]

    # -- changing the end ------------------------------------------------------------------
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        # O(log n)
        validate_key(key)
        with self._db.write(key) as c:
            found = self._last_row(c, key)
            if found is None:
                return False
            s, (seq, line, record) = found
            if expected_id is not None and (record.get("id") or "") != expected_id:
                return False
            c.execute("DELETE FROM messages WHERE session = ? AND seq = ?", (s.id, seq))
            self._set_counts(c, s.id, s.count - 1, s.size - len(line) - 1)
            return True

    def _update_last(self, key: str, m: ChatMessage, expected_id: str | None) -> bool:
        with self._db.write(key) as c:
            found = self._last_row(c, key)
            if found is None:
                return False
            s, (seq, old_line, old) = found
            old_id = old.get("id") or ""
            if expected_id is not None and old_id != expected_id:
                return False

            records = [replacement_record(key, m, old, self._clock, lambda: self._last_id(c, s.id, seq),
                                          lambda mid: mid != old_id and self._has_id(c, s.id, mid))]
            line = self._encode(key, records)[0]
            c.execute("DELETE FROM messages WHERE session = ? AND seq = ?", (s.id, seq))
            self._insert(c, s.id, seq, [line], records)
            self._set_counts(c, s.id, s.count, s.size - len(old_line) + len(line))
            return True

    # -- replacing everything --------------------------------------------------------------
    def _rewrite(self, key: str, msgs: list[ChatMessage]) -> None:
        with self._db.write(key) as c:
            records = self._assign(key, msgs, None)
            lines = self._encode(key, records)
            s = self._session(c, key)
            if s is None:
                sid = self._create(c, key, sidecar.new_sidecar(key, self._clock()))
            else:
                self._check_clean(c, s)
                sid = s.id
            self._replace_rows(c, sid, lines, records)

    def _session_row(self, key: str) -> SessionRow | None:
        with self._db.read() as c:
            return self._session(c, key)

    # -- clearing and deleting -------------------------------------------------------------
    def delete_session(self, key: str) -> bool:
        validate_key(key)
        with self._db.write(key) as c:
            s = self._session(c, key)
            if s is None:
                return False
            c.execute("DELETE FROM messages WHERE session = ?", (s.id,))
            c.execute("DELETE FROM sessions WHERE id = ?", (s.id,))
            return True

