"""The optional full-text index of message search, one set of calls for every store:
:func:`build_index`, :func:`index_status`, :func:`drop_index` (what ``jsonl-sessions index
build|status|drop`` runs).

The index is derived and never the source of truth: dropping it loses nothing, and a
search returns the same hits with or without it (the index only gives candidates, which
the one exact matcher confirms). Each backend uses its engine's own full-text search:

- JSONL (:mod:`jsonl_sessions.jsonl.ftsindex`): an SQLite FTS5 file beside the sessions,
  ``<root>/.search-index.sqlite3``, brought up to date from each session's high-water
  mark by the search that uses it;
- SQLite (:mod:`jsonl_sessions.sqlite.fts`): an FTS5 table in the store's file, kept
  current by triggers;
- PostgreSQL (:mod:`jsonl_sessions.postgres.trgm`): a ``pg_trgm`` GIN index on the
  case-folded text column, kept current by the server.

A store uses its index automatically while it exists, for searches with a term of three
characters or more; other searches, and every search without an index, scan.
The in-memory store has no index (``backend="none"``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from .jsonl import ftsindex
from .jsonl.store import SessionStore
from .sqlite import SqliteSessionStore
from .sqlite import fts as sqlite_fts


@dataclass(frozen=True)
class IndexStatus:
    """What a store's index holds. ``entries``: messages with text indexed (-1: not
    counted); ``stale_sessions``: JSONL sessions changed since the index last saw them
    (the next search that looks at them brings them up to date); ``problem``: why there
    is no index or why it is unhealthy, else None; ``dead_entries``: below."""

    backend: str
    exists: bool
    where: str
    entries: int = 0
    bytes: int = 0
    stale_sessions: int = 0
    problem: str | None = None
    #: JSONL: entries of lines that changed or went away, skipped by searches until the
    #: index is built again with ``rebuild=True``.
    dead_entries: int = 0


def _is_postgres(store: Any) -> bool:
    return type(store).__module__.startswith("jsonl_sessions.postgres")


def _sqlite_bytes(c: sqlite3.Connection) -> int:
    try:
        row = c.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE ?", (sqlite_fts.TABLE + "%",)).fetchone()
    except sqlite3.Error:  # dbstat is an optional part of SQLite
        return 0
    return int(row[0] or 0)


def index_status(store: Any) -> IndexStatus:
    """The store's index as it is now (reads only). Cost: JSONL O(sessions); SQLite a
    count and FTS5's integrity check; PostgreSQL one catalog read."""
    if isinstance(store, SessionStore):
        found = ftsindex.status(store._root)
        return IndexStatus("jsonl", found.exists, found.path, found.lines if found.exists else 0, found.bytes,
                           found.stale, dead_entries=found.dead)
    if isinstance(store, SqliteSessionStore):
        with store._db.read() as c:
            got = sqlite_fts.status(c)
            size = _sqlite_bytes(c) if got.exists else 0
        return IndexStatus("sqlite", got.exists, f"table {sqlite_fts.TABLE} of {store._path}", got.rows, size, 0,
                           None if got.healthy else "FTS5's integrity check failed: build it again (--rebuild)")
    if _is_postgres(store):
        from .postgres import trgm

        pg = trgm.status(store)
        return IndexStatus("postgres", pg.exists, f"index {store._schema}.{trgm.INDEX}", -1, pg.bytes)
    return IndexStatus("none", False, "", problem=f"{type(store).__name__} has no full-text index: searches scan")


def build_index(store: Any, *, rebuild: bool = False) -> IndexStatus:
    """Create the store's index when missing and bring it up to date; with ``rebuild``,
    drop it first. Safe to run while the store is in use, and to interrupt (JSONL: a build
    from nothing writes a file of its own and moves it into place once complete, so a
    killed one leaves no index and searches scan; one bringing an index up to date leaves
    it usable, and the next search or build goes on from it). Cost: O(store) the first
    time; after that, a JSONL build reads what changed since (``rebuild`` also drops the
    entries of lines that changed or went away: ``dead_entries``)."""
    if isinstance(store, SessionStore):
        if rebuild:
            ftsindex.drop(store._root)
        ftsindex.build(store._root)
    elif isinstance(store, SqliteSessionStore):
        with store._db.write(None) as c:
            sqlite_fts.create(c, rebuild=rebuild)
    elif _is_postgres(store):
        from .postgres import trgm

        built = trgm.build(store, rebuild=rebuild)
        if built.problem is not None:
            return IndexStatus("postgres", False, f"index {store._schema}.{trgm.INDEX}", -1, 0, 0, built.problem)
    return index_status(store)


def drop_index(store: Any) -> bool:
    """Remove the store's index (searches scan again); whether there was one."""
    if isinstance(store, SessionStore):
        return ftsindex.drop(store._root)
    if isinstance(store, SqliteSessionStore):
        with store._db.write(None) as c:
            return sqlite_fts.drop(c)
    if _is_postgres(store):
        from .postgres import trgm

        return trgm.drop(store)
    return False


__all__ = ["IndexStatus", "build_index", "drop_index", "index_status"]
