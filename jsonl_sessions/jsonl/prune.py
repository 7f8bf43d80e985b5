"""What sessions that no longer exist leave behind, removed safely: their lock files, and
the orphan sidecars and temp files of interrupted creates, forks and deletes.

Every removal happens under the session's guard (taken without waiting: a busy session is
skipped), after recovery ran (taking the guard completes a committed roll-forward record,
which may bring the session back) and after checking again, under the guard, that the
session is absent. Under the guard a temp file is always garbage: every write that makes
one finishes (or is rolled forward) before the guard is released. A sidecar without a
transcript is garbage too (a create writes both under one hold of the guard, a delete
removes both under one), but callers choose whether to remove it now
(:func:`clear_leftovers`, ``prune_locks(orphans=True)``) or leave it to its TTL
(``cleanup_stale``).

A lock file is removed last, by :meth:`jsonl_sessions.jsonl.guard.SessionGuard.retire`: marked
retired and unlinked while its flock is held, so a process that still has it open and
locks it later opens the path again instead (docs/format.md, "Lock / control file").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import _platform
from ..errors import SessionStoreError
from ._atomic import unlink_quietly
from .guard import SessionGuard
from .layout import SessionFiles, classify, key_of_stem
from .txn import Root, acquire

_HASHED = re.compile(r"~[0-9a-f]{32}$")


@dataclass(frozen=True)
class PruneReport:
    """What :func:`prune_locks` removed: lock files, orphan sidecars and temp files (paths)."""

    locks: tuple[str, ...] = ()
    sidecars: tuple[str, ...] = ()
    temps: tuple[str, ...] = ()

    @property
    def removed(self) -> tuple[str, ...]:
        return self.locks + self.sidecars + self.temps


def _exists(path: str) -> bool:
    """Whether anything (a symlink included) is at ``path``: one ``lstat``."""
    try:
        _platform.lstat(path)
    except FileNotFoundError:
        return False
    return True


def _stems(root: str) -> dict[str, set[str]]:
    """stem -> the roles of the store's files with that stem in ``root`` (one listing)."""
    found: dict[str, set[str]] = {}
    for name in _platform.listdir(root):
        role_stem = classify(name)
        if role_stem is not None and role_stem[1]:
            found.setdefault(role_stem[1], set()).add(role_stem[0])
    return found


def _files(root: str, stem: str) -> SessionFiles | None:
    """The files of ``stem`` when it is a stem the store makes (else None: not ours)."""
    key = key_of_stem(root, stem)
    if key is None:
        if not _HASHED.search(stem):
            return None
        key = f"<stem {stem}>"  # a long key whose sidecar is gone: only named in messages
    return SessionFiles.of(root, key, stem)


def _settle(guard: SessionGuard, files: SessionFiles, *, sidecar: bool, temps: list[str],
            sidecars: list[str]) -> bool:
    """Under ``guard``: remove the temp files, and (``sidecar``) a sidecar without a
    transcript; True when the session is absent afterwards (no transcript, no sidecar)."""
    for temp in files.temps:
        if _exists(temp) and unlink_quietly(temp):
            temps.append(temp)
    if _exists(files.transcript):
        return False
    if _exists(files.sidecar):
        if not sidecar:
            return False
        _platform.unlink(files.sidecar)
        sidecars.append(files.sidecar)
    return True


def clear_leftovers(root: Root, stem: str, timeout: float | None = 0) -> list[str]:
    """Take the guard of the session with file stem ``stem`` (waiting up to ``timeout``;
    recovery runs), remove its temp files and, when it has no transcript, its sidecar; the
    paths removed (the directory fsynced after, in fsync mode). Nothing for a stem the
    store does not make. Raises :class:`LockTimeoutError` when the guard stays busy.
    Acknowledged data is never removed: a transcript is never touched, and a sidecar only
    when no transcript exists under the guard (it then describes no session)."""
    files = _files(root.path, stem)
    if files is None:
        return []
    temps: list[str] = []
    sidecars: list[str] = []
    guard = acquire(root, files, timeout)
    try:
        _settle(guard, files, sidecar=True, temps=temps, sidecars=sidecars)
    finally:
        guard.release()
    if (temps or sidecars) and root.durable:
        _platform.fsync_dir(root.path)
    return temps + sidecars


def prune_locks(root: Root, *, orphans: bool) -> PruneReport:
    """Remove the lock file of every session that does not exist, each under its guard
    (skipped when busy, or held by this thread) after checking again that neither
    transcript nor sidecar exists; with ``orphans``, first remove a sidecar that has no
    transcript (and temp files, always). Lock files of live sessions, files the store does
    not make and quarantine files are never touched. Safe against every other process
    using the store (see :meth:`jsonl_sessions.jsonl.guard.SessionGuard.retire`); processes of
    a version that does not know the retired mark must not use the store meanwhile.
    Cost: one directory listing, and for each candidate a guard, a few ``lstat`` and an
    unlink; the directory is fsynced once at the end in fsync mode."""
    locks: list[str] = []
    sidecars: list[str] = []
    temps: list[str] = []
    for stem, roles in sorted(_stems(root.path).items()):
        if "lock" not in roles or "transcript" in roles or ("sidecar" in roles and not orphans):
            continue
        files = _files(root.path, stem)
        if files is None or not _exists(files.lock):
            continue
        try:
            guard = acquire(root, files, timeout=0)
        except (SessionStoreError, OSError):
            continue  # busy, not a regular file, or a record this version cannot complete
        try:
            if guard.depth == 1 and _settle(guard, files, sidecar=orphans, temps=temps, sidecars=sidecars):
                guard.retire()
                locks.append(files.lock)
        except OSError:
            continue
        finally:
            guard.release()
    if (locks or sidecars or temps) and root.durable:
        _platform.fsync_dir(root.path)
    return PruneReport(tuple(locks), tuple(sidecars), tuple(temps))


__all__ = ["PruneReport", "clear_leftovers", "prune_locks"]
