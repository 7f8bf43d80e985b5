"""Connections, transactions and the per-session guard of the PostgreSQL backend (psycopg 3).

Connections
    A :class:`psycopg_pool.ConnectionPool` per process: the store builds one from a DSN
    lazily in each process id that uses it (a pool's sockets and threads never cross a
    fork; a child leaves its parent's pool alone and opens its own), or uses the pool the
    caller passes (then fork safety is the caller's: do not use it in a forked child).
    Connections are in autocommit mode, every transaction is explicit. Timeouts and
    durability are set with ``SET LOCAL`` inside each transaction, never on the session,
    so nothing leaks to the next borrower of a pooled connection and a transaction
    pooler (PgBouncer) sees no session state; ``prepare_threshold=None`` turns server-side
    prepared statements off for poolers that cannot keep them.

Guard
    Every mutation is one transaction that first takes ``pg_advisory_xact_lock`` on a
    64-bit hash of the schema and the session key (two keys: both, in sorted order, so
    two copies cannot deadlock), waiting at most ``lock_timeout`` (``SET LOCAL
    lock_timeout``; SQLSTATE 55P03 -> :class:`LockTimeoutError`). A transaction-level
    lock ends with its transaction, whatever happens to the client: a killed client's
    backend rolls back and the lock is free. Only a ``lock(key)`` block (below) holds a
    session-level lock, on a connection it keeps out of the pool until it has released it.
    Session rows are also read ``FOR UPDATE`` by the mutations, so operations over many
    sessions (attribution, TTL cleanup) are serialised with the per-session writers by
    row locks.

``lock(key)``
    The block pins one pooled connection for its thread and takes the key's advisory lock
    there at session level (``pg_advisory_lock``, waiting at most ``lock_timeout``). Every
    call the thread makes inside the block, reads included, runs on that connection, each
    in its own transaction that commits when the call returns (durable and visible to
    everyone at once; it survives a SIGKILL of the client before the block ends). So a
    block never needs a second connection: ``pool_size`` threads in blocks at once cannot
    starve each other of connections. A nested block (another key, same thread) takes its
    lock on the same connection. The calls inside do not take the held key's lock again,
    but check in their transaction that they still run on the backend that took it
    (``pg_backend_pid()``): a connection ended by the server, or moved to another server
    connection by a transaction pooler, raises :class:`DatabaseUnavailableError` and
    nothing of the call is committed. The block's end releases the lock
    (``pg_advisory_unlock``); when that cannot be done the connection is closed, not given
    back to the pool, so the lock ends with its server session and never leaks to the
    next borrower.

Failures
    Serialization failures and deadlocks (40001, 40P01) are retried with a bounded
    backoff: they abort the transaction before it commits. A connection that turns out to
    be dead when a call starts (a server restart) is replaced once after checking the
    pool. A connection lost before COMMIT was sent: :class:`DatabaseUnavailableError`
    (nothing committed); lost during COMMIT: :class:`OutcomeUnknownError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import DatabaseUnavailableError, LockTimeoutError, OutcomeUnknownError
from ..types import Durability

T = TypeVar("T")
Conn = psycopg.Connection[Any]

#: Retries of a transaction aborted by a serialization failure or a deadlock.
MAX_RETRIES = 6
_RETRY = (pgerrors.SerializationFailure, pgerrors.DeadlockDetected)


def key_hash(schema: str, key: str) -> int:
    """The advisory-lock key of a session: a signed 64-bit hash of the schema and the key
    (schemas on one database do not share locks)."""
    digest = hashlib.blake2b(f"{schema}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _ms(seconds: float | None) -> int:
    return 0 if seconds is None else max(1, int(seconds * 1000))


def redacted(conninfo: str) -> str:
    """The DSN without its password, to name the server in errors."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


class _Local(threading.local):
    """A thread's lock() blocks: the connection they pinned, the server process that took
    their locks on it, and the lock keys held there."""

    pid: int = 0
    conn: Conn | None = None
    backend: int = 0
    held: set[int]

    def __init__(self) -> None:
        self.held = set()


class _Retry(Exception):
    """A stale pooled connection: run the transaction again on a fresh one."""


