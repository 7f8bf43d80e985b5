"""The store's append written as bare Python: the least interpreter work that makes the same
system calls with the same guarantees, the yardstick for the Python the store adds.

:class:`BareAppend` appends to a transcript and a control file in the store's format
(docs/format.md), one function body, no objects built beyond the record, and makes
exactly the system calls of a warm append of ``SessionStore`` (listed in
benchmarks/README.md), in the same order:

- a thread lock and ``flock(LOCK_EX | LOCK_NB)`` on the control file, then one ``pread``
  of it: a retired mark, a visible end, an odd counter or a roll-forward record would
  each stop the fast path (recovery is not modelled: it raises);
- ``lstat`` of the transcript: the kept descriptor must still be the same regular file,
  with the size it had after the last append, and the counter as then (the last line,
  id and "no torn tail" kept in memory are then still current);
- a ULID after the last one (monotonic: a fresh one, or the last plus a random step);
  the message checked as the store checks it (role, id, kind, ``created_at``, extras),
  encoded by orjson with the NaN check and the size limit;
- one ``write`` (rolled back by ``ftruncate`` if it fails), the count cache written when
  it was current, ``flock(LOCK_UN)``: 6 calls (the new size is the old one plus the line);
- ``"fsync"``: the visible end written before the write, an ``fsync``, then one ``pwrite``
  clearing the visible end and writing the count cache: 8.

A measurement aid, never used by the package. ``python -m benchmarks.appendpath`` times it
next to the store."""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import random
import re
import stat
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

import orjson

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FIXED = struct.Struct("<7Q")  # visible end, counter, count cache (inode, size, mtime, lines, counter)
_U64 = struct.Struct("<Q")
_COUNT = struct.Struct("<5Q")
_OPTIONS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_PAIRS = ["0123456789ABCDEFGHJKMNPQRSTVWXYZ"[i >> 5] + "0123456789ABCDEFGHJKMNPQRSTVWXYZ"[i & 31]
          for i in range(1024)]
_RESERVED = frozenset(("id", "created_at", "role", "kind", "content"))
_MAX = (1 << 128) - 1
_MASK50 = (1 << 50) - 1
_has_null = re.compile(b"null").search


