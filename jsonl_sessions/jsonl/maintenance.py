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

from .. import _platform
from ..compaction import CompactionReport, plan_compaction
from ..errors import CorruptTranscriptError, LockTimeoutError, SessionNotFoundError, UnsafePathError
from . import prune, quarantine
from .control import read_head
from .layout import SIDECAR_SUFFIX, TRANSCRIPT_SUFFIX, SessionFiles, classify, key_of_stem
from .metadata import Look, look, looks
from .session import Session
from .txn import Root, Tx, mutate


def compact(root: Root, files: SessionFiles, *, repair: bool) -> CompactionReport:
    """Rewrite the transcript as :func:`plan_compaction` says, under the guard (temp +
    rename: atomic). A ``problem`` refuses (:class:`CorruptTranscriptError`, nothing
    changed) unless ``repair``: then the original bytes are first saved to a quarantine
    file (fsynced, directory too). A torn tail alone is saved to a quarantine file of its
    own before the rewrite drops it. Nothing is written when nothing changes.
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
            saved = tx.torn_saved = _quarantine(tx, data)  # the copy holds the torn tail too
        if plan.changed:
            tx.install(plan.kept)
    return CompactionReport(files.key, plan, saved, bool(head.pending or head.seq & 1),
                            tx.torn_saved if plan.torn else None)


def _quarantine(tx: Tx, data: bytes) -> str:
    """Copy ``data`` to a new quarantine file (fsynced, directory too); its path."""
    return quarantine.save(tx.files, data, tx.root.clock())


# -- stale sessions ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CleanupReport:
    """What :func:`cleanup_stale` deleted: sessions (keys), orphan sidecars and the lock
    files of sessions that no longer exist (paths)."""

    deleted: tuple[str, ...]
    orphan_sidecars: tuple[str, ...]
    locks: tuple[str, ...] = ()


def cleanup_stale(root: Root, ttl_hours: float) -> CleanupReport:
    """Delete every session idle for ``ttl_hours`` (see
    :meth:`jsonl_sessions.SessionStore.cleanup_stale`), each under its guard after
    checking again; skips running, unreadable and busy sessions. Also removes orphan
    sidecars older than the TTL, then the lock files of sessions that no longer exist
    (:func:`jsonl_sessions.jsonl.prune.prune_locks`)."""
    cutoff = time.time_ns() - int(ttl_hours * 3600e9)  # checked by the store

    def stale(found: Look | None) -> bool:
        return (found is not None and found.error is None and found.state != "running"
                and found.activity_ns < cutoff)

    deleted = []
    for files, found in looks(root):
        if not stale(found):
            continue
        try:
            with mutate(root, files, timeout=0):
                if stale(look(files)) and Session(root, files).delete():
                    deleted.append(files.key)
        except (LockTimeoutError, UnsafePathError):  # busy, or its lock file is not a regular file
            continue
    sidecars = tuple(_remove_orphan_sidecars(root, cutoff))
    return CleanupReport(tuple(deleted), sidecars, prune.prune_locks(root, orphans=False).locks)


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
