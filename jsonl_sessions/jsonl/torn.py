"""Cutting a torn tail without cutting anyone else's line.

A *torn tail* (bytes after the transcript's last newline) is either what a crash left of
an append (it will never grow) or a line another tool is writing right now without the
session's lock (docs/format.md, "Other writers"): a large ``write`` becomes visible to
other processes page by page, so a reader can see the first 20 KB of a 200 KB line.
Cutting the second kind back would delete that line, and every line its writer adds
meanwhile. So the store cuts a torn tail only when:

- it is *stable*: the file has not grown for :data:`STABLE_SECONDS` (a line in
  progress grows or completes within that; one that completes is no torn tail at all),
  or nobody modified it for :data:`OLD_SECONDS` before the store looked;
- its bytes were saved first (a quarantine file, fsynced with the directory);
- right before the cut, one ``fstat`` and one read show the file still exactly as saved
  (same size, same fragment bytes). Otherwise the saved copy is removed again (nothing
  was cut, so no quarantine file is left behind) and the tail is looked at afresh.

The cut itself is one ``ftruncate`` to the end of the last complete line, with the
sequence counter odd around it (and an ``fsync`` in ``"fsync"`` mode).

A writer that follows the protocol (takes the lock file's ``flock`` first, as
:func:`jsonl_sessions.outside.append_lines` and ``jsonl-sessions import KEY - --append`` do) is
never raced. For one that ignores it, the only bytes the store can remove are a fragment
that stood still for :data:`STABLE_SECONDS`, byte-identical to the saved copy a few
microseconds before the cut.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

from .. import _platform
from ..corruption import BOM
from ..errors import LockTimeoutError
from . import quarantine
from .control import in_place
from .guard import SessionGuard
from .layout import SessionFiles
from .lines import Tail, read_tail
from .root import Root

log = logging.getLogger("jsonl_sessions")

#: How long a torn tail must stay the same size before it is taken for a crash's leftover
#: rather than a line another process is still writing.
STABLE_SECONDS = 0.05
#: A transcript nobody modified for this long (by its modification time) holds no line in
#: progress: its torn tail is stable at once. Well above any file system's timestamp
#: granularity (FAT: 2 s), so a coarse clock never makes a fresh write look old.
OLD_SECONDS = 3.0
_POLL = 0.002


def save_torn(root: Root, files: SessionFiles, fd: int, tail: Tail, data: bytes | None = None) -> str | None:
    """Before a change that removes the torn tail of the transcript open as ``fd`` (a final
    fragment without its newline): copy its bytes to a quarantine file (fsynced, directory
    too) and log a warning naming the file and the byte count; the file's path. The
    fragment is usually an append a crash cut short, but it may be a whole message whose
    newline an outside truncate removed, so it is never cut unsaved. None, nothing
    written, when there is no torn tail (or it is only a leading byte-order mark). Raises
    ``OSError`` when the copy cannot be made: the caller's change must not run then.
    ``data``: the fragment when the caller read it already. Cost: O(torn bytes), and only
    when there is one."""
    if not tail.torn:
        return None
    if data is None:
        data = _platform.pread(fd, tail.size - tail.committed, tail.committed)
    if not data or (tail.committed == 0 and data == BOM):
        return None
    path = quarantine.save(files, data, root.clock())
    log.warning("session %r: saved the %d bytes of a torn tail (a last line without its newline) to %s "
                "before removing it", files.key, len(data), path)
    return path


def settle(root: Root, files: SessionFiles, fd: int, tail: Tail) -> tuple[Tail, os.stat_result | None]:
    """Wait until the transcript open as ``fd`` (``tail``: its end as last read) has no torn
    tail, or one that stayed unchanged for :data:`STABLE_SECONDS`; the tail then, and the
    ``fstat`` it was read at (None when ``tail`` was not torn: nothing read). A transcript
    last modified :data:`OLD_SECONDS` ago or more (a crash's leftover, usually) is stable
    at once. While the file keeps growing with a line in progress, the wait goes on, up to
    the store's ``lock_timeout`` (:class:`LockTimeoutError` naming the transcript). Cost:
    nothing without a torn tail; else one ``fstat``, and for a fresh one an ``fstat``
    every 2 ms (at least :data:`STABLE_SECONDS`) and a tail read each time it grew."""
    if not tail.torn:
        return tail, None
    started = quiet_since = time.monotonic()
    st = _platform.fstat(fd)
    if st.st_size == tail.size and time.time_ns() - st.st_mtime_ns >= OLD_SECONDS * 1e9:
        return tail, st
    while True:
        if st.st_size != tail.size:
            tail = read_tail(fd, st.st_size)
            if not tail.torn:
                return tail, st
            quiet_since = time.monotonic()
        now = time.monotonic()
        if now - quiet_since >= STABLE_SECONDS:
            return tail, st
        timeout = root.lock_timeout
        if timeout is not None and now - started > max(timeout, STABLE_SECONDS):
            raise LockTimeoutError(f"session {files.key!r}: another process keeps writing a line to "
                                   f"{files.transcript} without the session's lock", key=files.key,
                                   path=files.transcript, timeout=timeout)
        time.sleep(_POLL)
        st = _platform.fstat(fd)


def unchanged_since(fd: int, tail: Tail, fragment: bytes) -> bool:
    """Whether the transcript open as ``fd`` still ends in exactly ``fragment`` at
    ``tail.committed`` and is ``tail.size`` bytes long (one ``fstat``, one read)."""
    if _platform.fstat(fd).st_size != tail.size:
        return False
    return _platform.pread(fd, len(fragment) + 1, tail.committed) == fragment


def cut_torn(root: Root, files: SessionFiles, guard: SessionGuard, fd: int, tail: Tail) -> tuple[Tail, os.stat_result]:
    """Remove the torn tail of the transcript open as ``fd``, whose guard the caller holds
    (``tail``: its end as read): settled (:func:`settle`), saved to a quarantine file, checked
    unchanged, cut (counter odd; fsynced when durable). Returns the transcript's tail and
    ``fstat`` after, without a torn tail, and maybe longer than before (a line in progress
    completed: then that line is kept, and nothing of it saved). Keeps the count cache
    when it matched. Raises ``OSError`` (nothing cut) when the copy cannot be made, and
    :class:`LockTimeoutError` as :func:`settle`. Cost: nothing without a torn tail."""
    st: os.stat_result | None = None
    while tail.torn:
        tail, st = settle(root, files, fd, tail)
        if not tail.torn:
            break
        assert st is not None
        fragment = _platform.pread(fd, tail.size - tail.committed, tail.committed)
        saved = save_torn(root, files, fd, tail, fragment)
        if not unchanged_since(fd, tail, fragment):
            # The file moved after the copy: a line in progress after all. Nothing is cut,
            # so its copy goes again (no quarantine file for a cut that did not happen).
            if saved is not None:
                with contextlib.suppress(OSError):
                    _platform.unlink(saved)
            st = _platform.fstat(fd)
            tail = read_tail(fd, st.st_size)
            continue
        cache = guard.count
        lines = cache.lines if cache is not None and cache.matches(st, guard.seq) else None
        guard.changes += 1
        with in_place(guard):
            _platform.truncate(fd, tail.committed)
            if root.durable:
                _platform.fsync(fd)
        st = _platform.fstat(fd)
        if st.st_size == tail.committed:
            if lines is not None:
                with contextlib.suppress(OSError):
                    guard.write_count(st.st_ino, st.st_size, lines)
            tail = Tail(tail.committed, tail.committed, tail.last_start, tail.last_line)
        else:  # another line landed right after the cut (a writer ignoring the lock)
            tail = read_tail(fd, st.st_size)
    return tail, st if st is not None else _platform.fstat(fd)


__all__ = ["OLD_SECONDS", "STABLE_SECONDS", "cut_torn", "save_torn", "settle", "unchanged_since"]
