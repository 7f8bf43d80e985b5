"""Session metadata and lifecycle of the PostgreSQL backend: listings, ownership,
attribution, TTL cleanup, search and compact/repair (the setters and getters are
:class:`jsonl_sessions.base.BaseStore`'s, over this backend's primitives).

A metadata change reads the session row ``FOR UPDATE`` under the session's guard, changes
the object and writes it back with the columns copied from it; an unreadable object
(:class:`CorruptMetadataError`) is never overwritten. Operations over many sessions
(attribution, cleanup) lock the rows they change, so they serialise with the per-session
writers by row locks (waiting at most ``lock_timeout``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .. import records, rows, sidecar
from ..base import search_order, search_results
from ..finding import Collector, MessageSearch
from ..types import SessionMetadata
from .base import PostgresCore, SessionRow, nul_free
from .db import Conn


def _named(meta: Mapping[str, Any] | None, needle: str) -> bool:
    name = sidecar.text(meta, "name")
    return name is not None and needle in name.casefold()


class MetadataMethods(PostgresCore):
    """Part of :class:`PostgresSessionStore` (which inherits it)."""

    def _all(self, c: Conn, where: str = "", args: tuple[Any, ...] = (),
             for_update: bool = False) -> list[tuple[SessionRow, dict[str, Any] | None]]:
        """Sessions (all, or those ``where`` selects) with their meta (None when unreadable:
        logged), in key order."""
        got = c.execute(f"SELECT key, id, meta, message_count, size_bytes, activity_ns FROM {self._s}.sessions "
                        f"{where}{' FOR UPDATE' if for_update else ''}", args).fetchall()
        return self._with_meta(SessionRow(r[0], r[1:]) for r in got)

    # -- ownership ----------------------------------------------------------------------
    def _delete_session_owned(self, key: str, owner: str) -> bool:
        # One DELETE ... WHERE principal_id = ... under the guard; the deleted row's meta is
        # checked in the same transaction (an unreadable or disagreeing one rolls it back).
        class _Disagrees(Exception):
            pass

        def write(c: Conn) -> bool:
            row = c.execute(f"DELETE FROM {self._s}.sessions WHERE key = %s AND principal_id = %s RETURNING meta",
                            (key, nul_free(owner))).fetchone()
            if row is None:
                return False
            if sidecar.text(rows.decode_meta(row[0], key, self._path), "principal_id") != owner:
                raise _Disagrees
            return True

        try:
            return self._db.write([key], write)
        except _Disagrees:
            return False

    # -- attribution ----------------------------------------------------------------------
    def _reattribute(self, old: str, new: str | None) -> int:
        """Every session attributed to ``old`` (its row locked), re-attributed in one transaction."""

        return self._db.write([], lambda c: self._reattributed(
            c, self._all(c, "WHERE agent_alias = %s", (nul_free(old),), for_update=True), old, new))

    # -- TTL cleanup ----------------------------------------------------------------------
    def _cleanup_stale(self, ttl_hours: float) -> int:
        # One transaction; each row is locked and its time checked again after any writer
        # holding it commits. O(stale sessions + their rows).
        cutoff = time.time_ns() - int(ttl_hours * 3600e9)

        def write(c: Conn) -> int:
            stale = [s.id for s, meta in self._all(c, "WHERE activity_ns < %s AND state IS DISTINCT FROM 'running'",
                                                   (cutoff,), for_update=True)
                     if meta is not None and sidecar.state(meta) != "running"]
            if not stale:
                return 0
            got = c.execute(f"DELETE FROM {self._s}.sessions WHERE id = ANY(%s) AND activity_ns < %s RETURNING 1",
                            (stale, cutoff)).fetchall()
            return len(got)

        return self._db.write([], write)

    # -- search ---------------------------------------------------------------------------
    def _search(self, needle: str, limit: int | None, alias: str | None) -> list[SessionMetadata]:
        # The server finds the candidate rows with strpos on the folded column (case-folded
        # by Python when the row was written; not ILIKE, whose case rules differ and which
        # treats % and _ as wildcards); each candidate line is then checked exactly.
        ascii_needle = needle.encode("ascii") if needle.isascii() else None

        def read(c: Conn) -> list[SessionMetadata]:
            ordered = search_order(((s.activity_ns, s.key, meta, (s, meta)) for s, meta in self._all(c)), alias)
            # one query for the text of every session whose name does not match
            hits = set() if not needle else self._text_hits(
                c, [s.id for meta, (s, _meta) in ordered if not _named(meta, needle)], needle, ascii_needle)
            return search_results(ordered, needle, limit, lambda item: item[0].id in hits,
                                  lambda item: self._describe(*item))

        return self._db.read(read)

    def _text_hits(self, c: Conn, sids: list[int], needle: str, ascii_needle: bytes | None) -> set[int]:
        """The sessions among ``sids`` with a message whose text contains ``needle``."""
        if not sids:
            return set()
        if "\x00" in needle:  # only a row without folded text can hold it
            cond, args = "folded IS NULL", (sids,)
        else:
            cond, args = "(folded IS NULL OR strpos(folded, %s) > 0)", (sids, needle)  # type: ignore[assignment]
        hits: set[int] = set()
        for sid, line in c.execute(f"SELECT session, line FROM {self._s}.messages WHERE session = ANY(%s) AND {cond}",
                                   args):
            if sid not in hits and records.mentions(line.encode(), needle, ascii_needle):
                hits.add(sid)
        return hits

    def _find_messages(self, search: MessageSearch, collector: Collector) -> None:
        # The server leaves the rows whose folded text (case-folded by Python when the row
        # was written) holds every term, plus those without folded text (a line that does
        # not parse, or text holding NUL); LIKE is what a pg_trgm index (``index build``)
        # answers. Each row left is then confirmed by the collector.
        terms = [t for t in search.terms if "\x00" not in t]
        cond = "".join(" AND folded LIKE %s" for _ in terms)
        patterns = ["%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for t in terms]

        def read(c: Conn) -> Collector:
            part = collector.fork()  # a read retried on another connection starts over
            chosen = {s.id: s.key for s, meta in self._all(c) if search.wants_session(s.key, meta)}
            if not chosen:
                return part
            sql = (f"SELECT session, seq, line FROM {self._s}.messages WHERE session = ANY(%s) "
                   f"AND (folded IS NULL OR (TRUE{cond}))")
            for sid, seq, line in c.execute(sql, (list(chosen), *patterns)):
                part.offer(chosen[sid], seq, line.encode())
            return part

        collector.merge(self._db.read(read))

    # -- compact / repair -----------------------------------------------------------------
    def _quarantine(self, c: Conn, key: str, data: list[tuple[int, bytes]]) -> str:
        # numbered by a sequence: repairs of two sessions never share a number
        row = c.execute("SELECT nextval(%s::regclass)", (f"{self._s}.repairs",)).fetchone()
        assert row is not None
        c.execute(f"INSERT INTO {self._s}.quarantine (repair, session_key, taken_at, seq, line) "
                  "SELECT %s, %s, %s, s, l FROM unnest(%s::bigint[], %s::text[]) AS u(s, l)",
                  (row[0], key, self._clock(), [seq for seq, _ in data], [line.decode() for _, line in data]))
        return f"the quarantine table of {self._path} (repair {row[0]})"


__all__ = ["MetadataMethods"]
