"""A session's control file (``<stem>.lock``): the sequence counter, the count cache and the
roll-forward record, and the in-place primitives that keep lock-free readers safe.

Layout (docs/format.md): bytes 0-7 either zero, the visible end (little-endian u64: one
more than how many transcript bytes lock-free readers may see while a durable append is
not yet fsynced), or :data:`RETIRED` once the file was unlinked; bytes 8-15 the sequence
counter (odd while a mutation rewrites transcript bytes in place); bytes 16-55 the count
cache (transcript inode, size, mtime ns, complete lines, counter when written); bytes 56-
the roll-forward record, empty or one JSON object and ``\\n``.

Records are typed values (:class:`AppendBatch`, :class:`TailRewrite`, :class:`Moves`)
that encode, parse and validate themselves and know how to complete themselves
(:meth:`apply`, used by recovery and by the mutation that wrote them). The guard that
owns the file while a mutation runs is :mod:`jsonl_sessions.jsonl.guard`; everything here that
writes takes that guard as its first argument and is called while it is held.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import orjson

from .. import _platform
from ..errors import CorruptControlError, UnsafePathError
from .layout import SessionFiles, open_regular

VISIBLE_OFFSET = 0
#: Bytes 0-7 of a lock file its remover unlinked while holding its flock (see
#: :meth:`jsonl_sessions.jsonl.guard.SessionGuard.retire`): whoever locks that file afterwards
#: opens the path again instead of using it. Checked before the visible end, which it
#: can never be taken for (as a number it is about 7e17, beyond any transcript's size).
RETIRED = b"RETIRED\n"
SEQ_OFFSET = 8
COUNT_OFFSET = 16
RECORD_OFFSET = 56
SEQ = struct.Struct("<Q")
COUNT = struct.Struct("<QQQQQ")  # transcript inode, size, mtime (ns), lines, sequence counter
#: How much of the control file one read takes first: the fixed part and a small record.
HEAD_BYTES = 4096


class CountCache(NamedTuple):
    """What a writer last knew: the transcript (inode) had ``lines`` complete lines when
    it was ``size`` bytes long and last modified at ``mtime`` (ns), with the sequence
    counter at ``seq``. Trusted only while all four still match the file."""

    ino: int
    size: int
    mtime: int
    lines: int
    seq: int

    def matches(self, st: os.stat_result, seq: int) -> bool:
        return (self.ino == st.st_ino and self.size == st.st_size and self.mtime == st.st_mtime_ns
                and self.seq == seq)

    @classmethod
    def of(cls, st: os.stat_result, lines: int, seq: int) -> CountCache:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns, lines, seq)

    def encode(self) -> bytes:
        return COUNT.pack(*self)


class Head(NamedTuple):
    """The control file's fixed part as read: counter, count cache, whether (and which
    bytes of) a roll-forward record follows, and the visible end."""

    seq: int
    cache: CountCache | None
    record: bytes | None  # the record's bytes (maybe only a prefix: see ``complete``)
    #: None, or how many bytes of the transcript a lock-free reader may use: the bytes
    #: after it belong to a durable append whose fsync has not returned yet.
    visible: int | None = None
    #: Whether bytes 0-7 hold :data:`RETIRED` (the file was unlinked by its remover).
    retired: bool = False

    def visible_size(self, size: int) -> int:
        """How much of a transcript of ``size`` bytes a reader may use."""
        return size if self.visible is None or self.visible > size else self.visible

    @property
    def pending(self) -> bool:
        return self.record is not None


def decode_head(raw: bytes) -> Head:
    """Decode the first bytes of a control file (any length; missing parts read as zero)."""
    seq = SEQ.unpack_from(raw, SEQ_OFFSET)[0] if len(raw) >= SEQ_OFFSET + SEQ.size else 0
    cache = None
    if len(raw) >= COUNT_OFFSET + COUNT.size:
        cache = CountCache(*COUNT.unpack_from(raw, COUNT_OFFSET))
        if not cache.ino:
            cache = None
    record = raw[RECORD_OFFSET:] if len(raw) > RECORD_OFFSET and raw[RECORD_OFFSET] else None
    if raw[VISIBLE_OFFSET:VISIBLE_OFFSET + len(RETIRED)] == RETIRED:
        return Head(seq, cache, record, None, True)
    end = SEQ.unpack_from(raw, VISIBLE_OFFSET)[0] if len(raw) >= VISIBLE_OFFSET + SEQ.size else 0
    return Head(seq, cache, record, end - 1 if end else None)


def read_control(fd: int) -> Head:
    """The control file open as ``fd``, with the whole record, whatever its size (a tail
    record holds a line as long as the store accepts, escaped: it can be several times
    ``max_message_bytes``). One read when the record is small, else also an ``fstat`` and
    one read of the rest. Recovery and ``verify`` both read records through this."""
    raw = _platform.pread(fd, HEAD_BYTES, 0)
    if len(raw) == HEAD_BYTES and raw[RECORD_OFFSET]:
        raw += _read_to_end(fd, HEAD_BYTES)
    return decode_head(raw)


def _read_to_end(fd: int, offset: int) -> bytes:
    """Every byte of ``fd`` from ``offset`` to its end of file (loops if the file grew
    after the ``fstat``, so the result never stops short of an end of file)."""
    chunks = []
    want = max(_platform.fstat(fd).st_size - offset, 0) + 1
    while True:
        chunk = _platform.pread(fd, want, offset)
        chunks.append(chunk)
        if len(chunk) < want:
            return b"".join(chunks)
        offset += len(chunk)
        want = 1 << 20


def read_head(path: str, record_bytes: int | None = 1, key: str | None = None) -> Head:
    """The control file at ``path`` read without locking (all zero when there is none);
    ``record_bytes``: how much of a record to read (None: all of it, as
    :func:`read_control`). :class:`UnsafePathError` (naming session ``key``) for a
    symlink or another non-regular file."""
    opened = open_regular(path, os.O_RDONLY, key)
    if opened is None:
        return Head(0, None, None)
    fd, _st = opened
    try:
        if record_bytes is None:
            return read_control(fd)
        return decode_head(_platform.pread(fd, RECORD_OFFSET + record_bytes, 0))
    finally:
        _platform.close(fd)


#: The fixed part as one struct: visible end, counter, then the count cache.
_FIXED = struct.Struct("<QQQQQQQ")
assert _FIXED.size == RECORD_OFFSET and COUNT_OFFSET == SEQ_OFFSET + SEQ.size == VISIBLE_OFFSET + 16


def peek_count(path: str, st: os.stat_result, key: str | None = None) -> int | None:
    """The count cache's line count of the transcript whose ``lstat`` is ``st``, read off
    a control file a directory scan just saw as a regular file: open (never following a
    symlink, never waiting), one read, close; no ``fstat`` and no ``fcntl``. Should it have
    become something else since, the read fails (a FIFO or directory cannot be ``pread``)
    rather than blocks; a file system that honours ``O_NONBLOCK`` on a regular file gets
    :func:`read_head`. None when there is no control file, or anything is in flight (an
    odd counter, a record, a visible end or the retired mark in bytes 0-7), or the cache
    does not describe exactly that file (inode, size, mtime) at the current counter: what
    :func:`decode_head` and :meth:`CountCache.matches` say, from one ``unpack``."""
    try:
        fd = _platform.open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in _platform.SYMLINK_ERRNOS or exc.errno in _platform.NOT_REGULAR_ERRNOS:
            raise UnsafePathError(key=key, path=path) from None
        raise
    try:
        raw = _platform.pread(fd, RECORD_OFFSET + 1, 0)
    except BlockingIOError:
        raw = None
    finally:
        _platform.close(fd)
    if raw is None:  # a file system that honours O_NONBLOCK on a regular file
        head = read_head(path, key=key)
        cache = head.cache
        if (head.seq & 1 or head.pending or head.visible is not None or head.retired or cache is None
                or not cache.matches(st, head.seq)):
            return None
        return cache.lines
    if len(raw) < RECORD_OFFSET or (len(raw) > RECORD_OFFSET and raw[RECORD_OFFSET]):
        return None
    visible, seq, ino, size, mtime, lines, cache_seq = _FIXED.unpack_from(raw)
    if (visible or seq & 1 or not ino or ino != st.st_ino or size != st.st_size or mtime != st.st_mtime_ns
            or cache_seq != seq):
        return None
    return lines  # type: ignore[no-any-return]


# -- the guard's side of the file -------------------------------------------------------
class Holder(Protocol):
    """What the primitives here need of a held guard (:class:`jsonl_sessions.jsonl.guard.SessionGuard`)."""

    seq: int

    def begin_in_place(self) -> None: ...
    def end_in_place(self) -> None: ...


@contextlib.contextmanager
def in_place(guard: Holder) -> Iterator[None]:
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


def cut(guard: Holder, fd: int, at: int, *, durable: bool) -> None:
    """Truncate the transcript open as ``fd`` to ``at`` bytes (a line boundary) with the
    counter odd; fsynced when ``durable``. Atomic: a truncate is all or nothing."""
    with in_place(guard):
        _platform.truncate(fd, at)
        if durable:
            _platform.fsync(fd)


def rename_over(guard: Holder, src: str, dst: str) -> None:
    """Rename ``src`` over ``dst`` with the counter odd, so no count cached for the older
    file survives it (inode numbers are reused) and readers retry around it. The caller
    fsyncs the directory."""
    with in_place(guard):
        _platform.replace(src, dst)


# -- roll-forward records -----------------------------------------------------------------
class Record(Protocol):
    """A roll-forward record: committed (written and fsynced) before its mutation touches
    the session; once committed, whoever holds the guard next completes it."""

    op: ClassVar[str]

    def fields(self) -> dict[str, Any]: ...
    def apply(self, guard: Holder, files: SessionFiles, *, durable: bool) -> None: ...


def encode_record(record: Record) -> bytes:
    """The record's bytes as written at :data:`RECORD_OFFSET` (JSON object + newline)."""
    return orjson.dumps({"op": record.op, **record.fields()}, option=orjson.OPT_APPEND_NEWLINE)