class Database:
    """The store's server: a pool per process, read and write transactions, the guard."""

    def __init__(
        self,
        conninfo: str | None,
        pool: ConnectionPool[Any] | None,
        *,
        schema: str,
        durability: Durability,
        lock_timeout: float | None,
        statement_timeout: float | None,
        connect_timeout: float,
        pool_size: int,
        prepare_threshold: int | None,
        keepalives_idle: int,
        application_name: str,
    ) -> None:
        if (conninfo is None) == (pool is None):
            raise ValueError("give a DSN or a pool (not both)")
        self.schema = schema
        self.lock_timeout = lock_timeout
        self._given_pool = pool
        self._conninfo = conninfo
        self.dsn = redacted(conninfo if conninfo is not None else str(getattr(pool, "conninfo", "")))
        self._connect_timeout = connect_timeout
        self._pool_size = pool_size
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": prepare_threshold,
            "connect_timeout": max(2, int(connect_timeout)),
            "keepalives": 1,
            "keepalives_idle": keepalives_idle,
            "keepalives_interval": max(1, keepalives_idle // 3),
            "keepalives_count": 3,
            "application_name": application_name,
        }
        sync = "on" if durability == "fsync" else "off"
        settings = (f"SET LOCAL synchronous_commit = {sync}; SET LOCAL lock_timeout = {_ms(lock_timeout)}; "
                    f"SET LOCAL statement_timeout = {_ms(statement_timeout)}")
        self._begin_write = "BEGIN; " + settings
        self._begin_read = ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
                            f"SET LOCAL statement_timeout = {_ms(statement_timeout)}")
        self._begin_read_one = f"BEGIN READ ONLY; SET LOCAL statement_timeout = {_ms(statement_timeout)}"
        self._pools: dict[int, ConnectionPool[Any]] = {}
        self._mutex = threading.Lock()
        self._local = _Local()
        self._closed = False

    # -- connections --------------------------------------------------------------------
    def pool(self) -> ConnectionPool[Any]:
        """This process's pool (a new one after a fork when the store made it)."""
        if self._closed:
            raise ValueError(f"the session store on {self.dsn} is closed")
        if self._given_pool is not None:
            return self._given_pool
        pid = os.getpid()
        found = self._pools.get(pid)
        if found is not None:
            return found
        with self._mutex:
            found = self._pools.get(pid)
            if found is None:
                found = ConnectionPool(self._conninfo or "", min_size=1, max_size=self._pool_size,
                                       kwargs=self._kwargs, timeout=self._connect_timeout, open=True,
                                       name=f"jsonl_sessions-{pid}")
                self._pools[pid] = found
        return found

    def close(self) -> None:
        """Close this process's pool (not a pool the caller passed, nor a parent's)."""
        with self._mutex:
            self._closed = True
            mine = self._pools.pop(os.getpid(), None)
            self._pools.clear()  # a parent's pools: their sockets belong to the parent
        if mine is not None:
            mine.close()

    def _blocks(self) -> _Local:
        """This thread's lock() blocks (none in a forked child: the parent's connection is
        the parent's)."""
        local = self._local
        if local.pid != os.getpid():
            local.pid, local.conn, local.held = os.getpid(), None, set()
        return local

    @contextlib.contextmanager
    def _pooled(self) -> Iterator[Conn]:
        try:
            with self.pool().connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise DatabaseUnavailableError(dsn=self.dsn, reason=f"no connection within "
                                           f"{self._connect_timeout}s: {exc}") from None

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        """The connection of a call: the one this thread's lock() block pinned, if any,
        else one from the pool."""
        pinned = self._blocks().conn
        if pinned is not None:
            yield pinned
            return
        with self._pooled() as conn:
            yield conn

    def _guard_lost(self) -> DatabaseUnavailableError:
        return DatabaseUnavailableError(dsn=self.dsn, reason="the connection holding this lock() block's guard "
                                        "was lost; nothing of this call was committed")

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailableError:
        return DatabaseUnavailableError(dsn=self.dsn, reason=str(exc).strip() or type(exc).__name__)

    def lock_key(self, key: str) -> int:
        return key_hash(self.schema, key)

    # -- transactions -------------------------------------------------------------------
    def write(self, keys: Sequence[str], fn: Callable[[Conn], T], *, name: str | None = None) -> T:
        """Run ``fn(conn)`` in one transaction holding the guard of every key in ``keys``
        (none: only row locks), committed when it returns, rolled back when it raises.
        Raises :class:`LockTimeoutError`, :class:`DatabaseUnavailableError`,
        :class:`OutcomeUnknownError`; retries 40001 / 40P01 (``fn`` may run again)."""
        return self.write_in_two(keys, None, lambda c, _row: (fn(c), None), name=name)

    def write_in_two(self, keys: Sequence[str], first: str | None, fn: Callable[[Conn, Any], tuple[T, str | None]],
                     *, name: str | None = None) -> T:
        """:meth:`write` in as few round trips as the server allows: ``first`` (a statement
        with its values inlined as literals) runs in the same request as BEGIN, the
        settings and the lock, and ``fn(conn, its first row)`` returns the result and a
        last statement (literals inlined, or None) sent with COMMIT. A call that needs
        nothing else costs two round trips."""
        blocks = self._blocks()
        wanted = sorted({self.lock_key(k) for k in keys})
        take = [h for h in wanted if h not in blocks.held]
        # inside a lock() block the call runs on its connection: check that it is still
        # the server process holding the block's locks
        pinned = blocks.backend if blocks.conn is not None else None
        begin = self._begin_write + "".join(f"; SELECT pg_advisory_xact_lock({h})" for h in take)
        if first is not None:
            begin += "; " + first
        label = name if name is not None else (keys[0] if keys else None)
        attempt = 0
        replaced = False
        while True:
            try:
                return self._write_once(begin, first is not None, pinned, fn, label)
            except _Retry as stale:
                if replaced or pinned is not None:
                    raise self._unavailable(stale.__cause__ or stale) from None
                replaced = True
                self.pool().check()
            except _RETRY as exc:
                attempt += 1
                if attempt > MAX_RETRIES:
                    raise self._unavailable(exc) from None
                time.sleep(min(0.5, 0.005 * 2 ** attempt) * (0.5 + random.random()))

    def _write_once(self, begin: str, has_first: bool, pinned: int | None,
                    fn: Callable[[Conn, Any], tuple[T, str | None]], label: str | None) -> T:
        with self._connection() as conn:
            committing = False
            started = False
            try:
                cur = conn.execute(begin, prepare=False)
                started = True
                row = None
                if has_first:
                    while cur.nextset():
                        pass
                    row = cur.fetchone()
                if pinned is not None:
                    self._check_pinned(conn, pinned)
                result, last = fn(conn, row)
                committing = True
                conn.execute("COMMIT" if last is None else last + "; COMMIT", prepare=False)
                return result
            except pgerrors.LockNotAvailable:
                raise self._timed_out(conn, label) from None
            except pgerrors.QueryCanceled as exc:
                self._rollback(conn)
                raise self._unavailable(exc) from None
            except psycopg.OperationalError as exc:
                if not conn.broken:
                    self._rollback(conn)
                    if isinstance(exc, _RETRY):
                        raise
                    raise self._unavailable(exc) from None
                if committing:
                    raise OutcomeUnknownError(dsn=self.dsn, reason=str(exc).strip()) from None
                if pinned is not None:
                    raise self._guard_lost() from None
                if not started:
                    raise _Retry from exc
                raise self._unavailable(exc) from None
            except BaseException:
                self._rollback(conn)
                raise

    def _check_pinned(self, conn: Conn, backend: int) -> None:
        """Inside a lock() block: the call runs on the server process that took the
        block's session-level locks (a transaction pooler may hand the client connection
        another one, which holds nothing)."""
        found = conn.execute("SELECT pg_backend_pid()").fetchone()
        if found is None or found[0] != backend:
            raise DatabaseUnavailableError(dsn=self.dsn, reason="this lock() block's calls no longer run on the "
                                           "server process holding its guard (a transaction pooler in front of the "
                                           "server? lock() needs a session-pooled or direct connection); nothing of "
                                           "this call was committed")

    def _timed_out(self, conn: Conn, label: str | None) -> LockTimeoutError:
        """The error for a lock wait past ``lock_timeout`` (SQLSTATE 55P03); the transaction
        is rolled back."""
        self._rollback(conn)
        return LockTimeoutError(key=label, path=self.dsn, timeout=self.lock_timeout, holder_pid=None)

    @staticmethod
    def _rollback(conn: Conn) -> None:
        if not conn.broken and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")

    def _reading(self, run: Callable[[Conn], T]) -> T:
        """``run(conn)`` on a pooled connection; a connection found broken is replaced once
        (after checking the pool: a server restart leaves dead ones) and the read run again
        (reads change nothing). Raises :class:`DatabaseUnavailableError`."""
        for attempt in (0, 1):
            with self._connection() as conn:
                try:
                    return run(conn)
                except psycopg.OperationalError as exc:
                    if conn.broken and self._blocks().conn is conn:
                        raise self._guard_lost() from None
                    if conn.broken and attempt == 0:
                        self.pool().check()
                        continue
                    self._rollback(conn)
                    raise self._unavailable(exc) from None
                except BaseException:
                    self._rollback(conn)
                    raise
        raise AssertionError("unreachable")

    def read_one(self, query: str) -> list[tuple[Any, ...]]:
        """The rows of one SELECT (values inlined as literals, see :func:`lit`), sent with
        BEGIN, its timeout and COMMIT in one request: one round trip. One statement sees
        one snapshot. Raises :class:`DatabaseUnavailableError`."""

        def run(conn: Conn) -> list[tuple[Any, ...]]:
            cur = conn.execute(f"{self._begin_read_one}; {query}; COMMIT", prepare=False)
            found: list[tuple[Any, ...]] = []
            while True:
                result = cur.pgresult
                if result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK:
                    found = cur.fetchall()
                if not cur.nextset():
                    return found

        return self._reading(run)

    def read(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn(conn)`` in one ``REPEATABLE READ READ ONLY`` transaction (one snapshot).
        Raises :class:`DatabaseUnavailableError`."""

        def run(conn: Conn) -> T:
            conn.execute(self._begin_read)
            result = fn(conn)
            conn.execute("COMMIT")
            return result

        return self._reading(run)

    @contextlib.contextmanager
    def guard(self, key: str) -> Iterator[None]:
        """Hold ``key``'s guard for a block (see the module docstring): a session-level
        advisory lock on the thread's pinned connection, which every call of the thread
        uses until the outermost block ends. Re-entrant in the holding thread."""
        blocks = self._blocks()
        h = self.lock_key(key)
        if h in blocks.held:
            yield
            return
        with contextlib.ExitStack() as stack:
            outermost = blocks.conn is None
            conn = stack.enter_context(self._pooled()) if outermost else blocks.conn
            assert conn is not None
            try:
                # SET LOCAL bounds the wait; a session-level lock outlives the transaction
                conn.execute(self._begin_write + f"; SELECT pg_advisory_lock({h})")
                backend = conn.execute("SELECT pg_backend_pid()").fetchone()
                conn.execute("COMMIT")
            except pgerrors.LockNotAvailable:
                raise self._timed_out(conn, key) from None
            except psycopg.OperationalError as exc:
                self._rollback(conn)
                self._close_holding(conn, h)
                raise self._unavailable(exc) from None
            except BaseException:
                self._rollback(conn)
                self._close_holding(conn, h)
                raise
            if outermost:
                assert backend is not None
                blocks.conn, blocks.backend = conn, int(backend[0])
            blocks.held.add(h)
            try:
                yield
            finally:
                blocks.held.discard(h)
                if outermost:
                    blocks.conn = None
                self._release(conn, h)

    def _release(self, conn: Conn, h: int) -> None:
        """End a block's hold of lock ``h``; a connection on which that cannot be done is
        closed (its server session ends and the lock with it), never reused."""
        self._rollback(conn)
        try:
            released = conn.execute(f"SELECT pg_advisory_unlock({h})").fetchone()
        except psycopg.Error:
            released = None
        if released != (True,):
            self._close_holding(conn, h)

    @staticmethod
    def _close_holding(conn: Conn, h: int) -> None:
        """Close a connection that may hold lock ``h`` at session level: the pool then
        drops it instead of handing the lock to its next borrower."""
        with contextlib.suppress(psycopg.Error):
            conn.close()

def lit(value: str | None) -> str:
    """A text value as an SQL literal, for statements sent with others in one request (the
    simple query protocol takes no parameters): an escape string (``E'...'``, read the
    same whatever ``standard_conforming_strings`` says) with every backslash and quote
    escaped, so nothing in it is read as an escape. The value holds no NUL (``text``
    cannot; see ``nul_free``)."""
    if value is None:
        return "NULL"
    if "\x00" in value:
        raise ValueError("a text literal cannot hold NUL")
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def text_array(values: Sequence[str | None]) -> str:
    """A ``text[]`` literal of ``values`` (see :func:`lit`)."""
    return "ARRAY[" + ",".join(map(lit, values)) + "]::text[]"


def bigint_array(values: Sequence[int | None]) -> str:
    """A ``bigint[]`` literal of ``values``."""
    return "ARRAY[" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "]::bigint[]"


def quoted(schema: str) -> str:
    """The schema name as an SQL identifier."""
    return sql.Identifier(schema).as_string(None)


__all__ = ["Conn", "Database", "bigint_array", "key_hash", "lit", "quoted", "redacted", "text_array"]
