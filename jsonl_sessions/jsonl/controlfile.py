"""The bytes of a session's control file (``<stem>.lock``): where each field lives, and
reading and decoding them. What the fields mean, and the protocol that writes and reads
them, is :mod:`jsonl_sessions.jsonl.control`.

Layout (docs/format.md): bytes 0-7 either zero, the visible end (little-endian u64: one
more than how many transcript bytes lock-free readers may see while a durable append is
not yet fsynced), or :data:`RETIRED` once the file was unlinked; bytes 8-15 the sequence
counter (odd while a mutation rewrites transcript bytes in place); bytes 16-55 the count
cache (transcript inode, size, a zero word, complete lines, counter when written); bytes 56-
the roll-forward record, empty or one JSON object and ``\\n``.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import Any, ClassVar, NamedTuple, Protocol

import orjson

from .. import _platform
from ..errors import UnsafePathError
from .layout import open_regular

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
COUNT = struct.Struct("<QQQQQ")  # transcript inode, size, zero (see CountCache), lines, sequence counter
#: How much of the control file one read takes first: the fixed part and a small record.
HEAD_BYTES = 4096


class Record(Protocol):
    """What the control file holds of a roll-forward record: its ``op`` and its fields
    (:func:`encode_record`). The records themselves, and how each is completed, are
    :class:`jsonl_sessions.jsonl.control.RollForward`."""

    op: ClassVar[str]

    def fields(self) -> dict[str, Any]: ...


class CountCache(NamedTuple):
    """What a writer last knew: the transcript (inode) had ``lines`` complete lines when
    it was ``size`` bytes long, with the sequence counter at ``seq``. Trusted only while
    all three still match the file: every change the store makes to bytes already there
    moves the counter or replaces the inode, and a tool that rewrites the file in place
    must do so under the lock and change the counter or the size (docs/format.md).

    On disk it takes five words: the third is written as zero. Earlier versions wrote the
    transcript's mtime there and compared it; they take a zero for a changed file and
    count again, so both read each other's caches correctly."""

    ino: int
    size: int
    lines: int
    seq: int

    def matches(self, st: os.stat_result, seq: int) -> bool:
        return self.ino == st.st_ino and self.size == st.st_size and self.seq == seq

    def matches_prefix(self, st: os.stat_result, size: int, seq: int) -> bool:
        """Whether the cache describes the first ``size`` bytes of the file ``st`` describes,
        which grew past them (a durable append in flight): same inode and counter, and
        ``size`` is what was counted."""
        return self.ino == st.st_ino and self.size == size and self.seq == seq


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


#: The fixed part (bytes 0-55) in one unpack: visible end or retired mark, counter, count cache.
FIXED = _FIXED = struct.Struct("<7Q")
_RETIRED_VALUE = int.from_bytes(RETIRED, "little")


def decode_head(raw: bytes) -> Head:
    """Decode the first bytes of a control file (any length; missing parts read as zero)."""
    if len(raw) >= RECORD_OFFSET:  # the usual case: the fixed part is whole
        end, seq, ino, size, _zero, lines, cached_seq = _FIXED.unpack_from(raw)
        cache = CountCache(ino, size, lines, cached_seq) if ino else None
        record = raw[RECORD_OFFSET:] if len(raw) > RECORD_OFFSET and raw[RECORD_OFFSET] else None
        if end == _RETIRED_VALUE:
            return Head(seq, cache, record, None, True)
        return Head(seq, cache, record, end - 1 if end else None)
    seq = SEQ.unpack_from(raw, SEQ_OFFSET)[0] if len(raw) >= SEQ_OFFSET + SEQ.size else 0
    cache = None
    if len(raw) >= COUNT_OFFSET + COUNT.size:
        ino, size, _zero, lines, cached_seq = COUNT.unpack_from(raw, COUNT_OFFSET)
        cache = CountCache(ino, size, lines, cached_seq) if ino else None
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
    return control_of(fd, _platform.pread(fd, HEAD_BYTES, 0))


def control_of(fd: int, raw: bytes) -> Head:
    """:func:`read_control` of ``fd``, whose first :data:`HEAD_BYTES` are ``raw`` (read
    by the caller): the rest of a long record is read too."""
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


def peek_count(path: str, st: os.stat_result, key: str | None = None) -> int | None:
    """:func:`peek_count_stat` without the control file's stat (no ``fstat``)."""
    return peek_count_stat(path, st, key)[0]


def peek_count_stat(path: str, st: os.stat_result, key: str | None = None, *,
                    with_stat: bool = False) -> tuple[int | None, os.stat_result | None]:
    """The count cache's line count of the transcript whose ``lstat`` is ``st``, read off
    a control file a directory scan just saw as a regular file: open (never following a
    symlink, never waiting), one read, close; no ``fstat`` and no ``fcntl``. Should it have
    become something else since, the read fails (a FIFO or directory cannot be ``pread``)
    rather than blocks; a file system that honours ``O_NONBLOCK`` on a regular file gets
    :func:`read_head`. None when there is no control file, or anything is in flight (an
    odd counter, a record, a visible end or the retired mark in bytes 0-7), or the cache
    does not describe exactly that file (inode and size) at the current counter: what
    :func:`decode_head` and :meth:`CountCache.matches` say, from one ``unpack``.
    ``with_stat``: also the control file's ``fstat``, taken before the read (one call more;
    None with a None count, or when it is not a regular file), for a reader that keeps
    what it read while the file is unchanged (:mod:`jsonl_sessions.jsonl.listcache`)."""
    try:
        fd = _platform.open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno in _platform.SYMLINK_ERRNOS or exc.errno in _platform.NOT_REGULAR_ERRNOS:
            raise UnsafePathError(key=key, path=path) from None
        raise
    own = None
    try:
        if with_stat:
            own = _platform.fstat(fd)
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
            return None, None
        return cache.lines, None
    if len(raw) < RECORD_OFFSET or (len(raw) > RECORD_OFFSET and raw[RECORD_OFFSET]):
        return None, None
    visible, seq, ino, size, _zero, lines, cache_seq = _FIXED.unpack_from(raw)
    if visible or seq & 1 or not ino or ino != st.st_ino or size != st.st_size or cache_seq != seq:
        return None, None
    if own is not None and not stat.S_ISREG(own.st_mode):
        own = None
    return lines, own


def encode_record(record: Record) -> bytes:
    """The record's bytes as written at :data:`RECORD_OFFSET` (JSON object + newline)."""
    return orjson.dumps({"op": record.op, **record.fields()}, option=orjson.OPT_APPEND_NEWLINE)
