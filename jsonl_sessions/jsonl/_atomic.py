"""Atomic file replacement: temp file in the same directory -> write -> fsync -> rename
-> directory fsync. On any error the temp file is removed and the original exception
propagates unchanged (cleanup never masks it)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from .. import _platform

_BATCH = 1 << 20


def write_temp(tmp_path: str, chunks: Iterable[bytes], durable: bool) -> int:
    """Write ``chunks`` to a fresh ``tmp_path`` (mode 0600), in ~1 MiB writes; fsync when
    ``durable``. Returns the byte count. On error the temp file is gone."""
    # A leftover temp file (or anything planted under its name) is removed, and the new
    # one is created exclusively, so nothing but a fresh regular file is ever written.
    unlink_quietly(tmp_path)
    fd = _platform.open_file(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    total = 0
    try:
        try:
            pending: list[bytes] = []
            size = 0
            for chunk in chunks:
                pending.append(chunk)
                size += len(chunk)
                if size >= _BATCH:
                    _platform.write(fd, b"".join(pending))
                    total += size
                    pending, size = [], 0
            if pending:
                _platform.write(fd, b"".join(pending))
                total += size
            if durable:
                _platform.fsync(fd)
        finally:
            _platform.close(fd)
    except BaseException:
        unlink_quietly(tmp_path)
        raise
    return total


def atomic_write(path: str, tmp_path: str, chunks: Iterable[bytes], *, durable: bool, directory: str) -> int:
    """Replace ``path`` with ``chunks`` all-or-nothing. Durable (fsync of file and
    directory) when ``durable``. Returns the byte count."""
    total = write_temp(tmp_path, chunks, durable)
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
