"""Quarantine files: bytes the store is about to remove that may still matter, saved next
to the transcript first (``<stem>.quarantine-<UTC time>[-n].jsonl.bak``, docs/format.md).

Two things are saved: the original transcript of ``compact(key, repair=True)`` before it
drops lines that do not parse, and a torn tail (a final fragment without its newline)
before any mutation cuts it, since the fragment may be a whole message whose newline an
outside truncate removed. The store never removes a quarantine file.
"""

from __future__ import annotations

import contextlib
import os

from .. import _platform
from ..sidecar import EPOCH, from_ms
from .layout import SessionFiles


def save(files: SessionFiles, data: bytes, now_ms: int) -> str:
    """Write ``data`` to a new quarantine file of the session (stamped ``now_ms``, UTC, to the
    millisecond; ``-1``, ``-2``... when that name is taken: created with ``O_EXCL``, mode
    0600) and return its path. Always durable: the file and the directory are fsynced
    before this returns, so the bytes survive a power loss even when the caller's cut does.
    On error the partial file is removed and the error raised: nothing was saved, and the
    caller must not remove the bytes. Cost: O(len(data))."""
    now = from_ms(now_ms) or EPOCH
    stamp = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"
    n = 0
    while True:
        path = files.quarantine_path(stamp, n)
        try:
            fd = _platform.open_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            n += 1
            continue
        break
    try:
        try:
            _platform.write(fd, data)
            _platform.fsync(fd)
        finally:
            _platform.close(fd)
        _platform.fsync_dir(files.root)
    except BaseException:
        with contextlib.suppress(OSError):
            _platform.unlink(path)
        raise
    return path


__all__ = ["save"]
