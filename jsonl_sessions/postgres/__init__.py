"""The PostgreSQL backend: every session of a store in one schema of a PostgreSQL database
(psycopg 3 with psycopg_pool; ``pip install 'jsonl-sessions[postgres]'``).

``PostgresSessionStore(dsn, schema="jsonl_sessions", durability="fsync", ...)`` has the
API, the semantics and the errors of :class:`jsonl_sessions.SessionStore`;
``AsyncPostgresSessionStore`` is its asyncio twin. See docs/postgres.md for the schema,
the guard (transaction-level advisory locks), durability, timeouts and pooling.
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on the environment
    from ..extras import install_hint

    raise ImportError(f"jsonl_sessions.postgres needs psycopg 3 and psycopg_pool: {install_hint('postgres')}") from _exc

from ..verification import Finding, VerifyReport
from .schema import MIGRATIONS, SCHEMA_VERSION, SchemaError
from .store import AsyncPostgresSessionStore, PostgresSessionStore

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "AsyncPostgresSessionStore",
    "Finding",
    "PostgresSessionStore",
    "SchemaError",
    "VerifyReport",
]
