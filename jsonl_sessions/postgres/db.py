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
    backend rolls back and the lock is free. Session-level advisory locks are never used
    (they outlive the transaction, leak to the next borrower of a pooled connection and
    mean nothing behind a transaction pooler). Session rows are also read ``FOR UPDATE``
    by the mutations, so operations over many sessions (attribution, TTL cleanup) are
    serialised with the per-session writers by row locks.

``lock(key)``
    The block's guard is a transaction on a pinned connection holding the key's advisory
    lock for the whole block. The calls inside the block run on other connections, each
    in its own transaction that commits when the call returns (durable and visible to
    everyone at once; it survives a SIGKILL of the client before the block ends); they do
    not take the key's lock again (it is held by this thread: taking it from another
    connection would wait for ourselves), but check, inside their transaction, that the
    pinned connection's backend still holds it, and raise
    :class:`DatabaseUnavailableError` when the guard was lost (the server ended the
    pinned connection).

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
    pid: int = 0
    held: dict[int, int]  # lock key -> backend pid of the pinned connection holding it

    def __init__(self) -> None:
        self.held = {}


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

    def _held(self) -> dict[int, int]:
        local = self._local
        if local.pid != os.getpid():
            local.pid, local.held = os.getpid(), {}
        return local.held

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        try:
            with self.pool().connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise DatabaseUnavailableError(dsn=self.dsn, reason=f"no connection within "
                                           f"{self._connect_timeout}s: {exc}") from None

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
        held = self._held()
        wanted = sorted({self.lock_key(k) for k in keys})
        take = [h for h in wanted if h not in held]
        pinned = sorted({held[h] for h in wanted if h in held})
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
                if replaced:
                    raise self._unavailable(stale.__cause__ or stale) from None
                replaced = True
                self.pool().check()
            except _RETRY as exc:
                attempt += 1
                if attempt > MAX_RETRIES:
                    raise self._unavailable(exc) from None
                time.sleep(min(0.5, 0.005 * 2 ** attempt) * (0.5 + random.random()))

    def _write_once(self, begin: str, has_first: bool, pinned: list[int],
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
                if pinned:
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
                if not started:
                    raise _Retry from exc
                raise self._unavailable(exc) from None
            except BaseException:
                self._rollback(conn)
                raise

    def _check_pinned(self, conn: Conn, pinned: list[int]) -> None:
        """Inside a lock() block: every pinned backend still holds its transaction (and so
        its advisory lock). Advisory locks of a transaction end only with it."""
        alive = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND xact_start IS NOT NULL",
                             (pinned,)).fetchone()
        if alive is None or alive[0] != len(pinned):
            raise DatabaseUnavailableError(dsn=self.dsn, reason="the connection holding this lock() block's guard "
                                           "was lost (its transaction ended); nothing of this call was committed")

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
        """Hold ``key``'s guard for a block (see the module docstring): a pinned connection
        in a transaction holding the advisory lock. Re-entrant in the holding thread."""
        held = self._held()
        h = self.lock_key(key)
        if h in held:
            yield
            return
        with self._connection() as conn:
            try:
                conn.execute(self._begin_write + f"; SELECT pg_advisory_xact_lock({h})")
            except pgerrors.LockNotAvailable:
                raise self._timed_out(conn, key) from None
            except psycopg.OperationalError as exc:
                self._rollback(conn)
                raise self._unavailable(exc) from None
            held[h] = conn.info.backend_pid
            try:
                yield
            finally:
                del held[h]
                self._rollback(conn)


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
