"""Atomic file replacement: temp file in the same directory -> write -> fsync -> rename
-> directory fsync. On any error the temp file is removed and the original exception
propagates unchanged (cleanup never masks it)."""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from itertools import accumulate
from typing import NamedTuple

from .. import _platform

_BATCH = 1 << 20


class Written(NamedTuple):
    """What :func:`write_temp` wrote: bytes and newlines."""

    size: int
    lines: int


def write_temp(tmp_path: str, chunks: Iterable[bytes], durable: bool) -> Written:
    """Write ``chunks`` to a fresh ``tmp_path`` (mode 0600), in ~1 MiB writes; fsync when
    ``durable``. Returns the byte and newline counts (the newlines counted per write, not
    per chunk). On error the temp file is gone."""
    # A leftover temp file (or anything planted under its name) is removed, and the new
    # one is created exclusively, so nothing but a fresh regular file is ever written.
    unlink_quietly(tmp_path)
    fd = _platform.open_file(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    total = lines = 0
    try:
        try:
            for batch in _batches(chunks):
                _platform.write(fd, batch)
                total += len(batch)
                lines += batch.count(b"\n")
            if durable:
                _platform.fsync(fd)
        finally:
            _platform.close(fd)
    except BaseException:
        unlink_quietly(tmp_path)
        raise
    return Written(total, lines)


def _batches(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """``chunks`` joined into pieces of about :data:`_BATCH` bytes (a chunk is never split)."""
    if isinstance(chunks, list):
        # The cuts found with C-level loops (running sizes, bisection), not per chunk.
        ends = list(accumulate(map(len, chunks)))
        i, n = 0, len(chunks)
        while i < n:
            j = bisect_left(ends, (ends[i - 1] if i else 0) + _BATCH, i) + 1
            yield b"".join(chunks[i:j])
            i = j
        return
    pending: list[bytes] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size >= _BATCH:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)


def atomic_write(path: str, tmp_path: str, chunks: Iterable[bytes], *, durable: bool, directory: str) -> int:
    """Replace ``path`` with ``chunks`` all-or-nothing. Durable (fsync of file and
    directory) when ``durable``. Returns the byte count."""
    total = write_temp(tmp_path, chunks, durable).size
    try:
        _platform.replace(tmp_path, path)
    except BaseException:
        unlink_quietly(tmp_path)
        raise
    if durable:
        _platform.fsync_dir(directory)
    return total


def unlink_quietly(path: str) -> bool:
    """Remove ``path`` if it exists; never raises (used on cleanup paths). True if removed."""
    with contextlib.suppress(OSError):
        _platform.unlink(path)
        return True
    return False
