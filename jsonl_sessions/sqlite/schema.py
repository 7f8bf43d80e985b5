"""The SQLite backend's schema, its version, and the steps that bring an older file up to it.

Tables (docs/sqlite.md has the details):

- ``sessions(id, key, meta, message_count, size_bytes, activity_ns)``: one row per
  session; ``key`` is the original session key (unique), ``meta`` the metadata object (the
  JSONL sidecar's fields), ``message_count`` / ``size_bytes`` are kept by every writer so
  counts are O(1), ``activity_ns`` is the wall-clock time of the last change.
- ``messages(session, seq, id, created_at, role, kind, line)``: one row per message;
  ``seq`` is its 0-based position (dense: 0..message_count-1), ``line`` the exact JSON
  line (no newline). Indexed by ``(session, seq)`` (primary key) and ``(session, id)``.
- ``quarantine(repair, session_key, taken_at, seq, line)``: every row of a session that
  ``compact(repair=True)`` rewrote, kept verbatim (nothing is deleted silently); ``repair``
  numbers the repairs (1, 2, ...).
- ``sessions_by_activity`` indexes ``(activity_ns / 1000, key)``: the listing by
  ``updated_at`` (version 3).

The file is marked with ``PRAGMA application_id`` and versioned with ``PRAGMA
user_version``. Opening a file of an older version runs the migration steps in order,
in one transaction; a newer version, or a file that holds other tables, is refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ..errors import SessionStoreError

#: ``PRAGMA application_id`` of a session store ("JSNL").
APPLICATION_ID = 0x4A534E4C
#: The schema version this code writes (``PRAGMA user_version``).
SCHEMA_VERSION = 3

_V1 = (
    """CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        meta BLOB NOT NULL,
        message_count INTEGER NOT NULL DEFAULT 0,
        size_bytes INTEGER NOT NULL DEFAULT 0,
        activity_ns INTEGER NOT NULL
    )""",
    """CREATE TABLE messages (
        session INTEGER NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        id TEXT,
        created_at INTEGER,
        role TEXT,
        kind TEXT,
        line BLOB NOT NULL,
        PRIMARY KEY (session, seq)
    )""",
    "CREATE INDEX messages_by_id ON messages(session, id, seq)",
)

_V2 = (
    """CREATE TABLE quarantine (
        repair INTEGER NOT NULL,
        session_key TEXT NOT NULL,
        taken_at INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        line BLOB NOT NULL
    )""",
)


_V3 = (
    # The listing by updated_at (the activity in microseconds), key: a sidebar's page
    # is a seek and a short scan of this index.
    "CREATE INDEX sessions_by_activity ON sessions(activity_ns / 1000, key)",
)


def _step(statements: tuple[str, ...]) -> Callable[[sqlite3.Connection], None]:
    def run(conn: sqlite3.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return run


#: ``MIGRATIONS[v]`` brings a file from version ``v`` to ``v + 1`` (0: a new, empty file).
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {0: _step(_V1), 1: _step(_V2), 2: _step(_V3)}


class SchemaError(SessionStoreError):
    """The file is not a session store this version can open (another application's
    database, or a newer schema)."""

    _fields = ("path", "reason")
    _template = "cannot open {path} as a session store: {reason}"
    path: str | None
    reason: str | None


def is_current(conn: sqlite3.Connection) -> bool:
    """Whether the file is a store of the current schema (no write needed to open it)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    return bool(version == SCHEMA_VERSION and conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID)


def upgrade(conn: sqlite3.Connection, path: str) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION` (call inside a write transaction); the
    version found. Raises :class:`SchemaError` for a newer version or a foreign file."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SchemaError(path=path, reason=f"its schema version {version} is newer than this version of "
                          f"jsonl_sessions reads ({SCHEMA_VERSION}); upgrade to open it")
    if app not in (0, APPLICATION_ID) or (app == 0 and version != 0):
        raise SchemaError(path=path, reason=f"it belongs to another application (application_id {app})")
    if version == 0:
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchone()[0]
        if tables:
            raise SchemaError(path=path, reason="it already holds tables of another application")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    for v in range(version, SCHEMA_VERSION):
        MIGRATIONS[v](conn)
    if version != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return int(version)
