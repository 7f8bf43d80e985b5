"""The SQLite backend: every session of a store in one database file (stdlib ``sqlite3``).

``SqliteSessionStore(path, durability="fsync", lock_timeout=30.0)`` has the API, the
semantics and the errors of :class:`jsonl_sessions.SessionStore`; see docs/sqlite.md for
the schema, the durability mapping and what :meth:`~SqliteSessionStore.verify` checks.
"""

from __future__ import annotations

from ..verification import Finding, VerifyReport
from .migrate import MigrateReport, export_session, import_session, migrate
from .schema import SCHEMA_VERSION, SchemaError
from .store import SessionSnapshot, SqliteSessionStore

__all__ = [
    "SCHEMA_VERSION",
    "Finding",
    "MigrateReport",
    "SchemaError",
    "SessionSnapshot",
    "SqliteSessionStore",
    "VerifyReport",
    "export_session",
    "import_session",
    "migrate",
]