class BareAppend:
    """One session (``<stem>.jsonl`` and ``<stem>.lock`` in ``directory``) appended to by
    :meth:`append`; ``durable``: the ``"fsync"`` mode's calls."""

    def __init__(self, directory: str, durable: bool, max_message_bytes: int = 64 << 20, *,
                 seam: bool = False, fstat: bool = False, no_count: bool = False, mapped: bool = False) -> None:
        self.path = os.path.join(directory, "bare.jsonl")
        self.lock_path = os.path.join(directory, "bare.lock")
        self.durable = durable
        self.limit = max_message_bytes
        self.rlock = threading.RLock()
        self.lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC | _O_NOFOLLOW, 0o600)
        os.pwrite(self.lock_fd, bytes(_FIXED.size), 0)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_CLOEXEC | _O_NOFOLLOW, 0o600)
        st = os.fstat(self.fd)
        self.dev, self.ino, self.size, self.mtime = st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
        self.seq = 0
        self.last = 0  # the last id's value (0: none yet)
        self.top, self.head = -1, ""  # the upper 78 bits of the last id and their 16 characters
        # The count cache of the empty transcript (the store writes one with the first append).
        os.pwrite(self.lock_fd, _COUNT.pack(st.st_ino, 0, st.st_mtime_ns if fstat else 0, 0, 0), 16)
        # Variants, each adding, dropping or replacing system calls, to measure what that
        # costs or buys (those dropping one give up guarantees: see benchmarks/README.md):
        # every call through the store's platform seam (no call dropped); an fstat after
        # the write, its mtime compared by the next append (the 7 calls of earlier
        # versions); no count cache written; the control file read and written through a
        # mapping instead of pread / pwrite.
        calls: Any = os
        if seam:
            from jsonl_sessions import _platform as calls
        self._lstat, self._fstat, self._pread, self._pwrite = calls.lstat, calls.fstat, calls.pread, calls.pwrite
        self.with_fstat, self.no_count = fstat, no_count
        self.mapping = mmap.mmap(self.lock_fd, _FIXED.size) if mapped else None

    def close(self) -> None:
        if self.mapping is not None:
            self.mapping.close()
        os.close(self.fd)
        os.close(self.lock_fd)

    def append(self, message: Mapping[str, Any]) -> str:
        """Append one message (a dict as ``SessionStore.append`` takes it); its id."""
        # The checks of types.as_message / ChatMessage.from_dict.
        if not isinstance(message, Mapping):
            raise TypeError("a message must be a mapping")
        role, mid, created, kind = (message.get("role"), message.get("id") or "", message.get("created_at"),
                                    message.get("kind") or "message")
        if not isinstance(role, str) or not isinstance(mid, str) or not isinstance(kind, str) or (
                created is not None and type(created) is not int):
            raise ValueError("bad message field")
        if mid:
            raise NotImplementedError("a caller's id is not modelled")
        rlock = self.rlock
        rlock.acquire()
        lock_fd = self.lock_fd
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            try:
                mapping = self.mapping
                raw = self._pread(lock_fd, 4096, 0) if mapping is None else mapping
                if len(raw) != _FIXED.size:
                    raise NotImplementedError("a roll-forward record (recovery) is not modelled")
                end, seq, c_ino, c_size, c_mtime, c_lines, c_seq = _FIXED.unpack(raw)
                if end or seq & 1:  # a retired mark, a visible end left, an odd counter
                    raise NotImplementedError("recovery is not modelled")
                st = self._lstat(self.path)
                if not stat.S_ISREG(st.st_mode) or st.st_ino != self.ino or st.st_dev != self.dev:
                    raise NotImplementedError("reopening the path is not modelled")
                size = st.st_size
                if size != self.size or (self.with_fstat and st.st_mtime_ns != self.mtime) or seq != self.seq:
                    raise NotImplementedError("reading the tail again is not modelled")
                if self.with_fstat:
                    counted = c_lines if (c_ino == st.st_ino and c_size == size and c_mtime == st.st_mtime_ns
                                          and c_seq == seq) else -1
                else:
                    counted = c_lines if c_ino == st.st_ino and c_size == size and c_seq == seq else -1
                now = time.time_ns() // 1_000_000
                value = (now << 80) | random.getrandbits(80)
                if value <= self.last:
                    value = min(self.last + 1 + random.getrandbits(40), _MAX)
                t = _PAIRS
                top = value >> 50
                if top == self.top:
                    head = self.head
                else:
                    ms, hi = top >> 30, top & 0x3FFFFFFF
                    head = self.head = "".join((
                        t[ms >> 40], t[(ms >> 30) & 1023], t[(ms >> 20) & 1023], t[(ms >> 10) & 1023], t[ms & 1023],
                        t[hi >> 20], t[(hi >> 10) & 1023], t[hi & 1023]))
                    self.top = top
                lo = value & _MASK50
                new_id = "".join((head, t[lo >> 40], t[(lo >> 30) & 1023], t[(lo >> 20) & 1023],
                                  t[(lo >> 10) & 1023], t[lo & 1023]))
                record = {"id": new_id, "created_at": now if created is None else created, "role": role,
                          "kind": kind, "content": message.get("content")}
                if not _RESERVED.issuperset(message):
                    for k, v in message.items():
                        if k not in _RESERVED:
                            if not isinstance(k, str):
                                raise ValueError("extra field names are strings")
                            record[k] = v
                line = orjson.dumps(record, option=_OPTIONS)
                if _has_null(line) and _non_finite(record):
                    raise ValueError("NaN")
                if len(line) > self.limit:
                    raise ValueError("too long")
                fd = self.fd
                try:
                    new_size = size + len(line)
                    if self.durable:  # visible end; write; fsync; visible end cleared + count cache
                        self._pwrite(lock_fd, _U64.pack(size + 1), 0)
                        if os.write(fd, line) != len(line):
                            raise OSError("short write")
                        mtime = self._fstat(fd).st_mtime_ns if self.with_fstat else 0
                        os.fsync(fd)
                        if counted >= 0:
                            self._pwrite(lock_fd, _FIXED.pack(0, seq, st.st_ino, new_size, mtime, counted + 1, seq), 0)
                        else:
                            self._pwrite(lock_fd, bytes(8), 0)
                        self.size, self.mtime, self.last = new_size, mtime, value
                        return new_id
                    if os.write(fd, line) != len(line):
                        raise OSError("short write")
                except BaseException:
                    os.ftruncate(fd, size)
                    raise
                mtime = 0
                if self.with_fstat:  # earlier versions: the new size and mtime from the file
                    st = self._fstat(fd)
                    if st.st_size != new_size:
                        raise NotImplementedError("another writer's line is not modelled")
                    mtime = self.mtime = st.st_mtime_ns
                self.size, self.last = new_size, value
                if counted >= 0 and not self.no_count:
                    packed = _COUNT.pack(st.st_ino, new_size, mtime, counted + 1, seq)
                    if mapping is None:
                        self._pwrite(lock_fd, packed, 16)
                    else:
                        mapping[16:56] = packed
                return new_id
            finally:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
        finally:
            rlock.release()


def _non_finite(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value)
    return False
