"""The SQLite backend (``jsonl_sessions.sqlite.SqliteSessionStore``) as one more row of
``python -m benchmarks`` and ``python -m benchmarks.history``.

Each row runs the backend's public method on a store file of its own in the group's
directory, on the same messages as the ``jsonl_sessions`` row (a session built there is
copied in with :func:`jsonl_sessions.sqlite.migrate`'s ``import_session``, rows verbatim),
with the durability of the group (``fsync`` = ``synchronous=FULL``, ``flush`` = ``NORMAL``).
"""

from __future__ import annotations

import os

from jsonl_sessions import SessionStore
from jsonl_sessions.sqlite import SqliteSessionStore, export_session, import_session
from jsonl_sessions.types import Durability

#: The row id in every group.
ROW = "jsonl_sessions_sqlite"


def open_backend(directory: str, mode: Durability, name: str = "backend.db") -> SqliteSessionStore:
    """A SQLite-backend store in ``directory`` with durability ``mode``."""
    return SqliteSessionStore(os.path.join(directory, name), durability=mode)


def label(what: str, mode: str) -> str:
    """The row's label: the method and the durability mapping."""
    sync = "FULL" if mode == "fsync" else "NORMAL"
    return f'jsonl_sessions.sqlite {what}, durability="{mode}" (WAL, sync={sync})'


def mirror(source: SessionStore, target: SqliteSessionStore, key: str) -> None:
    """Copy session ``key`` of the JSONL store into the SQLite one (replacing it)."""
    snapshot = export_session(source, key)
    if snapshot is None:
        raise RuntimeError(f"no session {key!r} to mirror")
    target.delete_session(key)
    import_session(target, snapshot)
