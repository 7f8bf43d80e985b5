"""Every operating-system call the store makes goes through this module.

It is the one seam for platform differences (fsync flavour, directory fsync, file
locking, "who holds this lock") and for fault injection: the store always calls these
functions as attributes of this module (``_platform.write(...)``), so a test or
:mod:`jsonl_sessions.testing` can replace one of them and make the Nth ``write``,
``fsync``, ``replace``, ``truncate``, ``unlink``, ``open`` or ``lstat`` fail. Existence
checks go through :func:`exists` (an ``lstat``), which raises on any error but absence:
an I/O error is never taken for "the file is not there".

Files are opened with ``O_NOFOLLOW`` (a symlink planted inside root is never followed)
and ``O_CLOEXEC``, and created with mode 0600.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterator

IS_WINDOWS = sys.platform == "win32"
IS_DARWIN = sys.platform == "darwin"

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NEW = os.O_CREAT | os.O_EXCL

#: Errors that mean "the path is a symlink (or not a plain file) and was not followed".
SYMLINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR, errno.EISDIR})
#: Errors of a non-blocking open that mean "not a regular file": a socket, a FIFO opened
#: for writing without a reader, a device without a driver.
NOT_REGULAR_ERRNOS = frozenset({errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP})


def open_file(path: str, flags: int, mode: int = 0o600) -> int:
    """Open ``path`` without following a final symlink; new files get ``mode``.

    Never waits in open(2): an existing file is opened with ``O_NONBLOCK``, since a FIFO
    (or a device) planted where a session file belongs would otherwise block the open
    forever. The descriptor keeps the flag until :func:`make_blocking`, which a caller
    runs once ``fstat`` showed a regular file (:func:`jsonl_sessions.jsonl.layout.open_regular`).
    A new file (``O_CREAT | O_EXCL``) is always a regular one: opened without it."""
    if flags & _O_NEW != _O_NEW:
        flags |= _O_NONBLOCK
    return os.open(path, flags | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY, mode)


def close(fd: int) -> None:
    os.close(fd)


#: ``fstat(2)`` of a descriptor. The C function itself (no Python frame: the append path
#: calls it on every append); a test still replaces it through this module's attribute.
fstat = os.fstat


def stat_of(path: str) -> os.stat_result:
    """``stat(2)`` of ``path``, following a symbolic link (for the store's own directory)."""
    return os.stat(path)


#: Stat a path itself (a symlink is not followed). The C function itself, as :data:`fstat`.
lstat = os.lstat


def exists(path: str) -> bool:
    """Whether ``path`` exists (itself: a dangling symlink exists). One :func:`lstat`.
    False only when the name is absent (``ENOENT``, ``ENOTDIR``); any other error
    (``EIO``, ``EACCES``...) raises, so an error is never taken for absence."""
    try:
        lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def is_dir(path: str) -> bool:
    """Whether ``path`` is a directory (a symlink to one counts). False when absent or
    not a directory; any other error raises, as in :func:`exists`."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


@contextlib.contextmanager
def scandir(path: str) -> Iterator[Iterator[os.DirEntry[str]]]:
    """``with scandir(path) as entries``: the entries of directory ``path``."""
    with os.scandir(path) as entries:
        yield entries


def listdir(path: str) -> list[str]:
    """The names in directory ``path``."""
    return os.listdir(path)


#: The most one read(2) returns on Linux (``MAX_RW_COUNT``; macOS caps at ``INT_MAX``): a
#: shorter read of a regular file ends at its end of file, a read this long may not.
_MAX_ONE_READ = 0x7FFFF000


def pread(fd: int, size: int, offset: int) -> bytes:
    """Read up to ``size`` bytes of the regular file ``fd`` at ``offset``: fewer only at its
    end. One system call, unless the request exceeds what one read returns (then it
    loops until EOF). Every descriptor the store reads is a regular file (checked at open),
    where a short read means end of file."""
    chunk = os.pread(fd, size, offset)
    if len(chunk) < _MAX_ONE_READ or len(chunk) == size:  # the first test decides, but for huge reads
        return chunk
    chunks = [chunk]
    while True:
        size -= len(chunk)
        offset += len(chunk)
        chunk = os.pread(fd, size, offset) if size > 0 else b""
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def write(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the descriptor's position (one syscall unless it is short)."""
    written = os.write(fd, data)
    if written == len(data):
        return
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        view = view[written:]


def pwrite(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (one syscall unless it is short)."""
    written = os.pwrite(fd, data, offset)
    if written == len(data):
        return
    view = memoryview(data)[written:]
    offset += written
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


if IS_DARWIN:  # pragma: no cover - not this machine
    import fcntl as _fcntl

    def fsync(fd: int) -> None:
        """Flush to stable storage: F_FULLFSYNC, since plain fsync on macOS stops at the drive cache."""
        try:
            _fcntl.fcntl(fd, _fcntl.F_FULLFSYNC)  # type: ignore[attr-defined]
        except OSError:
            os.fsync(fd)

else:

    def fsync(fd: int) -> None:
        """Flush the file's data and metadata to stable storage."""
        os.fsync(fd)


def fsync_dir(path: str) -> None:
    """Make a directory's entries (create, rename, unlink) durable. No-op on Windows."""
    if IS_WINDOWS:  # pragma: no cover - directories cannot be opened there
        return
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def replace(src: str, dst: str) -> None:
    """Atomically rename ``src`` over ``dst`` (same directory)."""
    os.replace(src, dst)


def truncate(fd: int, size: int) -> None:
    os.ftruncate(fd, size)


def unlink(path: str) -> None:
    os.unlink(path)


def fd_limit() -> int | None:
    """How many descriptors this process may have open (the soft ``RLIMIT_NOFILE``); None
    when unlimited or not known (Windows)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else soft


def makedirs(path: str, mode: int = 0o700) -> None:
    """Create directory ``path`` (and missing parents) with ``mode``; no error if it exists."""
    os.makedirs(path, mode=mode, exist_ok=True)


if sys.platform == "win32":  # pragma: no cover - not this machine (a literal check, so type checkers skip it)
    import filelock as _filelock

    def try_lock(fd: int) -> bool:
        """Take the exclusive lock on ``fd`` if free; never blocks."""
        return bool(_filelock.lock_descriptor(fd, blocking=False))

    def unlock(fd: int) -> None:
        _filelock.unlock_descriptor(fd)

    def make_blocking(fd: int, flags: int) -> None:
        """No ``O_NONBLOCK`` on Windows: nothing to clear."""

    def lock_holder(fd: int) -> int | None:
        return None

else:
    import fcntl as _fcntl

    # Looked up once: every append takes and releases the lock.
    _flock, _LOCK_EX_NB, _LOCK_UN = _fcntl.flock, _fcntl.LOCK_EX | _fcntl.LOCK_NB, _fcntl.LOCK_UN

    def try_lock(fd: int) -> bool:
        """Take the exclusive flock on ``fd`` if free; never blocks.

        flock locks belong to the open file description, so two descriptors (two
        store instances, or two processes) exclude each other; a crashed holder's lock
        is released by the kernel.
        """
        try:
            _flock(fd, _LOCK_EX_NB)
        except BlockingIOError:
            return False
        except OSError as exc:  # EWOULDBLOCK on some platforms is not BlockingIOError
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    def unlock(fd: int) -> None:
        _flock(fd, _LOCK_UN)

    def make_blocking(fd: int, flags: int) -> None:
        """Clear the ``O_NONBLOCK`` that :func:`open_file` set on ``fd``, opened with
        ``flags`` (one ``fcntl``: the status flags become ``flags``' ``O_APPEND`` alone).
        Linux and macOS ignore the flag on regular files; it is cleared all the same, so
        a file system that would honour it (FUSE, a lease) sees an ordinary descriptor."""
        _fcntl.fcntl(fd, _fcntl.F_SETFL, flags & os.O_APPEND)

    def lock_holder(fd: int) -> int | None:
        """The pid holding a flock on ``fd``'s file, where the platform tells (Linux /proc/locks)."""
        try:
            st = os.fstat(fd)
            with open("/proc/locks", encoding="ascii", errors="replace") as locks:
                lines = locks.read().splitlines()
        except OSError:
            return None
        for line in lines:
            parts = line.split()
            # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" (blocked waiters have "->")
            if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
                continue
            try:
                pid = int(parts[4])
                _major, _minor, inode = parts[5].split(":")
            except ValueError:
                continue
            if int(inode) == st.st_ino:
                return pid
        return None
