"""The per-session mutation guard, which holds the session's control file open and locked.

One guard per session (per lock file), shared by every :class:`SessionStore` in the
process: a ``threading.RLock`` (reentrant in a thread, exclusive across threads) plus an
exclusive ``flock`` on the session's lock file (exclusive across processes, released by
the kernel if the holder dies). Waiting polls the flock with a short exponential
backoff (0.1 ms doubling to 5 ms) until ``lock_timeout``, then raises
:class:`LockTimeoutError` naming the session and, on Linux, the holder's pid.

A lock file is unlinked only by :meth:`SessionGuard.retire` (lock files of sessions that
no longer exist, :mod:`jsonl_sessions.jsonl.prune`): while holding its flock, the remover writes
:data:`~jsonl_sessions.jsonl.control.RETIRED` into bytes 0-7, unlinks the path, and lets go of
the file. Anyone who still has the old file open and locks it afterwards reads the mark
in the head read that follows every flock, compares ``fstat`` of its descriptor with
``lstat`` of the path, and opens the path again when they differ. So no holder ever keeps
a lock on an unlinked file while another process locks the new file of that name, and
the common path pays nothing for it (the head is read anyway).

The lock file is also the session's *control file* (:mod:`jsonl_sessions.jsonl.control`):
while held, the guard keeps the counter, the count cache and the roll-forward record it
read when it was taken, and writes them.

Between mutations a guard may keep the transcript open (a :class:`TranscriptView`: the
descriptor and what the file looked like when the last mutation ended), so the next
mutation in this process skips the open and the tail read when one ``lstat`` shows the
same file (see :meth:`jsonl_sessions.jsonl.txn.Tx.open`). At most :data:`MAX_VIEWS` are kept
open in a process; they are closed on delete, on eviction, by ``SessionStore.close()``
and in a forked child.

Descriptors kept between calls (a lock file per guard, a transcript per view) are
bounded by the process's descriptor limit too, read when a store is created
(:meth:`GuardRegistry.fit`): idle guards beyond a quarter of it are closed, and at most
an eighth of it is kept as views, so a process under a low limit (macOS defaults to 256)
never runs out of descriptors because of what the store keeps.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from .. import _platform
from ..errors import LockTimeoutError
from .controlfile import (
    COUNT,
    COUNT_OFFSET,
    FIXED,
    HEAD_BYTES,
    RECORD_OFFSET,
    RETIRED,
    SEQ,
    SEQ_OFFSET,
    VISIBLE_OFFSET,
    CountCache,
    Head,
    Record,
    control_of,
    encode_record,
)
from .layout import FileState, open_regular
from .lines import Tail

log = logging.getLogger("jsonl_sessions")

#: The most guards (each with its lock file open) kept in a process before idle ones are closed.
_MAX_IDLE_GUARDS = 512
_FIRST_DELAY = 0.0001
_MAX_DELAY = 0.005
#: The most transcript descriptors kept open between mutations in one process.
MAX_VIEWS = 128
#: What :meth:`SessionGuard.acquire` returns when it took the guard: nothing to recover,
#: or something a dead writer left unfinished (0: the thread held it already).
TAKEN, UNFINISHED = 1, 2


class TranscriptView:
    """A transcript kept open between two mutations: its descriptor (``O_APPEND``), the
    file as the last mutation left it (device, inode, size), the control file's counter
    then, its tail when known (None: read it again), and whether every line of it is
    known to parse (the store wrote them all, or checked them).

    Only the guard's holder reads or changes it. An append through the kept descriptor
    moves it forward in place (the append path sets its size, counter, tail, ``clean``
    and last id) rather than making a new one."""

    __slots__ = ("clean", "dev", "fd", "ino", "last_id", "seq", "size", "tail")

    def __init__(self, fd: int, dev: int, ino: int, size: int, seq: int, tail: Tail | None,
                 clean: bool = False, last_id: str = "") -> None:
        self.fd, self.dev, self.ino, self.size, self.seq = fd, dev, ino, size, seq
        self.tail = tail
        self.clean = clean
        #: The id of the tail's last line, when the writer of that line kept it ("": read it off the line).
        self.last_id = last_id

    @classmethod
    def of(cls, fd: int, st: os.stat_result, seq: int, tail: Tail | None, clean: bool = False,
           last_id: str = "") -> TranscriptView:
        """The view of the transcript open as ``fd``, as ``st`` (its fstat) describes it."""
        return cls(fd, st.st_dev, st.st_ino, st.st_size, seq, tail, clean, last_id)

    def __repr__(self) -> str:
        return (f"TranscriptView(fd={self.fd}, dev={self.dev}, ino={self.ino}, size={self.size}, "
                f"seq={self.seq}, tail={self.tail!r}, clean={self.clean}, last_id={self.last_id!r})")

    # The append path writes unchanged out in its body (it runs on every append): a change
    # here is a change there.
    def same_file(self, st: os.stat_result) -> bool:
        """Whether ``st`` (a stat of the transcript's path) is the file this view holds open."""
        return st.st_ino == self.ino and st.st_dev == self.dev

    def unchanged(self, st: os.stat_result, seq: int) -> bool:
        """Whether the file ``st`` describes is still as this view saw it: same file, size
        and counter. Every rename and in-place rewrite the store makes moves the counter;
        an append by anyone changes the size; a tool that rewrites the file in place must
        hold the lock and change the counter or the size (docs/format.md). The mtime is not
        compared: an append does not stat the file after its write to learn it."""
        return seq == self.seq and st.st_size == self.size and st.st_ino == self.ino and st.st_dev == self.dev


class GuardClosed(Exception):
    """Internal: the guard was evicted from the registry; get a fresh one."""


class GuardBusy(Exception):
    """Internal: a non-blocking acquire found the guard held by another thread of this process."""


class SessionGuard:
    """The process-wide guard of one session. Use through :meth:`GuardRegistry.get`."""

    __slots__ = ("_depth", "_fd", "_owner", "_retired", "_rlock", "changes", "clean_mark", "closed", "count",
                 "hidden", "leading", "path", "pending", "pending_cond", "record", "seq", "view")

    def __init__(self, path: str) -> None:
        self.path = path
        self._rlock = threading.RLock()
        self._fd = -1
        self._depth = 0
        self.closed = False
        self.seq = 0
        #: The visible end the control file holds (:meth:`hide_from`), or None. Found when
        #: the guard was taken (its writer died, or a power loss kept it but not its
        #: clearing), recovery clears it.
        self.hidden: int | None = None
        #: The roll-forward record found when the guard was taken (bytes), or None.
        self.record: bytes | None = None
        #: The count cache, as read when the guard was taken and kept current since.
        self.count: CountCache | None = None
        #: The transcript kept open since the last mutation (see :class:`TranscriptView`).
        self.view: TranscriptView | None = None
        #: Bumped by every mutation of the transcript made under this guard in this process.
        self.changes = 0
        #: (device, inode, size, mtime ns, counter) of a transcript this process wrote
        #: whole and has not kept open: known to parse while all five still match.
        self.clean_mark: tuple[FileState, int] | None = None
        self._owner = 0
        #: Whether the lock file was unlinked under this hold (:meth:`retire`).
        self._retired = False
        #: Group commit (:mod:`jsonl_sessions.jsonl.append`): appends queued for the next writer,
        #: whether a thread is writing queued appends now, and the condition both change
        #: under.
        self.pending: list[Any] = []
        self.leading = False
        self.pending_cond = threading.Condition(threading.Lock())

    def acquire(self, timeout: float | None, key: str, blocking: bool = True) -> int:
        """Take the guard: :data:`TAKEN` when this call took the process lock (depth 0 ->
        1) and the control file shows nothing unfinished; :data:`UNFINISHED` when it took
        it and found what a dead writer left (a roll-forward record, an odd counter, a
        visible end: :attr:`record`, :attr:`seq`, :attr:`hidden`), which the caller must
        recover; 0 (false) when the thread already held it. Raises :class:`LockTimeoutError`, or
        :class:`GuardClosed` if the guard was evicted meanwhile (look it up again). Not
        ``blocking``: :class:`GuardBusy` at once when another thread of this process holds
        it (another process's flock is still waited for, up to ``timeout``)."""
        if self._rlock.acquire(False):
            started = None
        elif blocking:
            started = self._wait_turn(timeout, key)
        else:
            raise GuardBusy
        if self.closed:
            self._rlock.release()
            raise GuardClosed
        if self._depth:
            self._depth += 1
            return 0
        decoded: Head | None
        try:
            while True:
                fd = self._fd
                if fd == -1:
                    fd = self._fd = self._open(key)
                if not _platform.try_lock(fd):
                    self._wait_lock(started, timeout, key)
                try:
                    raw = _platform.pread(fd, HEAD_BYTES, 0)
                    # The usual head (no record, no visible end, not retired) is taken as it
                    # is, without a Head: read_control's decoding, for that case only.
                    if len(raw) == RECORD_OFFSET:
                        end, seq, ino, size, _zero, lines, cached_seq = FIXED.unpack(raw)
                        if not end:
                            decoded = None
                            break
                    decoded = control_of(fd, raw)
                    if not decoded.retired or self._keep_retired():
                        break
                except BaseException:
                    self._unlock()
                    raise
                self._reopen()
                if started is None:
                    started = time.monotonic()
        except BaseException:
            self._rlock.release()
            raise
        self._depth = 1
        self._owner = _get_ident()
        if decoded is None:
            self.seq = seq
            self.hidden = self.record = None
            if not ino:
                self.count = None
            elif self.count != (ino, size, lines, cached_seq):  # else the one kept is current
                self.count = CountCache(ino, size, lines, cached_seq)
            return UNFINISHED if seq & 1 else TAKEN  # no record, no visible end: only the counter
        self.seq = decoded.seq
        self.hidden = decoded.visible
        self.count = decoded.cache
        self.record = decoded.record
        return UNFINISHED if (self.record is not None or self.seq & 1 or self.hidden is not None) else TAKEN

    def _keep_retired(self) -> bool:
        """The file locked (its flock held) carries the retired mark. True when the path
        still names it (its remover died before the unlink, or a power loss undid it):
        the mark is cleared and the file used. False when the path names another file or
        none: the caller lets go of this one and opens the path again."""
        mine = _platform.fstat(self._fd)
        try:
            st = _platform.lstat(self.path)
        except FileNotFoundError:
            return False
        if not FileState.of(mine).same_file(st):
            return False
        _platform.pwrite(self._fd, bytes(len(RETIRED)), 0)
        return True

    def _reopen(self) -> None:
        """Let go of a retired lock file: closed (which releases its flock), and what was
        known through it forgotten; the next lock attempt opens the path afresh."""
        fd, self._fd = self._fd, -1
        self.drop_view()
        self.count = None
        self.clean_mark = None
        _close_quietly(fd)

    def _wait_turn(self, timeout: float | None, key: str) -> float | None:
        """Take the thread lock: when the caller waited, the monotonic time it started
        waiting. :class:`LockTimeoutError` (naming this process) when another thread
        holds it past ``timeout``."""
        if self._rlock.acquire(False):
            return None  # the clock is read only when something has to wait
        started = time.monotonic()
        if not self._rlock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise LockTimeoutError(key=key, path=self.path, timeout=timeout, holder_pid=os.getpid())
        return started

    def _open(self, key: str) -> int:
        opened = open_regular(self.path, os.O_RDWR | os.O_CREAT, key)
        assert opened is not None  # O_CREAT
        return opened[0]

    def _wait_lock(self, started: float | None, timeout: float | None, key: str) -> None:
        """The flock was taken by someone else: try again with a growing delay until
        ``timeout`` (counted from ``started``, or now), then :class:`LockTimeoutError`."""
        if started is None:
            started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        delay = _FIRST_DELAY
        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    holder = _platform.lock_holder(self._fd)
                    raise LockTimeoutError(key=key, path=self.path, timeout=timeout, holder_pid=holder)
                time.sleep(min(delay, left))
            else:
                time.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)
            if _platform.try_lock(self._fd):
                return

    @property
    def depth(self) -> int:
        """How many times the holding thread has taken the guard (0: free)."""
        return self._depth

    def held_here(self) -> bool:
        """Whether the calling thread holds the guard."""
        return bool(self._depth) and self._owner == threading.get_ident()

    def retire(self) -> None:
        """Unlink the lock file, which the caller holds (taken first: depth 1) and has
        checked to belong to a session that no longer exists: bytes 0-7 become
        :data:`~jsonl_sessions.jsonl.control.RETIRED`, then the path is unlinked; the file is
        closed (its flock released) at :meth:`release`, and the next acquire opens the
        path afresh. Every other holder of a descriptor of the old file sees the mark when
        it next locks it and opens the path again. Raises ``OSError`` (the mark cleared
        again when possible) when the unlink fails: nothing removed then."""
        if self._depth != 1 or self._owner != threading.get_ident():
            raise RuntimeError("retire() needs the guard taken first by this thread")
        _platform.pwrite(self._fd, RETIRED, 0)
        try:
            _platform.unlink(self.path)
        except BaseException:
            try:
                _platform.pwrite(self._fd, bytes(len(RETIRED)), 0)
            except OSError:
                pass  # the next holder finds the path still names this file and clears it
            raise
        self._retired = True

    def release(self) -> None:
        """Give the guard back; the flock goes with the last level. Never raises: the
        mutation the guard covered is done (maybe acknowledged), so a failure to unlock
        must not report it as failed (a retry would repeat it). A failed unlock is logged
        and the lock file's descriptor closed instead, which drops the flock all the same;
        the next acquire opens it again."""
        depth = self._depth = self._depth - 1
        if depth:
            self._rlock.release()
            return
        self._owner = 0
        try:
            if self._retired:
                self._retired = False
                self._reopen()
            else:
                try:
                    _platform.unlock(self._fd)
                except OSError as exc:
                    self._unlock_failed(exc)
        finally:
            self._rlock.release()

    def _unlock(self) -> None:
        """Drop the flock; if unlocking fails, close the descriptor, which drops it too."""
        try:
            _platform.unlock(self._fd)
        except OSError as exc:
            self._unlock_failed(exc)

    def _unlock_failed(self, exc: OSError) -> None:
        log.warning("releasing the lock of %s failed (%s); closing its descriptor instead", self.path, exc)
        fd, self._fd = self._fd, -1
        _close_quietly(fd)

    # -- control file (only while held) ----------------------------------------------
    def begin_in_place(self) -> None:
        """Mark the start of an in-place rewrite of transcript bytes (sequence -> odd)."""
        if not self.seq & 1:
            self.seq += 1
            _platform.pwrite(self._fd, SEQ.pack(self.seq), SEQ_OFFSET)

    def end_in_place(self) -> None:
        """Mark its end (sequence -> even); readers that overlapped it retry."""
        if self.seq & 1:
            self.seq += 1
            _platform.pwrite(self._fd, SEQ.pack(self.seq), SEQ_OFFSET)

    def hide_from(self, at: int) -> None:
        """Publish that the transcript's bytes from ``at`` on are not durable yet: lock-free
        readers use only its first ``at`` bytes until :meth:`show_all` (or, once this
        guard is free again, recovery). One ``pwrite``."""
        self.hidden = at
        _platform.pwrite(self._fd, SEQ.pack(at + 1), VISIBLE_OFFSET)

    def show_all(self, ino: int = 0, size: int = 0, lines: int = 0) -> None:
        """Readers may use the whole transcript again (one ``pwrite``). With ``ino``: in
        the same ``pwrite``, the count cache says that the transcript (inode ``ino``) has
        ``lines`` complete lines in its first ``size`` bytes (see :meth:`write_count`), so a
        durable append makes one write to the control file after its fsync, not two."""
        if not ino:
            _platform.pwrite(self._fd, bytes(SEQ.size), VISIBLE_OFFSET)
        else:
            seq = self.seq
            _platform.pwrite(self._fd, FIXED.pack(0, seq, ino, size, 0, lines, seq), VISIBLE_OFFSET)
            self.count = _new_tuple(CountCache, (ino, size, lines, seq))
        self.hidden = None

    def write_count(self, ino: int, size: int, lines: int) -> None:
        """Record that the transcript (inode ``ino``) has ``lines`` complete lines in its
        first ``size`` bytes, which is its whole size, as of the current sequence counter
        (a cache: never fsynced)."""
        seq = self.seq
        _platform.pwrite(self._fd, COUNT.pack(ino, size, 0, lines, seq), COUNT_OFFSET)
        self.count = _new_tuple(CountCache, (ino, size, lines, seq))  # CountCache(...) without its __new__'s frame

    def drop_count(self) -> None:
        """Forget the count (the transcript is gone)."""
        _platform.pwrite(self._fd, bytes(COUNT.size), COUNT_OFFSET)
        self.count = None

    def write_record(self, record: Record, durable: bool) -> None:
        """Commit a roll-forward record: after this returns (durable: fsynced) recovery
        completes the mutation it describes."""
        data = encode_record(record)
        _platform.pwrite(self._fd, data, RECORD_OFFSET)
        _platform.truncate(self._fd, RECORD_OFFSET + len(data))
        if durable:
            _platform.fsync(self._fd)
        self.record = data

    def clear_record(self, durable: bool) -> None:
        """Drop the record once its mutation is complete (durable: fsynced, so a power loss
        cannot bring back a finished record)."""
        _platform.truncate(self._fd, RECORD_OFFSET)
        if durable:
            _platform.fsync(self._fd)
        self.record = None

    # -- the transcript kept open (only while held) ----------------------------------
    def take_view(self) -> TranscriptView | None:
        """Hand the kept transcript to the caller, who then owns its descriptor: it still
        counts towards :data:`MAX_VIEWS` until given back (:meth:`keep_view` with
        ``counted``) or closed (:meth:`close_taken`)."""
        view, self.view = self.view, None
        return view

    def keep_view(self, view: TranscriptView, *, counted: bool) -> None:
        """Keep ``view`` open until the next mutation (``counted``: its descriptor came
        from :meth:`take_view`). Its descriptor is closed instead when the guard is closed,
        or when the process keeps :data:`MAX_VIEWS` open and none of them is idle."""
        self.drop_view()
        if self.closed or not (counted or REGISTRY.view_opened()):
            self.close_taken(view.fd, counted=counted)
            return
        self.view = view

    @staticmethod
    def close_taken(fd: int, *, counted: bool) -> None:
        """Close a descriptor taken with :meth:`take_view` (``counted``) or opened afresh."""
        if counted:
            REGISTRY.views_closed(1)
        _close_quietly(fd)

    def drop_view(self) -> None:
        """Close the kept transcript, if any."""
        view = self.take_view()
        if view is not None:
            self.close_taken(view.fd, counted=True)

    def drop_view_if_idle(self) -> bool:
        """Close the kept transcript if no thread holds the guard (True if one was
        closed); never waits."""
        if self._rlock.acquire(blocking=False):
            try:
                if not self._depth and self.view is not None:
                    self.drop_view()
                    return True
            finally:
                self._rlock.release()
        return False

    def close_if_idle(self) -> bool:
        """Close the guard if no thread holds it (True); never waits."""
        if not self._rlock.acquire(blocking=False):
            return False
        try:
            if self._depth:
                return False
            self.close()
            return True
        finally:
            self._rlock.release()

    def close(self) -> None:
        self.drop_view()
        if self._fd != -1:
            try:
                _platform.close(self._fd)
            except OSError:
                pass
            self._fd = -1
        self.closed = True