def _on_transcript(files: SessionFiles, use: Callable[[int, int], None]) -> None:
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

    def apply(self, guard: Holder, files: SessionFiles, *, durable: bool) -> None:
        def complete(fd: int, size: int) -> None:
            cut_short = self.at <= size < self.end
            if cut_short or (size >= self.end > self.at and _platform.pread(fd, 1, self.end - 1) != b"\n"):
                cut(guard, fd, self.at, durable=durable)

        _on_transcript(files, complete)


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

    def apply(self, guard: Holder, files: SessionFiles, *, durable: bool) -> None:
        def complete(fd: int, _size: int) -> None:
            with in_place(guard):
                _platform.truncate(fd, self.at)
                _platform.pwrite(fd, self.line, self.at)
                if durable:
                    _platform.fsync(fd)

        _on_transcript(files, complete)


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

    def apply(self, guard: Holder, files: SessionFiles, *, durable: bool) -> None:
        with in_place(guard):
            for src, dst in self.moves:
                src_path = os.path.join(files.root, src)
                # Only a missing name skips a rename: an error raises (the record stays
                # and the next guard holder completes it), never leaves half the moves.
                if _platform.exists(src_path):
                    _platform.replace(src_path, os.path.join(files.root, dst))
        if durable:
            _platform.fsync_dir(files.root)


def _plain_name(name: object) -> bool:
    """A file name inside root (no separator, not . or ..): records never name anything else."""
    return isinstance(name, str) and bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


RECORD_TYPES: dict[str, type[AppendBatch | TailRewrite | Moves]] = {
    cls.op: cls for cls in (AppendBatch, TailRewrite, Moves)
}


def parse_record(raw: bytes, *, path: str | None = None, key: str | None = None) -> Record | None:
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
