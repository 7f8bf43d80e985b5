"""Connections and transactions of the SQLite backend (stdlib ``sqlite3`` only).

- One connection per thread (and per process: a connection is never used across a
  fork), opened lazily, in autocommit mode so that every transaction is explicit.
- The file is in WAL mode. ``durability="fsync"`` maps to ``synchronous=FULL`` (a commit
  is fsynced to the WAL before it returns: it survives a power loss), ``"flush"`` to
  ``synchronous=NORMAL`` (a commit survives a process crash; the WAL is fsynced at
  checkpoints, so the last commits may be lost on a power loss).
- Writers: ``BEGIN IMMEDIATE`` takes SQLite's write lock, which is the guard across
  threads and processes. It is one lock for the whole file (not one per session): a
  writer waits for any other writer, each holding it for one short transaction. The
  wait is bounded by ``lock_timeout`` (SQLite's busy timeout), then
  :class:`LockTimeoutError`. Nested writes on one thread (a method called inside
  :meth:`Database.lock`, or by another method) run in a ``SAVEPOINT`` of the open
  transaction, so a failing inner call is undone alone.
- Readers: a deferred ``BEGIN`` around the statements of one call, so a call reads one
  snapshot (WAL readers take no lock and never block or wait for writers).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
from collections.abc import Iterator

from ..errors import LockTimeoutError
from ..types import Durability
from .schema import SchemaError, is_current, upgrade

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # result codes (named in sqlite3 from Python 3.11 on)
#: The busy timeout used for ``lock_timeout=None`` (waited in a loop: forever).
_FOREVER_SLICE = 3600.0


class _Local(threading.local):
    conn: sqlite3.Connection | None = None
    pid: int = 0
    depth: int = 0  # open write transaction + savepoints on this thread
    aborted: OSError | None = None  # SQLite rolled the open transaction back (an I/O error inside it)
    reading: int = 0


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


#: SQLite result codes that are the file system's failures, as the errno they stand for.
_OS_ERRORS = {13: (errno.ENOSPC, "database or disk is full"), 10: (errno.EIO, "disk I/O error"),
              8: (errno.EROFS, "attempt to write a readonly database"), 14: (errno.EACCES, "unable to open database")}


@contextlib.contextmanager
def os_errors() -> Iterator[None]:
    """Raise the :class:`OSError` a SQLite error raised in the block stands for (see
    :func:`os_error`) in its place; any other error passes unchanged."""
    try:
        yield
    except sqlite3.Error as exc:
        mapped = os_error(exc)
        if mapped is not None:
            raise mapped from exc
        raise


def os_error(exc: BaseException) -> OSError | None:
    """The :class:`OSError` a SQLite error stands for (disk full, I/O error, read-only
    file, cannot open), so that callers catch file-system failures as with the JSONL
    backend; None for any other exception."""
    if not isinstance(exc, sqlite3.Error):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        found = _OS_ERRORS.get(code & 0xFF)
    else:  # Python < 3.11: by the message
        found = next((v for v in _OS_ERRORS.values() if v[1] in str(exc)), None)
    return None if found is None else OSError(found[0], f"{exc} (SQLite)")


def _aborted(cause: OSError) -> OSError:
    return OSError(cause.errno, f"{cause.strerror or cause}: SQLite rolled back the whole transaction of this "
                   "lock() block; nothing done inside it was committed")


class Database:
    """The store's file: per-thread connections, write and read transactions."""

    def __init__(self, path: str, *, durability: Durability, lock_timeout: float | None) -> None:
        self.path = path
        self._synchronous = "FULL" if durability == "fsync" else "NORMAL"
        self._lock_timeout = lock_timeout
        self._local = _Local()
        self._mutex = threading.Lock()
        self._conns: list[tuple[int, sqlite3.Connection]] = []  # (pid that opened it, connection)
        self._closed = False
        if not os.path.exists(path):  # created 0600 before SQLite opens it (its WAL files copy the mode)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            conn = self.conn()
            with self.read() as c:
                current = is_current(c)
        except sqlite3.DatabaseError as exc:  # not a database at all
            self.close()
            raise SchemaError(path=path, reason=str(exc)) from None
        if not current:  # first: a file that is not a store is refused unchanged
            with self.write(None) as c:
                upgrade(c, path)
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode=WAL")

    # -- connections --------------------------------------------------------------------
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (a new one after a fork)."""
        if self._closed:
            raise ValueError(f"the session store {self.path} is closed")
        local = self._local
        conn = local.conn
        if conn is not None and local.pid == os.getpid():
            return conn
        timeout = _FOREVER_SLICE if self._lock_timeout is None else self._lock_timeout
        conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False,
                               cached_statements=128)
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        local.conn, local.pid, local.depth, local.reading = conn, os.getpid(), 0, 0
        with self._mutex:
            self._conns.append((local.pid, conn))
        return conn

    def close(self) -> None:
        """Close every connection this process opened for the store (call when no thread
        uses it any more). Connections inherited across a fork are left alone: they belong
        to the parent."""
        pid = os.getpid()
        with self._mutex:
            self._closed = True
            conns, self._conns = self._conns, []
        for opener, conn in conns:
            if opener == pid:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    # -- transactions -------------------------------------------------------------------
    def _begin(self, conn: sqlite3.Connection, key: str | None) -> None:
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                if self._lock_timeout is None:
                    continue  # "forever": another slice of the busy timeout
                raise LockTimeoutError(key=key, path=self.path, timeout=self._lock_timeout,
                                       holder_pid=None) from None

    @contextlib.contextmanager
    def write(self, key: str | None, *, keep_on_error: bool = False) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``), committed when the block ends, rolled
        back when it raises (``keep_on_error``: committed anyway, for :meth:`lock` blocks:
        what the calls inside did stays done, as each of them committed). Nested on one
        thread: a savepoint. Raises :class:`LockTimeoutError` after ``lock_timeout``."""
        conn = self.conn()
        local = self._local
        if local.reading:
            raise RuntimeError("a write cannot start inside a read of the same thread")
        if local.depth:
            if local.aborted is not None:
                raise _aborted(local.aborted)
            name = f"sp{local.depth}"
            conn.execute(f"SAVEPOINT {name}")
            local.depth += 1
            try:
                yield conn
            except BaseException as exc:
                mapped = os_error(exc)
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute(f"ROLLBACK TO {name}")
                        conn.execute(f"RELEASE {name}")
                elif local.aborted is None:  # an I/O error rolled the whole transaction back
                    local.aborted = mapped or OSError(errno.EIO, str(exc))
                if mapped is not None:
                    raise mapped from exc
                raise
            else:
                conn.execute(f"RELEASE {name}")
            finally:
                local.depth -= 1
            return
        self._begin(conn, key)
        local.depth, local.aborted = 1, None
        try:
            with os_errors():
                try:
                    yield conn
                except BaseException:
                    if keep_on_error and conn.in_transaction and local.aborted is None:
                        self._commit(conn)
                    elif conn.in_transaction:
                        conn.rollback()
                    raise
                if local.aborted is not None:  # what the block's calls did was lost with it: say so
                    if conn.in_transaction:
                        conn.rollback()
                    raise _aborted(local.aborted)
                self._commit(conn)
        finally:
            local.depth, local.aborted = 0, None

    @staticmethod
    def _commit(conn: sqlite3.Connection) -> None:
        """COMMIT; on failure (the transaction is rolled back) the error is raised."""
        try:
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.rollback()
            raise

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: the statements of the block see one snapshot. Inside a write
        transaction of the same thread it is that transaction."""
        conn = self.conn()
        local = self._local
        if local.depth or local.reading:
            yield conn
            return
        conn.execute("BEGIN")
        local.reading = 1
        try:
            with os_errors():
                yield conn
        finally:
            local.reading = 0
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    @property
    def in_write(self) -> bool:
        """Whether this thread has a write transaction open."""
        return self._local.depth > 0 and self._local.pid == os.getpid()
