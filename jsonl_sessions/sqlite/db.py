"""Connections and transactions of the SQLite backend (stdlib ``sqlite3`` only).

- One connection per thread (and per process: a connection is never used across a
  fork), opened lazily, in autocommit mode so that every transaction is explicit.
- The file is in WAL mode. ``durability="fsync"`` maps to ``synchronous=FULL`` (a commit
  is fsynced to the WAL before it returns: it survives a power loss), ``"flush"`` to
  ``synchronous=NORMAL`` (a commit survives a process crash; the WAL is fsynced at
  checkpoints, so the last commits may be lost on a power loss).
- Writers: the guard across threads and processes is an exclusive ``flock`` on the
  writers' lock file ``<path>-lock`` (each thread opens its own descriptor, so threads
  exclude each other too; the kernel drops a dead holder's lock). It is one lock for the
  whole file (not one per session). Every write transaction takes it, then ``BEGIN
  IMMEDIATE`` (SQLite's write lock, which then only waits for a writer that does not
  use the lock file: another tool or an older version), and gives it back after the
  ``COMMIT``. :meth:`Database.hold` keeps it for a block (``lock(key)``): the calls
  inside are still one transaction each, committed (durable) when each returns, while
  other writers wait for the whole block. Waiting is bounded by ``lock_timeout``, then
  :class:`LockTimeoutError` (naming the holder's pid where the platform tells). A write
  nested in another on one thread (a method called by another method) runs in a
  ``SAVEPOINT`` of the open transaction, so a failing inner call is undone alone.
- Readers: a deferred ``BEGIN`` around the statements of one call, so a call reads one
  snapshot (WAL readers take no lock and never block or wait for writers).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator

from .. import _platform
from ..errors import LockTimeoutError
from ..types import Durability
from . import fts
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
    guard_fd: int = -1  # this thread's descriptor of the writers' lock file
    holding: int = 0  # hold() blocks open on this thread (nested: counted)


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
                   "call; nothing it did was committed")


_FIRST_DELAY = 0.0001
_MAX_DELAY = 0.005
#: Every open Database of the process, for the fork handler.
_OPEN: weakref.WeakSet[Database] = weakref.WeakSet()


def _forget_parent_guards() -> None:
    """In a forked child: close the lock-file descriptors inherited from the parent (never
    unlock them: that would free the parent's lock), so a child that outlives a parent
    killed inside a lock() block does not keep its lock held."""
    for db in list(_OPEN):
        db.close_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_guards)


class Database:
    """The store's file: per-thread connections, write and read transactions."""

    def __init__(self, path: str, *, durability: Durability, lock_timeout: float | None) -> None:
        self.path = path
        self._synchronous = "FULL" if durability == "fsync" else "NORMAL"
        self._lock_timeout = lock_timeout
        self._local = _Local()
        self._mutex = threading.Lock()
        self._conns: list[tuple[int, sqlite3.Connection]] = []  # (pid that opened it, connection)
        self._guard_fds: list[tuple[int, int]] = []  # (pid that opened it, lock-file descriptor)
        self.lock_path = path + "-lock"
        self._closed = False
        _OPEN.add(self)
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
        fts.register(conn)  # what the triggers of the optional full-text index call
        local.conn, local.pid, local.depth, local.reading = conn, os.getpid(), 0, 0
        local.guard_fd, local.holding = -1, 0
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
            fds, self._guard_fds = self._guard_fds, []
        for opener, conn in conns:
            if opener == pid:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
        for _opener, fd in fds:  # closing (never unlocking) an inherited one leaves the parent's lock alone
            with contextlib.suppress(OSError):
                _platform.close(fd)

    def close_inherited(self) -> None:
        """In a forked child: close the lock-file descriptors the parent opened."""
        pid = os.getpid()
        # another thread of the parent may have held the mutex at the fork, and it is
        # gone: a new one (the child has one thread), never a wait for the old one
        self._mutex = threading.Lock()
        inherited = [fd for opener, fd in self._guard_fds if opener != pid]
        self._guard_fds = [(opener, fd) for opener, fd in self._guard_fds if opener == pid]
        for fd in inherited:
            with contextlib.suppress(OSError):
                _platform.close(fd)

    # -- the writers' lock ----------------------------------------------------------------
    def _guard_fd(self) -> int:
        """This thread's descriptor of the writers' lock file (opened on first use)."""
        self.conn()  # a new thread state after a fork
        local = self._local
        if local.guard_fd == -1:
            fd = _platform.open_file(self.lock_path, os.O_RDWR | os.O_CREAT)
            with self._mutex:
                self._guard_fds.append((os.getpid(), fd))
            local.guard_fd = fd
        return local.guard_fd

    def _take(self, key: str | None) -> int:
        """Take the writers' lock for this thread, polling with a short backoff; its
        descriptor. :class:`LockTimeoutError` after ``lock_timeout``."""
        fd = self._guard_fd()
        if _platform.try_lock(fd):
            return fd
        deadline = None if self._lock_timeout is None else time.monotonic() + self._lock_timeout
        delay = _FIRST_DELAY
        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LockTimeoutError(key=key, path=self.path, timeout=self._lock_timeout,
                                           holder_pid=_platform.lock_holder(fd))
                time.sleep(min(delay, left))
            else:
                time.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)
            if _platform.try_lock(fd):
                return fd

    @contextlib.contextmanager
    def hold(self, key: str | None) -> Iterator[None]:
        """Keep the writers' lock for a block (re-entrant on a thread): other writers, of
        any thread or process, wait until it ends. Each write inside is still its own
        transaction, committed when it ends. :class:`LockTimeoutError` after ``lock_timeout``."""
        self.conn()
        local = self._local
        if local.reading or local.depth:
            raise RuntimeError("lock() cannot start inside a read or a write of the same thread")
        if local.holding:
            local.holding += 1
            try:
                yield
            finally:
                local.holding -= 1
            return
        fd = self._take(key)
        local.holding = 1
        try:
            yield
        finally:
            local.holding = 0
            _platform.unlock(fd)

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
    def write(self, key: str | None) -> Iterator[sqlite3.Connection]:
        """A write transaction under the writers' lock (``BEGIN IMMEDIATE``), committed
        when the block ends, rolled back when it raises. Nested on one thread: a
        savepoint. Raises :class:`LockTimeoutError` after ``lock_timeout``."""
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
        fd = None if local.holding else self._take(key)
        try:
            self._begin(conn, key)
            local.depth, local.aborted = 1, None
            try:
                with os_errors():
                    try:
                        yield conn
                    except BaseException:
                        if conn.in_transaction:
                            conn.rollback()
                        raise
                    if local.aborted is not None:  # what the nested calls did was lost with it: say so
                        if conn.in_transaction:
                            conn.rollback()
                        raise _aborted(local.aborted)
                    self._commit(conn)
            finally:
                local.depth, local.aborted = 0, None
        finally:
            if fd is not None:
                _platform.unlock(fd)

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
