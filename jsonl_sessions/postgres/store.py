"""PostgresSessionStore: the session store in a PostgreSQL schema, put together.

The core (connections, guard, append/load/rewrite/replace) is in base.py and db.py; the
history API and pages in history.py; metadata and lifecycle in metadata.py (over the
shared :mod:`jsonl_sessions.base`); the health check in verify.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..aio import AsyncSessionStore
from ..verification import VerifyReport, wanted_keys
from .history import HistoryMethods
from .metadata import MetadataMethods
from .verify import verify


class PostgresSessionStore(HistoryMethods, MetadataMethods):
    """Sessions in a PostgreSQL schema, with the API, semantics and errors of
    :class:`jsonl_sessions.SessionStore`.

    ``PostgresSessionStore(dsn=None, *, pool=None, schema="jsonl_sessions",
    durability="fsync", lock_timeout=30.0, statement_timeout=60.0, connect_timeout=10.0,
    pool_size=10, prepare_threshold=5, keepalives_idle=30, application_name="jsonl_sessions",
    max_message_bytes=16 MiB, clock=None)``: a libpq DSN (the store keeps a pool per process) or a
    :class:`psycopg_pool.ConnectionPool` of the caller's (autocommit connections are
    not required: every transaction is explicit). The schema is created and migrated on
    first use. Thread-safe; any number of processes and machines may use one schema.

    - Every mutation is one transaction under the session's guard (a transaction-level
      advisory lock on the key; two keys in sorted order): all or nothing, also when the
      client dies mid-transaction. ``durability="fsync"``: ``synchronous_commit = on``
      (durable on the server when it returns); ``"flush"``: ``off`` (a server crash may
      lose the last commits, never half of one).
    - Appends to different sessions never wait on each other; writers of one session
      wait up to ``lock_timeout`` (then :class:`LockTimeoutError`). :meth:`lock` holds the
      guard on a pinned connection (see :mod:`jsonl_sessions.postgres.db`); each call
      inside the block commits on its own, durable and visible before the block ends.
    - Messages are stored as the exact JSON lines the JSONL backend writes (``text``), so
      an export is byte-identical; counts are O(1), id lookups O(log n), windows and pages
      O(log n + page).
    - A server that cannot be reached, a broken connection or a statement past
      ``statement_timeout``: :class:`DatabaseUnavailableError` (nothing committed); a
      connection lost during COMMIT: :class:`OutcomeUnknownError`.
    """

    def verify(self, keys: Iterable[str] | None = None, *, fix: bool = False) -> VerifyReport:
        # The store's invariants in one snapshot (jsonl_sessions.postgres.verify); nothing
        # found here is fixable.
        wanted = wanted_keys(keys)
        return self._db.read(lambda c: verify(c, self._s, self._path, wanted))


class AsyncPostgresSessionStore(AsyncSessionStore):
    """``AsyncPostgresSessionStore(dsn, **options)``: a :class:`PostgresSessionStore` whose
    methods are coroutines (the :class:`~jsonl_sessions.protocol.AsyncSessionBackend`
    contract), each run in a worker thread over the store's thread-safe pool, so the event
    loop never waits on the network, the server or a session's guard.

    Why threads and not psycopg's async connections: the store's logic (ids under the
    guard, strict checks, pages) is one code path for both, and a worker thread costs
    microseconds next to a round trip to the server; the guard and the pool are the
    same. ``await AsyncPostgresSessionStore.open(dsn, ...)`` connects and migrates in a
    worker thread; :meth:`run` runs several calls under ``lock(key)`` in one thread."""

    def __init__(self, dsn: str | None = None, **options: Any) -> None:
        self._store = PostgresSessionStore(dsn, **options)

    @classmethod
    async def open(cls, dsn: str | None = None, **options: Any) -> AsyncPostgresSessionStore:  # type: ignore[override]
        """Create the store (connect, migrate) in a worker thread."""
        store = await asyncio.to_thread(PostgresSessionStore, dsn, **options)
        self = cls.__new__(cls)
        self._store = store
        return self

    @property
    def sync(self) -> PostgresSessionStore:
        """The blocking store underneath."""
        assert isinstance(self._store, PostgresSessionStore)
        return self._store


if TYPE_CHECKING:  # mypy checks that the stores satisfy the backend contracts
    from ..protocol import AsyncSessionBackend, SessionBackend

    def _is_a_backend(store: PostgresSessionStore) -> SessionBackend:
        return store

    def _is_an_async_backend(store: AsyncPostgresSessionStore) -> AsyncSessionBackend:
        return store


__all__ = ["AsyncPostgresSessionStore", "PostgresSessionStore"]
