"""The PostgreSQL backend's schema, its version, and the ordered migrations.

Every table lives in the store's own schema (``schema=`` of the store, default
``jsonl_sessions``), so one database can hold several stores; docs/postgres.md has the
details:

- ``sessions(id, key, meta, agent_alias, principal_id, state, message_count, size_bytes,
  activity_ns)``: one row per session; ``key`` is the session key (unique through a hash
  index, so a key of any length is taken; a btree entry holds ~2.7 KB at most); ``meta`` the
  metadata object as JSON text (the JSONL sidecar's fields, byte for byte: ``jsonb``
  would reject a ``\\u0000`` in a name and reorder keys); ``agent_alias``, ``principal_id``
  and ``state`` are columns copied from it by every writer, for the statements that
  select on them; the counters make counts O(1); ``activity_ns`` is the client's wall
  clock at the last change.
- ``messages(session, seq, id, created_at, role, kind, line, folded)``: one row per
  message, deleted with its session (``ON DELETE CASCADE``); ``seq`` is its 0-based
  position (dense), ``line`` the exact JSON line (``text``, not ``jsonb``: the bytes must
  come back as written), ``folded`` its searchable text, case-folded by Python's
  ``str.casefold`` (NULL when the text holds a NUL or the line does not parse).
  Primary key ``(session, seq)``; a unique index on ``(session, md5(id))`` (any id
  length; a lookup by id also compares the id itself).
- ``quarantine(repair, session_key, taken_at, seq, line)``: the rows a repair rewrote.
- ``schema_version(version)``: one row, the version of the schema.
- Index ``sessions_by_activity`` (``activity_ns / 1000``) serves the listing by
  ``updated_at`` (version 3).

:data:`MIGRATIONS` is the ordered list of steps (step ``i`` brings version ``i`` to
``i + 1``). Opening a store runs the missing steps in one transaction that first takes a
fixed transaction-level advisory lock, so concurrent openers migrate once. Steps never
use ``CREATE INDEX CONCURRENTLY`` (it cannot run inside a transaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ..sqlite.schema import SchemaError

#: The schema version this code writes.
SCHEMA_VERSION = 3
#: The advisory-lock key migrations run under (the bytes "JSNLMIGR").
MIGRATION_LOCK = int.from_bytes(b"JSNLMIGR", "big", signed=True)

_V1 = (
    """CREATE TABLE {s}.sessions (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key text NOT NULL UNIQUE,
        meta text NOT NULL,
        agent_alias text,
        principal_id text,
        state text,
        message_count bigint NOT NULL DEFAULT 0,
        size_bytes bigint NOT NULL DEFAULT 0,
        activity_ns bigint NOT NULL
    )""",
    """CREATE TABLE {s}.messages (
        session bigint NOT NULL REFERENCES {s}.sessions(id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        id text,
        created_at bigint,
        role text,
        kind text,
        line text NOT NULL,
        folded text,
        PRIMARY KEY (session, seq),
        UNIQUE (session, id)
    )""",
    "CREATE INDEX sessions_by_alias ON {s}.sessions (agent_alias) WHERE agent_alias IS NOT NULL",
    """CREATE TABLE {s}.quarantine (
        repair bigint NOT NULL,
        session_key text NOT NULL,
        taken_at bigint NOT NULL,
        seq bigint NOT NULL,
        line text NOT NULL
    )""",
    "CREATE SEQUENCE {s}.repairs",
)

# Version 2: no value length limit. A btree entry holds at most ~2.7 KB, so a long session
# key, message id or agent alias could not be stored. Keys are unique through a hash
# index (an exclusion constraint: `key = ...` finds them through it, any length); a
# message id is unique per session on the MD5 of its text, and a lookup compares the
# value too; the alias index is a hash index.
_V2 = (
    "ALTER TABLE {s}.sessions DROP CONSTRAINT sessions_key_key",
    "ALTER TABLE {s}.sessions ADD CONSTRAINT sessions_key_unique EXCLUDE USING hash (key WITH =)",
    "ALTER TABLE {s}.messages DROP CONSTRAINT messages_session_id_key",
    "CREATE UNIQUE INDEX messages_by_id ON {s}.messages (session, md5(id))",
    "DROP INDEX {s}.sessions_by_alias",
    "CREATE INDEX sessions_by_alias ON {s}.sessions USING hash (agent_alias) WHERE agent_alias IS NOT NULL",
)

_V3 = (
    # The listing by updated_at (the activity in microseconds): a page is a seek and a short
    # scan, ties ordered by key COLLATE "C" (code point order, as Python's str) in an
    # incremental sort. No btree holds the key itself: an entry is capped at ~2.7 KB and a
    # key may be longer (version 2); a listing by key sorts the sessions' keys instead.
    "CREATE INDEX sessions_by_activity ON {s}.sessions ((activity_ns / 1000))",
)

#: ``MIGRATIONS[v]``: the statements that bring version ``v`` to ``v + 1`` (``{s}``: the schema).
MIGRATIONS: list[Sequence[str]] = [_V1, _V2, _V3]


def current_version(conn: psycopg.Connection[Any], s: str, name: str) -> int | None:
    """The schema's version; 0 for a missing or empty schema, None for a schema holding
    other tables and no version table (another application's)."""
    if conn.execute("SELECT to_regclass(%s)", (f"{s}.schema_version",)).fetchone() == (None,):
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (name,)).fetchone()
        return 0 if tables == (0,) else None
    row = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def upgrade(conn: psycopg.Connection[Any], s: str, name: str, where: str) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`, in one transaction under the migration
    lock; the version found. :class:`SchemaError` for a newer version or a foreign schema."""
    conn.execute(f"BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK}); CREATE SCHEMA IF NOT EXISTS {s}")
    try:
        version = current_version(conn, s, name)
        if version is None:
            raise SchemaError(path=where, reason=f"schema {name!r} already holds tables of another application")
        if version > SCHEMA_VERSION:
            raise SchemaError(path=where, reason=f"its schema version {version} is newer than this version of "
                              f"jsonl_sessions reads ({SCHEMA_VERSION}); upgrade to open it")
        if version == 0:
            conn.execute(f"CREATE TABLE {s}.schema_version (version integer NOT NULL)")
            conn.execute(f"INSERT INTO {s}.schema_version VALUES (0)")
        for step in MIGRATIONS[version:SCHEMA_VERSION]:
            for statement in step:
                conn.execute(statement.replace("{s}", s))
        conn.execute(f"UPDATE {s}.schema_version SET version = %s", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
        return version
    except BaseException:
        if not conn.broken:
            conn.execute("ROLLBACK")
        raise


__all__ = ["MIGRATIONS", "MIGRATION_LOCK", "SCHEMA_VERSION", "SchemaError", "current_version", "upgrade"]