class GuardRegistry:
    """Process-wide map of lock-file path -> :class:`SessionGuard` (bounded: past
    :attr:`max_guards` guards, the idle ones have their descriptors closed)."""

    def __init__(self) -> None:
        self._guards: dict[str, SessionGuard] = {}
        #: The guard of a lock-file path when there is one, else None (never creates one;
        #: a C call, for the append path). The dict stays the same object for the
        #: registry's life (cleared in place after a fork).
        self.find = self._guards.get
        self._lock = threading.Lock()
        self._views = 0
        self._views_lock = threading.Lock()
        #: Guards kept before the idle ones are closed, and transcripts kept open (:meth:`fit`).
        self.max_guards = _MAX_IDLE_GUARDS
        self.max_views = MAX_VIEWS

    def fit(self, fd_limit: int | None) -> None:
        """Size the caps to the process's descriptor limit (None: unlimited or unknown):
        guards at most a quarter of it, kept transcripts an eighth, and never more than
        ``_MAX_IDLE_GUARDS`` / :data:`MAX_VIEWS`. Called when a store is created."""
        guards, views = _MAX_IDLE_GUARDS, MAX_VIEWS
        if fd_limit is not None:
            guards = max(1, min(guards, fd_limit // 4))
            views = max(1, min(views, fd_limit // 8))
        self.max_guards, self.max_views = guards, views

    def get(self, path: str) -> SessionGuard:
        guard = self._guards.get(path)
        if guard is not None:
            return guard
        with self._lock:
            guard = self._guards.get(path)
            if guard is None:
                if len(self._guards) >= self.max_guards:
                    self._evict_idle()
                guard = self._guards[path] = SessionGuard(path)
            return guard

    def close_idle(self, directory: str) -> None:
        """Close the guards (lock file and kept transcript) of the sessions in
        ``directory`` that no thread holds; a later use opens them again."""
        with self._lock:
            for path, guard in list(self._guards.items()):
                if os.path.dirname(path) == directory and guard.close_if_idle():
                    del self._guards[path]

    def view_opened(self) -> bool:
        """Count one more kept transcript; at :attr:`max_views`, first close the kept
        transcript of another guard no thread holds (the oldest such guard's); False (not
        counted) when none could be closed."""
        if self._count_view():
            return True
        for guard in list(self._guards.values()):
            if guard.view is not None and guard.drop_view_if_idle():
                break
        return self._count_view()

    def _count_view(self) -> bool:
        with self._views_lock:
            if self._views >= self.max_views:
                return False
            self._views += 1
            return True

    def views_closed(self, n: int) -> None:
        with self._views_lock:
            self._views -= n

    def drop_views(self, paths: list[str]) -> None:
        """Close the kept transcripts of the guards of ``paths`` that no thread holds."""
        for path in paths:
            guard = self._guards.get(path)
            if guard is not None:
                guard.drop_view_if_idle()

    def _evict_idle(self) -> None:
        for path, guard in list(self._guards.items()):
            if guard.close_if_idle():
                del self._guards[path]

    def reset_after_fork(self) -> None:
        """In a forked child: forget the parent's guards (their locks are the parent's)."""
        old = list(self._guards.values())
        self._guards.clear()  # in place: find is bound to this dict
        self._lock = threading.Lock()
        self._views_lock = threading.Lock()
        for guard in old:
            guard.close()
        self._views = 0


def _close_quietly(fd: int) -> None:
    try:
        _platform.close(fd)
    except OSError:
        pass


_new_tuple = tuple.__new__
_get_ident = threading.get_ident

REGISTRY = GuardRegistry()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=REGISTRY.reset_after_fork)
