"""Session metadata and lifecycle of the SQLite backend: names, attribution, ownership,
run state, TTL cleanup, search and compact/repair.

The same rules as the JSONL backend's: setters never create a session
(:class:`SessionNotFoundError`), each is one transaction that reads the session's
``meta``, changes it and writes it back; a ``meta`` that cannot be read
(:class:`CorruptMetadataError`) is never overwritten. Getters read one snapshot; the
single-session getters raise :class:`CorruptMetadataError` for an unreadable ``meta``,
the listings log a warning and list the session with what its row tells.
Activity (``updated_at``, the order of ``search``, the TTL of ``cleanup_stale``) is the
wall-clock time of the session's last change, kept in its row.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from .. import records, sidecar
from ..base import search_order, search_results
from ..finding import Collector, MessageSearch
from ..types import SessionMetadata
from .base import SessionRow, SqliteCore

_ALL = "SELECT key, id, meta, message_count, size_bytes, activity_ns FROM sessions"


class MetadataMethods(SqliteCore):
    """Part of :class:`SqliteSessionStore` (which inherits it)."""

    # -- looking at sessions -------------------------------------------------------------
    def _all(self, c: sqlite3.Connection) -> list[tuple[SessionRow, dict[str, Any] | None]]:
        """Every session with its meta (None when unreadable: logged), in key order."""
        return self._with_meta(SessionRow(r[0], r[1:]) for r in c.execute(_ALL))

    # -- ownership ----------------------------------------------------------------------
    def _delete_session_owned(self, key: str, owner: str) -> bool:
        with self._db.write(key) as c:  # check and delete: one transaction
            s = self._session(c, key)
            if s is None or sidecar.text(self._meta(s), "principal_id") != owner:
                return False
            return self.delete_session(key)

    # -- attribution ----------------------------------------------------------------------
    def _reattribute(self, old: str, new: str | None) -> int:
        with self._db.write(None) as c:
            return self._reattributed(c, list(self._all(c)), old, new)

    # -- TTL cleanup ----------------------------------------------------------------------
    def _cleanup_stale(self, ttl_hours: float) -> int:
        # one transaction; a meta that cannot be read (state unknown) is never deleted
        cutoff = time.time_ns() - int(ttl_hours * 3600e9)
        removed = 0
        with self._db.write(None) as c:
            for s, meta in list(self._all(c)):
                if meta is not None and sidecar.state(meta) != "running" and s.activity_ns < cutoff:
                    removed += self.delete_session(s.key)
        return removed

    # -- search ---------------------------------------------------------------------------
    def _search(self, needle: str, limit: int | None, alias: str | None) -> list[SessionMetadata]:
        # A scan, not FTS5: SQLite's full-text case folding is not str.casefold, so it would
        # match differently from the other backends. A pure-ASCII row that cannot hold the
        # keyword is ruled out without decoding; the scan stops once limit sessions matched.
        ascii_needle = needle.encode("ascii") if needle.isascii() else None
        with self._db.read() as c:
            def mentions(item: tuple[SessionRow, dict[str, Any] | None]) -> bool:
                return any(records.mentions(line, needle, ascii_needle)
                           for (line,) in c.execute("SELECT line FROM messages WHERE session = ?", (item[0].id,)))

            ordered = search_order(((s.activity_ns, s.key, meta, (s, meta)) for s, meta in self._all(c)), alias)
            return search_results(ordered, needle, limit, mentions, lambda item: self._describe(*item))

    def _find_messages(self, search: MessageSearch, collector: Collector) -> None:
        # A scan of the rows of the sessions the filters leave; a row that cannot hold the
        # longest term is ruled out by a byte test before it is decoded.
        may_hold = search.may_hold
        with self._db.read() as c:
            for s, meta in self._all(c):
                if search.wants_session(s.key, meta):
                    for seq, line in c.execute("SELECT seq, line FROM messages WHERE session = ?", (s.id,)):
                        if may_hold(line):
                            collector.offer(s.key, seq, line)

    # -- compact / repair -----------------------------------------------------------------
    def _quarantine(self, c: sqlite3.Connection, key: str, data: list[tuple[int, bytes]]) -> str:
        taken = self._clock()
        repair_no = c.execute("SELECT coalesce(max(repair), 0) + 1 FROM quarantine").fetchone()[0]
        c.executemany("INSERT INTO quarantine (repair, session_key, taken_at, seq, line) VALUES (?, ?, ?, ?, ?)",
                      [(repair_no, key, taken, seq, line) for seq, line in data])
        return f"the quarantine table of {self._path} (repair {repair_no})"
