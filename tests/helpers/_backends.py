"""Checks shared by the tests of the database backends (SQLite, PostgreSQL)."""

from __future__ import annotations

import inspect
from typing import Any

from jsonl_sessions.protocol import SessionBackend, backend_methods

#: The public methods a database store has beyond the backend contract.
DATABASE_EXTRAS = {"close", "compaction_report", "export_session", "import_session", "lock"}


def assert_database_backend(cls: type, store: Any) -> None:
    """``store`` (an instance of ``cls``) is a :class:`SessionBackend` whose methods have the
    contract's signatures, and ``cls`` has no public method but those and the extras."""
    backend: SessionBackend = store
    assert isinstance(backend, SessionBackend)
    for name in [*backend_methods(), "close"]:
        assert inspect.signature(getattr(cls, name)) == inspect.signature(getattr(SessionBackend, name)), name
    public = {n for n, v in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}
    assert public - set(backend_methods()) == DATABASE_EXTRAS
