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
from collections.abc import Callable, Iterator
from typing import Any

from .. import records, rows
from ..arguments import check_number, check_query, check_text
from ..compaction import CompactionReport
from ..errors import CorruptMetadataError, SessionNotFoundError
from ..jsonl import sidecar
from ..keys import validate_key
from ..types import SessionMetadata, SessionQuery
from .base import SessionRow, SqliteCore

_ALL = "SELECT key, id, meta, message_count, size_bytes, activity_ns FROM sessions"


class MetadataMethods(SqliteCore):
    """Part of :class:`SqliteSessionStore` (which inherits it)."""

    # -- looking at sessions -------------------------------------------------------------
    def _all(self, c: sqlite3.Connection) -> Iterator[tuple[SessionRow, dict[str, Any] | None]]:
        """Every session with its meta (None when unreadable: logged), in key order."""
        found = [SessionRow(r[0], r[1:]) for r in c.execute(_ALL)]
        found.sort(key=lambda s: s.key)
        for s in found:
            try:
                yield s, self._meta(s)
            except CorruptMetadataError as exc:
                rows.log.warning("%s", exc)
                yield s, None

    def _where(self, keep: Callable[[dict[str, Any] | None], bool]) -> list[SessionMetadata]:
        with self._db.read() as c:
            return [self._describe(s, meta) for s, meta in self._all(c) if keep(meta)]

    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        """The session's metadata; None when it does not exist. O(log sessions): counts and
        sizes are kept in the session row. :class:`CorruptMetadataError` for an unreadable meta."""
        validate_key(key)
        with self._db.read() as c:
            s = self._session(c, key)
        return None if s is None else self._describe(s, self._meta(s))

    # -- ownership ----------------------------------------------------------------------
    def delete_session_owned(self, key: str, owner_principal_id: str) -> bool:
        """Delete the session only when its recorded principal equals ``owner_principal_id``;
        True when deleted. Fails closed (missing session, no owner, another owner, "" ->
        False, nothing deleted). Check and delete are one transaction. An unreadable meta
        raises :class:`CorruptMetadataError` (nothing deleted)."""
        owner = check_text("owner_principal_id", owner_principal_id)
        validate_key(key)
        with self._db.write(key) as c:
            s = self._session(c, key)
            if not owner or s is None or sidecar.text(self._meta(s), "principal_id") != owner:
                return False
            return self.delete_session(key)

    # -- attribution ----------------------------------------------------------------------
    def _reattribute(self, old: str, new: str | None) -> int:
        with self._db.write(None) as c:
            return self._reattributed(c, list(self._all(c)), old, new)

    # -- TTL cleanup ----------------------------------------------------------------------
    def cleanup_stale(self, ttl_hours: float) -> int:
        """Delete every session whose last change is older than ``ttl_hours`` (wall clock);
        the number deleted. Never a ``running`` session, nor one whose meta is unreadable
        (its state is unknown: logged). One transaction. Cost: O(sessions + deleted rows)."""
        cutoff = time.time_ns() - int(check_number("ttl_hours", ttl_hours) * 3600e9)
        removed = 0
        with self._db.write(None) as c:
            for s, meta in list(self._all(c)):
                if meta is not None and sidecar.state(meta) != "running" and s.activity_ns < cutoff:
                    removed += self.delete_session(s.key)
        return removed

    # -- search ---------------------------------------------------------------------------
    def search(self, query: SessionQuery) -> list[SessionMetadata]:
        """Sessions whose name or message text contains ``query.keyword``, newest activity
        first (ties: key order), at most ``query.limit`` (None: all), only those attributed
        to ``query.agent_alias`` when given. Matching is the JSONL backend's exactly:
        ``str.casefold`` on both sides, message text = a string content, or the strings and
        ``"text"`` fields of a list content (or of one part object). An empty keyword
        matches every session.

        A scan (not FTS5: SQLite's full-text case folding is not ``str.casefold``, so it
        would match differently from the JSONL backend): rows are read in order of
        activity, a pure-ASCII row that cannot hold the keyword is ruled out without
        decoding, and the scan stops once ``limit`` sessions matched. One snapshot.
        Cost: O(bytes of the sessions scanned)."""
        needle, limit, alias = check_query(query)
        ascii_needle = needle.encode("ascii") if needle.isascii() else None
        out: list[SessionMetadata] = []
        with self._db.read() as c:
            found = [(s, meta) for s, meta in self._all(c) if alias is None or sidecar.text(meta, "agent_alias") == alias]
            found.sort(key=lambda item: (-item[0].activity_ns, item[0].key))
            for s, meta in found:
                if limit is not None and len(out) >= limit:
                    break
                name = sidecar.text(meta, "name")
                if (not needle or (name is not None and needle in name.casefold())
                        or any(records.mentions(line, needle, ascii_needle)
                               for (line,) in c.execute("SELECT line FROM messages WHERE session = ?", (s.id,)))):
                    out.append(self._describe(s, meta))
        return out

    # -- compact / repair -----------------------------------------------------------------
    def compaction_report(self, key: str, *, repair: bool = False) -> CompactionReport:
        """:meth:`compact` returning its whole report instead of a count, logging nothing:
        the plan (rows kept, rows dropped with line number, byte offset in the export and
        reason) and, after a repair, where the original rows are (``quarantine``: the
        table and the repair's number). ``recovered`` is always False (SQLite completes or
        undoes an interrupted transaction itself). Same errors, atomicity and cost."""
        validate_key(key)
        with self._db.write(key) as c:
            s = self._session(c, key)
            if s is None:
                raise SessionNotFoundError(key=key)
            data = self._rows(c, s.id)

            def quarantine() -> str:
                taken = self._clock()
                repair_no = c.execute("SELECT coalesce(max(repair), 0) + 1 FROM quarantine").fetchone()[0]
                c.executemany("INSERT INTO quarantine (repair, session_key, taken_at, seq, line) VALUES (?, ?, ?, ?, ?)",
                              [(repair_no, key, taken, seq, line) for seq, line in data])
                return f"the quarantine table of {self._path} (repair {repair_no})"

            return self._compacted(key, data, repair, quarantine, lambda lines: self._replace_rows(c, s.id, lines))
