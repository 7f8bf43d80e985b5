"""Store maintenance: compact / repair a transcript, delete stale sessions, clean leftovers.

Each operation computes a report (a frozen dataclass) that says what it found and did,
so a caller (the command line, a supervisor) can print it; the
:class:`jsonl_sessions.SessionStore` methods return the counts their contracts name.
:func:`plan_compaction` is pure: it says what :func:`compact` would write without
writing anything.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass

from . import _platform
from .compaction import CompactionReport, plan_compaction
from .control import read_head
from .errors import CorruptTranscriptError, LockTimeoutError, SessionNotFoundError, UnsafePathError
from .layout import SIDECAR_SUFFIX, TRANSCRIPT_SUFFIX, SessionFiles, classify, key_of_stem
from .messages import delete
from .metadata import Look, look, looks
from .rules import check_number
from .sidecar import EPOCH, from_ms
from .txn import Root, Tx, mutate


def compact(root: Root, files: SessionFiles, *, repair: bool) -> CompactionReport:
    """Rewrite the transcript as :func:`plan_compaction` says, under the guard (temp +
    rename: atomic). A ``problem`` refuses (:class:`CorruptTranscriptError`, nothing
    changed) unless ``repair``: then the original bytes are first saved to a quarantine
    file (fsynced, directory too). Nothing is written when nothing changes.
    :class:`SessionNotFoundError` for a missing session. O(transcript)."""
    head = read_head(files.lock)
    with mutate(root, files) as tx:
        if not tx.open():
            raise SessionNotFoundError(key=files.key)
        data = tx.read_all()
        plan = plan_compaction(data)
        saved = None
        if plan.problem is not None:
            if not repair:
                p = plan.problem
                raise CorruptTranscriptError(key=files.key, path=files.transcript, line=p.line, offset=p.offset,
                                             reason=p.reason)
            saved = _quarantine(tx, data)
        if plan.changed:
            tx.install(plan.kept)
    return CompactionReport(files.key, plan, saved, bool(head.pending or head.seq & 1))


def _quarantine(tx: Tx, data: bytes) -> str:
    """Copy ``data`` to a new quarantine file (fsynced, directory too); its path."""
    now = from_ms(tx.root.clock()) or EPOCH
    stamp = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"
    n = 0
    while True:
        path = tx.files.quarantine_path(stamp, n)
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
        _platform.fsync_dir(tx.root.path)
    except BaseException:
        with contextlib.suppress(OSError):
            _platform.unlink(path)
        raise
    return path


# -- stale sessions ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CleanupReport:
    """What :func:`cleanup_stale` deleted: sessions (keys) and orphan sidecars (paths)."""

    deleted: tuple[str, ...]
    orphan_sidecars: tuple[str, ...]


def cleanup_stale(root: Root, ttl_hours: float) -> CleanupReport:
    """Delete every session idle for ``ttl_hours`` (see
    :meth:`jsonl_sessions.SessionStore.cleanup_stale`), each under its guard after
    checking again; skips running, unreadable and busy sessions. Also removes orphan
    sidecars older than the TTL."""
    cutoff = time.time_ns() - int(check_number("ttl_hours", ttl_hours) * 3600e9)

    def stale(found: Look | None) -> bool:
        return (found is not None and found.error is None and found.state != "running"
                and found.activity_ns < cutoff)

    deleted = []
    for files, found in looks(root):
        if not stale(found):
            continue
        try:
            with mutate(root, files, timeout=0):
                if stale(look(files)) and delete(root, files):
                    deleted.append(files.key)
        except (LockTimeoutError, UnsafePathError):  # busy, or its lock file is not a regular file
            continue
    return CleanupReport(tuple(deleted), tuple(_remove_orphan_sidecars(root, cutoff)))


def _remove_orphan_sidecars(root: Root, cutoff_ns: int) -> list[str]:
    """Unlink sidecars without a transcript (not sessions) last modified before the cutoff,
    each under its session's guard (skipped when busy); their paths."""
    with _platform.scandir(root.path) as entries:
        stems = [found[1] for e in entries if (found := classify(e.name)) is not None and found[0] == "sidecar"]
    removed = []
    for stem in stems:
        path = os.path.join(root.path, stem + SIDECAR_SUFFIX)
        key = None if _platform.exists(path[: -len(SIDECAR_SUFFIX)] + TRANSCRIPT_SUFFIX) else key_of_stem(root.path, stem)
        if key is None or root.files(key).sidecar != path:
            continue
        files = root.files(key)
        with contextlib.suppress(LockTimeoutError, FileNotFoundError), mutate(root, files, timeout=0):
            st = _platform.lstat(path)
            if not _platform.exists(files.transcript) and stat.S_ISREG(st.st_mode) and st.st_mtime_ns < cutoff_ns:
                _platform.unlink(path)
                if root.durable:
                    _platform.fsync_dir(root.path)
                removed.append(path)
    return removed


# -- leftovers at open -------------------------------------------------------------------------
def clean_leftovers(root: Root) -> None:
    """Remove temp files left by an interrupted write (completing committed records first),
    for every session whose guard is free right now. Never waits."""
    try:
        names = _platform.listdir(root.path)
    except OSError:
        return
    stems = {found[1] for name in names if (found := classify(name)) is not None and found[0] == "temp" and found[1]}
    for stem in stems:
        key = key_of_stem(root.path, stem) or f"<stem {stem}>"
        files = SessionFiles.of(root.path, key, stem)
        with contextlib.suppress(LockTimeoutError, UnsafePathError, OSError), mutate(root, files, timeout=0):
            for temp in files.temps:
                with contextlib.suppress(OSError):
                    _platform.unlink(temp)
