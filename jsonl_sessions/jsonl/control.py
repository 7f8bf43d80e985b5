"""The concurrency protocol of a session, in one place: how writers change a session's
files so that lock-free readers never see a half-made state, how readers check that,
and how the next writer completes what a dead one left. The control file's bytes
(offsets, decoding) are :mod:`jsonl_sessions.jsonl.controlfile`; the lock is
:mod:`jsonl_sessions.jsonl.guard`; the mutations built on this are :mod:`jsonl_sessions.jsonl.txn`.

**Writers** hold the session's guard (:func:`acquire`: a thread lock plus an ``flock`` on
the control file ``<stem>.lock``), which also keeps the control file's fields in memory
and writes them:

- the *sequence counter* is odd while a mutation rewrites transcript bytes in place
  (truncate, tail rewrite, rename over the transcript: :func:`in_place`, :func:`cut`,
  :func:`rename_over`) and even otherwise; appends of one line never touch it (a reader
  sees a prefix; an append in progress is a torn tail, which readers ignore);
- the *visible end*, set while a durable append is between its write and the end of its
  fsync, says how many transcript bytes readers may use, so a line whose fsync fails
  (and is rolled back) is never returned;
- the *count cache* (transcript inode, size, lines, counter) makes counting O(1)
  while all of them still match the file;
- a *roll-forward record* (:class:`AppendBatch`, :class:`TailRewrite`, :class:`Moves`) is
  committed (written and fsynced) before a multi-step mutation touches the session; once
  committed the mutation counts as done, and whoever holds the guard next completes it.

**Recovery** runs when a guard is taken first (:func:`enter`) and finds what a dead
writer left: :func:`recover` completes a committed record (drops a torn one with its temp
files), makes an odd counter even and clears a stale visible end. Always durable.

**Readers** take no lock. :func:`consistent` reads the counter, runs the read, and reads
the counter again; when it was odd or moved meanwhile, the read is retried, so a reader
never sees bytes spliced from two states. Two states are never returned: the one a
committed roll-forward record replaces (the reader first takes the guard for a moment, if
free, which completes the record: :func:`try_recover`), and one behind a counter left odd
by a dead writer (after :data:`READ_RETRY_SECONDS` the reader takes the guard, if free,
which makes it even). When that recovery fails with an I/O error, the reader raises it
(``OSError``) instead of reading files that may be half-way between states. A visible end
found while the guard is free is stale, and cleared first the same way.

Every OS call goes through :mod:`jsonl_sessions._platform` (the fault-injection seam).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, TypeVar

import orjson

from .. import _platform
from ..errors import CorruptControlError, SessionStoreError
from ._atomic import unlink_quietly
from .controlfile import (
    COUNT,
    COUNT_OFFSET,
    HEAD_BYTES,
    RECORD_OFFSET,
    RETIRED,
    SEQ,
    SEQ_OFFSET,
    VISIBLE_OFFSET,
    CountCache,
    Head,
    Record,
    decode_head,
    encode_record,
    peek_count,
    read_control,
    read_head,
)
from .guard import REGISTRY, UNFINISHED, GuardClosed, SessionGuard
from .layout import FileState, SessionFiles
from .lines import count_newlines
from .root import Root

log = logging.getLogger("jsonl_sessions")
_T = TypeVar("_T")
#: ``timeout`` meaning "the store's lock_timeout".
DEFAULT: Literal[False] = False
#: How long a reader waits on an odd counter before it tries to recover it.
READ_RETRY_SECONDS = 0.2


# -- writers: changes in place, with the counter odd -------------------------------------
@contextlib.contextmanager
def in_place(guard: SessionGuard) -> Iterator[None]:
    """Make the counter odd for the block (readers that overlap it retry), even after.
    If the counter cannot be marked the block does not run; if it cannot be made even
    again, the error is swallowed: the counter stays odd and the next guard holder (or a
    reader that waited long enough) makes it even."""
    guard.begin_in_place()
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            guard.end_in_place()


def cut(guard: SessionGuard, fd: int, at: int, *, durable: bool) -> None:
    """Truncate the transcript open as ``fd`` to ``at`` bytes (a line boundary) with the
    counter odd; fsynced when ``durable``. Atomic: a truncate is all or nothing."""
    with in_place(guard):
        _platform.truncate(fd, at)
        if durable:
            _platform.fsync(fd)


def rename_over(guard: SessionGuard, src: str, dst: str) -> None:
    """Rename ``src`` over ``dst`` with the counter odd, so no count cached for the older
    file survives it (inode numbers are reused) and readers retry around it. The caller
    fsyncs the directory."""
    with in_place(guard):
        _platform.replace(src, dst)


# -- roll-forward records -----------------------------------------------------------------
class RollForward(Record, Protocol):
    """A roll-forward record: committed (written and fsynced) before its mutation touches
    the session; once committed, whoever holds the guard next completes it (``apply``)."""

    def apply(self, guard: SessionGuard, files: SessionFiles, *, durable: bool) -> None: ...


def _for_write(files: SessionFiles, use: Callable[[int, int], None]) -> None:
    """``use(fd, size)`` on the transcript opened for writing (closed after); nothing when
    the session does not exist."""
    opened = files.open_transcript_for_write()
    if opened is None:
        return
    fd, st = opened
    try:
        use(fd, st.st_size)
    finally:
        _platform.close(fd)


def _int(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if type(value) is not int or value < 0:
        raise ValueError(f"{name!r} must be an offset, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class AppendBatch:
    """``append_many`` of 2+ lines occupies bytes ``at``..``end``. Completing it: a
    transcript shorter than ``end``, or whose byte ``end - 1`` is not the batch's final
    newline (a power loss kept the length but not the bytes), loses the whole batch
    (truncated to ``at``: it was never acknowledged); otherwise the batch is whole."""

    op: ClassVar[str] = "append"
    at: int
    end: int

    def fields(self) -> dict[str, Any]:
        return {"at": self.at, "end": self.end}

    @classmethod
    def parse(cls, data: dict[str, Any]) -> AppendBatch:
        return cls(_int(data, "at"), _int(data, "end"))

    def apply(self, guard: SessionGuard, files: SessionFiles, *, durable: bool) -> None:
        def complete(fd: int, size: int) -> None:
            cut_short = self.at <= size < self.end
            if cut_short or (size >= self.end > self.at and _platform.pread(fd, 1, self.end - 1) != b"\n"):
                cut(guard, fd, self.at, durable=durable)

        _for_write(files, complete)


@dataclass(frozen=True, slots=True)
class TailRewrite:
    """``update_last``: the transcript's bytes from ``at`` become ``line`` (the new last
    line, with its newline). Completing it: truncate to ``at``, write ``line``, fsync."""

    op: ClassVar[str] = "tail"
    at: int
    line: bytes

    def fields(self) -> dict[str, Any]:
        return {"at": self.at, "line": self.line.decode("utf-8")}

    @classmethod
    def parse(cls, data: dict[str, Any]) -> TailRewrite:
        line = data.get("line")
        if type(line) is not str:
            raise ValueError(f"'line' must be a string, not {line!r}")
        return cls(_int(data, "at"), line.encode("utf-8"))

    def apply(self, guard: SessionGuard, files: SessionFiles, *, durable: bool) -> None:
        def complete(fd: int, _size: int) -> None:
            with in_place(guard):
                _platform.truncate(fd, self.at)
                _platform.pwrite(fd, self.line, self.at)
                if durable:
                    _platform.fsync(fd)

        _for_write(files, complete)


@dataclass(frozen=True, slots=True)
class Moves:
    """``replace_conversation_state``: complete, fsynced temp files to rename over their
    targets (names in root). Completing it: rename each temp file that still exists (one
    odd stretch of the counter around all of them: a lock-free reader never sees the new
    sidecar with the old transcript), then fsync the directory (when durable). Raises if
    it cannot tell whether a temp file exists (an I/O error is never read as "absent")."""

    op: ClassVar[str] = "moves"
    moves: tuple[tuple[str, str], ...]

    def fields(self) -> dict[str, Any]:
        return {"moves": [list(move) for move in self.moves]}

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Moves:
        moves = data.get("moves")
        if not isinstance(moves, list) or not all(
                isinstance(m, list) and len(m) == 2 and all(_plain_name(n) for n in m) for m in moves):
            raise ValueError(f"'moves' must be a list of [temp, target] file names, not {moves!r}")
        return cls(tuple((src, dst) for src, dst in moves))

    def apply(self, guard: SessionGuard, files: SessionFiles, *, durable: bool) -> None:
        with in_place(guard):
            for src, dst in self.moves:
                src_path = os.path.join(files.root, src)
                # Only a missing name skips a rename: an error raises (the record stays
                # and the next guard holder completes it), never leaves half the moves.
                if _platform.exists(src_path):
                    _platform.replace(src_path, os.path.join(files.root, dst))
        if durable:
            _platform.fsync_dir(files.root)


@dataclass(frozen=True, slots=True)
class CutBack:
    """An append that failed (its write or fsync raised) and whose own rollback could not
    cut its bytes: the transcript's bytes from ``at`` were never acknowledged. Completing
    it: truncate the transcript to ``at`` when it is longer (fsynced), so the append never
    appears, whoever comes next (see :func:`roll_back`)."""

    op: ClassVar[str] = "cut"
    at: int

    def fields(self) -> dict[str, Any]:
        return {"at": self.at}

    @classmethod
    def parse(cls, data: dict[str, Any]) -> CutBack:
        return cls(_int(data, "at"))

    def apply(self, guard: SessionGuard, files: SessionFiles, *, durable: bool) -> None:
        def complete(fd: int, size: int) -> None:
            if size > self.at:
                cut(guard, fd, self.at, durable=durable)

        _for_write(files, complete)


def roll_back(guard: SessionGuard, files: SessionFiles, fd: int, at: int) -> Literal["cut", "pending", "unrecorded"]:
    """After an append's write or fsync failed: cut the transcript open as ``fd`` back to
    ``at`` (where the append began), with the counter odd (the caller makes it even).
    Never raises; says what became of the bytes:

    - ``"cut"``: they are gone (the visible end, if set, may be cleared now);
    - ``"pending"``: the cut failed, and failed again after a :class:`CutBack` record was
      committed (always fsynced): the record stays, and the next guard holder, or any
      lock-free reader, completes it before using the transcript. Leave the visible end
      set (and the record in place): no reader returns the bytes meanwhile;
    - ``"unrecorded"``: not even the record could be written (a third fault): only the
      visible end, if set, still hides the bytes, until someone finds it stale."""
    with contextlib.suppress(OSError):
        guard.begin_in_place()
    try:
        _platform.truncate(fd, at)
        return "cut"
    except OSError:
        pass
    record = CutBack(at)
    try:
        guard.write_record(record, durable=True)
    except OSError:
        log.error("session %r: an append failed, and neither cutting its bytes nor recording that they must be "
                  "cut worked", files.key)
        return "unrecorded"
    try:
        record.apply(guard, files, durable=True)
        guard.clear_record(durable=True)
    except OSError:
        log.warning("session %r: the bytes of a failed append could not be cut; the next access cuts them", files.key)
        return "pending"
    return "cut"


def _plain_name(name: object) -> bool:
    """A file name inside root (no separator, not . or ..): records never name anything else."""
    return isinstance(name, str) and bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


RECORD_TYPES: dict[str, type[AppendBatch | TailRewrite | Moves | CutBack]] = {
    cls.op: cls for cls in (AppendBatch, TailRewrite, Moves, CutBack)
}


def parse_record(raw: bytes, *, path: str | None = None, key: str | None = None) -> RollForward | None:
    """The committed record in ``raw`` (the control file's bytes from :data:`RECORD_OFFSET`);
    None when it was never committed (no final newline, or not a JSON object: a torn
    write). Raises :class:`CorruptControlError` (naming ``path`` and the record's offset)
    for a committed record this version cannot complete: an unknown ``op`` or bad fields."""
    end = raw.find(b"\n")
    if end == -1:
        return None
    try:
        data = orjson.loads(raw[:end])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    kind = RECORD_TYPES.get(data.get("op"))  # type: ignore[arg-type]
    try:
        if kind is None:
            raise ValueError(f"unknown roll-forward record {data.get('op')!r}")
        return kind.parse(data)
    except ValueError as exc:
        raise CorruptControlError(key=key, path=path, offset=RECORD_OFFSET, reason=str(exc)) from None


# -- taking the guard, and recovery ----------------------------------------------------
def acquire(root: Root, files: SessionFiles, timeout: float | None | Literal[False] = DEFAULT) -> SessionGuard:
    """Take the session's guard (reentrant in a thread) and, when this took it first,
    complete what a dead writer left. Raises :class:`LockTimeoutError`."""
    while True:
        try:
            return enter(root, files, REGISTRY.get(files.lock), timeout)
        except GuardClosed:
            continue


def enter(root: Root, files: SessionFiles, guard: SessionGuard, timeout: float | None | Literal[False] = DEFAULT,
          first: list[bool] | None = None, *, blocking: bool = True) -> SessionGuard:
    """:func:`acquire` of one given guard (:class:`GuardClosed` if it was evicted: look
    it up again). ``first``: gets whether this call took the guard first (not reentrant).
    Not ``blocking``: :class:`~jsonl_sessions.jsonl.guard.GuardBusy` when another thread
    of this process holds the guard."""
    took = guard.acquire(root.lock_timeout if timeout is False else timeout, files.key, blocking)
    if first is not None:
        first.append(took != 0)
    if took == UNFINISHED:
        finish(guard, files)
    return guard


def finish(guard: SessionGuard, files: SessionFiles) -> None:
    """Recovery (:func:`recover`) by the thread that just took ``guard`` and found
    something unfinished (:data:`~jsonl_sessions.jsonl.guard.UNFINISHED`); the kept view
    is dropped first. When recovery fails the guard is released and the error raised."""
    try:
        guard.drop_view()
        recover(guard, files)
    except BaseException:
        guard.release()
        raise


def recover(guard: SessionGuard, files: SessionFiles) -> None:
    """Complete (roll forward) a committed record, or drop a torn one with its temp files;
    make an odd counter even. Always durable: it runs after a crash. Raises
    :class:`CorruptControlError` for a committed record this version does not know."""
    raw = guard.record
    if raw is not None:
        record = parse_record(raw, path=files.lock, key=files.key)
        if record is None:
            log.warning("dropping an uncommitted roll-forward record of session %r", files.key)
            for temp in files.temps:
                unlink_quietly(temp)
        else:
            log.info("completing an interrupted %s of session %r", record.op, files.key)
            record.apply(guard, files, durable=True)
        guard.clear_record(durable=True)
    if guard.seq & 1:
        guard.end_in_place()
    if guard.hidden is not None:
        # Its writer died between write and acknowledgement (a crash may keep such a whole
        # line), or a power loss kept the mark but not its clearing: the bytes stand.
        guard.show_all()


def try_recover(root: Root, files: SessionFiles, *, strict: bool = False) -> None:
    """Take the guard for a moment if it is free (which runs recovery); never waits.
    Raises nothing, except with ``strict`` an ``OSError`` from the attempt (recovery
    could not run or failed part-way: the files may hold neither the state before an
    interrupted mutation nor the one after, so a reader must not use them)."""
    try:
        acquire(root, files, timeout=0).release()
    except SessionStoreError:
        pass  # busy (its holder is alive and finishes it), or a bad control file the next writer reports
    except OSError:
        if strict:
            raise


# -- readers: lock-free, retried until no in-place change overlapped them -------------
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
            return _read_only(files, lambda fd, st: (read(fd, head.visible_size(st.st_size)), None))
        except (SessionStoreError, ValueError, LookupError) as exc:
            return None, exc

    outcome = consistent(root, files, attempt)
    if outcome is None:
        return None
    result, error = outcome
    if error is not None:
        raise error
    return result


def without_control(files: SessionFiles, read: Callable[[int, int], _T]) -> _T | None:
    """``read(fd, size)`` on the transcript opened read-only, without looking at the control
    file: for a session whose control file cannot be used (not a regular file), where no
    writer can take the guard, so no in-place change can overlap the read. None when the
    session does not exist; :class:`UnsafePathError` for a transcript that is not a
    regular file."""
    return _read_only(files, lambda fd, st: read(fd, st.st_size))


def with_transcript_state(root: Root, files: SessionFiles,
                          read: Callable[[int, int, os.stat_result, Head], _T]) -> _T | None:
    """``read(fd, size, fstat, head)``: :func:`with_transcript` that also hands ``read`` the
    transcript's ``fstat`` and the control file's head (its counter, even) as they were for
    the read, for a reader that remembers which state of the file it read (a derived index's
    high-water mark). ``read`` may run more than once; the result of the last run stands."""
    return consistent(root, files, lambda head: _read_only(
        files, lambda fd, st: read(fd, head.visible_size(st.st_size), st, head)))


def _read_only(files: SessionFiles, use: Callable[[int, os.stat_result], _T]) -> _T | None:
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
    Takes no lock. O(1) while the count cache matches the file (inode, size and
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
                # The file is longer than the cache says; the bytes it describes are the
                # durable ones if inode, size and counter agree.
                if cache is not None and cache.matches_prefix(st, size, head.seq):
                    return cache.lines, size, None
                return count_newlines(fd, 0, size), size, None
            if cache is not None and cache.matches(st, head.seq):
                return cache.lines, size, None
            return count_newlines(fd, 0, size), size, st

        return _read_only(files, lines)

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
            if guard.seq == seq and FileState.of(counted).unchanged(now):
                guard.write_count(counted.st_ino, counted.st_size, lines)
        finally:
            guard.release()


__all__ = ["COUNT", "COUNT_OFFSET", "DEFAULT", "HEAD_BYTES", "READ_RETRY_SECONDS", "RECORD_OFFSET", "RETIRED", "SEQ",
           "SEQ_OFFSET", "VISIBLE_OFFSET", "AppendBatch", "CountCache", "CutBack", "Head", "Moves", "Record", "RollForward",
           "TailRewrite", "acquire", "consistent", "count", "count_with_size", "cut", "decode_head", "encode_record",
           "enter", "finish", "in_place", "parse_record", "peek_count", "read_control", "read_head", "read_transcript",
           "recover", "rename_over", "roll_back", "try_recover", "with_transcript", "without_control"]
