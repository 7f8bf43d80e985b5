"""Lock-free consistent reads of a session, and counting its lines.

Readers take no lock. :func:`consistent` reads the control file's sequence counter, runs
the read, and reads the counter again; when it was odd (an in-place rewrite running) or
moved meanwhile, the read is retried, so a reader never sees bytes spliced from two
states. Single-line appends never touch the counter: a reader sees a prefix, and an
append in progress is a torn tail, which readers ignore.

While a durable append is between its write and the end of its fsync, the control
file's visible end says how many transcript bytes are durable: readers use only those
(the appended lines are not returned before they are durable, so a line whose fsync
fails and is rolled back was never seen), and never wait for the fsync. One found while
the guard is free is stale, and cleared first (as below).

Two states are never returned: the one a committed roll-forward record replaces (the
reader first takes the guard for a moment, if free, which completes the record), and
one behind a counter left odd by a dead writer (after 0.2 s the reader takes the guard,
if free, which makes it even). When that recovery fails with an I/O error, the reader
raises it (``OSError``) instead of reading files that may be half-way between states.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TypeVar

from .. import _platform
from ..errors import SessionStoreError
from .control import Head, read_head
from .layout import SessionFiles
from .lines import count_newlines
from .txn import Root, acquire, try_recover

_T = TypeVar("_T")
#: How long a reader waits on an odd counter before it tries to recover it.
READ_RETRY_SECONDS = 0.2


def consistent(root: Root, files: SessionFiles, read: Callable[[Head], _T]) -> _T:
    """``read(head)`` (a lock-free read of the session's files, given the control file as
    it was just before) run until no in-place mutation overlapped it."""
    started = time.monotonic()
    delay = 0.0001
    completed = False
    while True:
        head = read_head(files.lock, key=files.key)
        if (head.pending or head.visible is not None) and not completed:
            # A committed record: its mutation counts as done, so the state it replaces
            # must not be returned. If its writer died, taking the guard (if free)
            # completes it; if the guard is held, the writer is still running and the
            # state before its mutation is still the current one. An I/O error while
            # completing it is raised: the files may be half-way between the two states.
            # A visible end likewise: held, its append is in flight (read up to it);
            # free, it is stale (a dead writer's, or one a power loss kept): recovery
            # clears it, so no acknowledged line is hidden (best effort: a reader that
            # cannot clear it reads up to it, a durable state).
            completed = True
            try_recover(root, files, strict=head.pending)
            continue
        if not head.seq & 1:
            result = read(head)
            after = read_head(files.lock, key=files.key)
            # A visible end that appeared during the read: the read may hold bytes not yet durable.
            if after.seq == head.seq and (after.visible is None or head.visible is not None):
                return result
        elif time.monotonic() - started > READ_RETRY_SECONDS:
            # Its writer may have died: recovery makes it even (an I/O error doing so is
            # raised, rather than waiting on a counter nothing can make even).
            try_recover(root, files, strict=True)
            started = time.monotonic()
        time.sleep(delay)
        delay = min(delay * 2, 0.005)


def with_transcript(root: Root, files: SessionFiles, read: Callable[[int, int], _T]) -> _T | None:
    """``read(fd, size)`` on the transcript opened read-only, consistently (see
    :func:`consistent`); None when the session does not exist. An error from ``read``
    (SessionStoreError, ValueError, LookupError) is raised only once the counter says it
    came from a stable state (one raised while a truncation ran is retried)."""

    def attempt(head: Head) -> tuple[_T | None, Exception | None] | None:
        try:
            return _on_transcript(files, lambda fd, st: (read(fd, head.visible_size(st.st_size)), None))
        except (SessionStoreError, ValueError, LookupError) as exc:
            return None, exc

    outcome = consistent(root, files, attempt)
    if outcome is None:
        return None
    result, error = outcome
    if error is not None:
        raise error
    return result


def _on_transcript(files: SessionFiles, use: Callable[[int, os.stat_result], _T]) -> _T | None:
    """``use(fd, fstat)`` on the transcript opened read-only (closed after); None when missing."""
    opened = files.open_transcript(os.O_RDONLY)
    if opened is None:
        return None
    fd, st = opened
    try:
        return use(fd, st)
    finally:
        _platform.close(fd)


def read_transcript(root: Root, files: SessionFiles) -> bytes | None:
    """The transcript's bytes, never spliced by an in-place mutation; None when missing."""
    return with_transcript(root, files, lambda fd, size: _platform.pread(fd, size, 0))


def count(root: Root, files: SessionFiles) -> int | None:
    """How many complete lines the transcript holds; None when the session does not exist.
    Takes no lock. O(1) while the count cache matches the file (inode, size, mtime and
    counter); otherwise one newline count (O(transcript), no parsing), stored in the
    cache if the guard is free and nothing changed meanwhile."""
    counted = count_with_size(root, files)
    return None if counted is None else counted[0]


def count_with_size(root: Root, files: SessionFiles) -> tuple[int, int] | None:
    """:func:`count`, with the transcript size (bytes) the count describes: the file's
    size, or less while a durable append is in flight (its line is not counted yet). Also
    O(1) then: the count cache describes the file as it was when the append began."""
    seen: list[int] = []

    def read(head: Head) -> tuple[int, int, os.stat_result | None] | None:
        seen.append(head.seq)

        def lines(fd: int, st: os.stat_result) -> tuple[int, int, os.stat_result | None]:
            size = head.visible_size(st.st_size)
            cache = head.cache
            if size != st.st_size:  # an append not yet durable: count what is, store nothing
                # Its write moved the file's mtime, so the cache cannot match in full; the
                # bytes it describes are the durable ones if inode, size and counter agree.
                if cache is not None and (cache.ino, cache.size, cache.seq) == (st.st_ino, size, head.seq):
                    return cache.lines, size, None
                return count_newlines(fd, 0, size), size, None
            if cache is not None and cache.matches(st, head.seq):
                return cache.lines, size, None
            return count_newlines(fd, 0, size), size, st

        return _on_transcript(files, lines)

    result = consistent(root, files, read)
    if result is None:
        return None
    lines, size, counted = result
    if counted is not None:
        _store_count(root, files, counted, lines, seen[-1])
    return lines, size


def _store_count(root: Root, files: SessionFiles, counted: os.stat_result, lines: int, seq: int) -> None:
    """Write a full count into the cache, if the guard is free and the file is unchanged."""
    with contextlib.suppress(SessionStoreError, OSError):
        guard = acquire(root, files, timeout=0)
        try:
            now = _platform.lstat(files.transcript)
            if guard.seq == seq and (now.st_ino, now.st_size, now.st_mtime_ns) == (
                    counted.st_ino, counted.st_size, counted.st_mtime_ns):
                guard.write_count(counted, lines)
        finally:
            guard.release()
