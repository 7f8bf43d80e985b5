"""Where a session's bytes live: every file name the store uses, and the one way to open them.

For a session whose key encodes to ``<stem>`` (:func:`jsonl_sessions.keys.key_to_stem`),
``root`` holds (docs/format.md has the details):

- ``<stem>.jsonl``      the transcript (its existence is the session's existence);
- ``<stem>.meta.json``  the sidecar;
- ``<stem>.lock``       the lock / control file (unlinked only once the session is gone: :mod:`jsonl_sessions.jsonl.prune`);
- ``.<stem>.jsonl.tmp``, ``.<stem>.meta.json.tmp``  temp files of atomic replaces;
- ``<stem>.quarantine-<UTC time>[-n].jsonl.bak``  original bytes saved by a repair, or a torn tail saved before a cut.

Nothing else in the library derives a path: it asks :class:`SessionFiles` or the
functions here. Every open refuses to follow a symlink (:class:`UnsafePathError`).
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from typing import Any, NamedTuple

from .. import _platform, sidecar
from ..errors import CorruptMetadataError, SessionStoreError, UnsafePathError
from ..keys import hashed_stem_matches, is_hashed, key_to_stem, stem_to_key

TRANSCRIPT_SUFFIX = ".jsonl"
SIDECAR_SUFFIX = ".meta.json"
LOCK_SUFFIX = ".lock"
TMP_SUFFIX = ".tmp"
QUARANTINE_MARK = ".quarantine-"
QUARANTINE_SUFFIX = ".jsonl.bak"

#: How the transcript is opened for writing (appends land at its end).
WRITE_FLAGS = os.O_RDWR | os.O_APPEND

#: Roles of the names :func:`classify` recognises.
ROLES = ("transcript", "sidecar", "lock", "temp", "quarantine")

log = logging.getLogger("jsonl_sessions")


class FileState(NamedTuple):
    """Which file a stat describes (device and inode) and how it looked then (size and
    mtime in ns): the one way the store tells whether a path still names a file it saw
    before, and whether that file changed since. Make one with :meth:`of`."""

    dev: int
    ino: int
    size: int
    mtime: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileState:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def same_file(self, st: os.stat_result) -> bool:
        """Whether ``st`` describes this file (same device and inode): not renamed over or
        re-created since. Inode numbers are reused once a file is gone, so where that can
        happen the caller also checks the control file's counter, which every rename the
        store makes moves."""
        return st.st_ino == self.ino and st.st_dev == self.dev

    def unchanged(self, st: os.stat_result) -> bool:
        """:meth:`same_file`, with the same size and mtime: nothing appended, truncated or
        written since (to the mtime's resolution; the store's own in-place rewrites also
        move the counter, which callers compare too)."""
        return st.st_size == self.size and st.st_mtime_ns == self.mtime and self.same_file(st)


def open_regular(path: str, flags: int, key: str | None = None, *,
                 blocking: bool = True) -> tuple[int, os.stat_result] | None:
    """Open ``path`` without following a symlink: ``(fd, fstat)``, or None when it does
    not exist. Raises :class:`UnsafePathError` for a symlink or anything but a regular
    file (a FIFO, socket, device or directory), never waiting on one: the open is
    non-blocking, and the descriptor is made blocking only once ``fstat`` showed a
    regular file (nothing is left open on an error). ``blocking=False``: left
    non-blocking, for a descriptor read once with :func:`read_once` (one ``fcntl`` less)."""
    try:
        fd = _platform.open_file(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in _platform.SYMLINK_ERRNOS or exc.errno in _platform.NOT_REGULAR_ERRNOS:
            raise UnsafePathError(key=key, path=path) from None
        raise
    try:
        st = _platform.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        if regular and blocking:
            _platform.make_blocking(fd, flags)
    except BaseException:
        _platform.close(fd)
        raise
    if not regular:
        _platform.close(fd)
        raise UnsafePathError(key=key, path=path)
    return fd, st


def read_sidecar(path: str, key: str | None = None) -> tuple[dict[str, Any] | None, int | None]:
    """The sidecar at ``path`` and its modification time (ns, of the version read);
    ``(None, None)`` when there is none. Raises :class:`CorruptMetadataError` when it
    exists but is not a sidecar (or is a symlink, or of a newer format)."""
    meta, st = read_sidecar_stat(path, key)
    return meta, None if st is None else st.st_mtime_ns


def read_sidecar_stat(path: str, key: str | None = None) -> tuple[dict[str, Any] | None, os.stat_result | None]:
    """:func:`read_sidecar` with the whole ``fstat`` of the version read (open, ``fstat``,
    one read, close)."""
    try:
        opened = open_regular(path, os.O_RDONLY, key, blocking=False)
    except UnsafePathError:
        raise CorruptMetadataError(key=key, path=path, reason="not a regular file (symlink?)") from None
    if opened is None:
        return None, None
    fd, st = opened
    try:
        raw = read_once(fd, st.st_size + 1, flags=os.O_RDONLY)
    finally:
        _platform.close(fd)
    return sidecar.decode(raw, path, key), st


def read_once(fd: int, size: int, *, flags: int) -> bytes:
    """``pread(fd, size, 0)`` of a descriptor opened with ``flags`` by
    ``open_regular(..., blocking=False)``. Linux and macOS ignore ``O_NONBLOCK`` on
    regular files; a file system that honours it and answers ``EAGAIN`` gets the
    descriptor made blocking and the read retried, so it never reads as empty."""
    try:
        return _platform.pread(fd, size, 0)
    except BlockingIOError:
        _platform.make_blocking(fd, flags)
        return _platform.pread(fd, size, 0)


@dataclass(frozen=True, slots=True)
class SessionFiles:
    """The names and paths of one session's files (a value; make one with :meth:`of`)."""

    root: str
    key: str
    stem: str
    transcript: str
    sidecar: str
    lock: str
    tmp_transcript: str
    tmp_sidecar: str

    @classmethod
    def of(cls, root: str, key: str, stem: str | None = None) -> SessionFiles:
        """The files of ``key`` in ``root``; ``stem`` defaults to the key's (validating the
        key: :class:`InvalidSessionKeyError`)."""
        stem = key_to_stem(key) if stem is None else stem
        return cls.in_dir(os.path.join(root, ""), root, key, stem)

    @classmethod
    def in_dir(cls, prefix: str, root: str, key: str, stem: str) -> SessionFiles:
        """:meth:`of` with the stem known and ``prefix`` = ``os.path.join(root, "")``
        computed once for many sessions (a stem holds no separator, so ``prefix + name``
        is ``os.path.join(root, name)``)."""
        base = prefix + stem
        hidden = prefix + "." + stem
        return cls(root, key, stem, base + TRANSCRIPT_SUFFIX, base + SIDECAR_SUFFIX, base + LOCK_SUFFIX,
                   hidden + TRANSCRIPT_SUFFIX + TMP_SUFFIX, hidden + SIDECAR_SUFFIX + TMP_SUFFIX)

    @property
    def temps(self) -> tuple[str, str]:
        """Both temp files' paths."""
        return self.tmp_transcript, self.tmp_sidecar

    def open_transcript(self, flags: int) -> tuple[int, os.stat_result] | None:
        """The transcript opened with ``flags``: ``(fd, fstat)``, None when the session does
        not exist. :class:`UnsafePathError` for a symlink or a non-regular file."""
        return open_regular(self.transcript, flags, self.key)

    def open_transcript_for_write(self) -> tuple[int, os.stat_result] | None:
        """The transcript opened for mutation (:data:`WRITE_FLAGS`), as :meth:`open_transcript`."""
        return open_regular(self.transcript, WRITE_FLAGS, self.key)

    def transcript_exists(self) -> bool:
        """Whether the transcript is a regular file (a symlink is not a session). One lstat."""
        try:
            return stat.S_ISREG(_platform.lstat(self.transcript).st_mode)
        except FileNotFoundError:
            return False

    def read_sidecar(self) -> dict[str, Any] | None:
        """The sidecar; None when there is none. :class:`CorruptMetadataError` when unreadable."""
        return read_sidecar(self.sidecar, self.key)[0]

    def quarantine_path(self, stamp: str, n: int) -> str:
        """The ``n``-th candidate name (0: no ``-n``) of a quarantine copy made at ``stamp``."""
        suffix = "" if n == 0 else f"-{n}"
        return os.path.join(self.root, f"{self.stem}{QUARANTINE_MARK}{stamp}{suffix}{QUARANTINE_SUFFIX}")


def classify(name: str) -> tuple[str, str] | None:
    """``(role, stem)`` for a file name the store uses (role: one of :data:`ROLES`; the
    stem of a temp file whose name is not the store's is ""), None for anything else."""
    if name.startswith("."):
        if name.endswith(TMP_SUFFIX):
            for suffix in (TRANSCRIPT_SUFFIX, SIDECAR_SUFFIX):
                if name.endswith(suffix + TMP_SUFFIX):
                    return "temp", name[1 : -len(suffix + TMP_SUFFIX)]
            return "temp", ""
        return None
    if name.endswith(QUARANTINE_SUFFIX) and QUARANTINE_MARK in name:
        return "quarantine", name.split(QUARANTINE_MARK, 1)[0]
    for role, suffix in (("transcript", TRANSCRIPT_SUFFIX), ("sidecar", SIDECAR_SUFFIX), ("lock", LOCK_SUFFIX)):
        if name.endswith(suffix) and len(name) > len(suffix):
            return role, name[: -len(suffix)]
    return None


def key_of_stem(root: str, stem: str, meta: dict[str, Any] | None = None, *, read: bool = True) -> str | None:
    """The session key a stem stands for: decoded from the stem itself, or, for a hashed
    stem (a long key), read from its sidecar (``meta`` when the caller already read it,
    or ``read=False``: do not read it) and checked against the hash. None when neither
    works (a file the store did not make, or a hashed stem whose sidecar is missing or
    unreadable: logged)."""
    if not is_hashed(stem):
        return stem_to_key(stem)
    if meta is None and read:
        try:
            meta = read_sidecar(os.path.join(root, stem + SIDECAR_SUFFIX))[0]
        except (OSError, SessionStoreError) as exc:
            log.warning("cannot read the key of session file %s: %s", stem, exc)
            return None
    key = sidecar.text(meta, "key")
    return key if key is not None and hashed_stem_matches(stem, key) else None


def list_keys(root: str) -> list[str]:
    """Every session's key in ``root``, sorted: names ending in ``.jsonl`` that are
    regular files (not symlinks), do not start with ``.``, and decode back to a key.
    A name the store makes that is not a regular file (a symlink, FIFO, socket, device
    or directory) is skipped with a logged warning. Never parses a transcript and never
    opens one. O(files in root)."""
    return [key for key, _stem in scan(root)[0]]


def scan(root: str) -> tuple[list[tuple[str, str]], set[str]]:
    """One ``scandir`` of ``root``: ``(key, stem)`` of every session (as
    :func:`list_keys`), sorted by key, and the
    stems whose control file is a regular file (the file type comes with the entry)."""
    found = []
    controls = set()
    with _platform.scandir(root) as entries:
        for entry in entries:
            name = entry.name
            if not name.endswith(TRANSCRIPT_SUFFIX) or name.startswith("."):
                if name.endswith(LOCK_SUFFIX) and entry.is_file(follow_symlinks=False):
                    controls.add(name[: -len(LOCK_SUFFIX)])
                continue
            stem = name[: -len(TRANSCRIPT_SUFFIX)]
            if not entry.is_file(follow_symlinks=False):
                if is_hashed(stem) or stem_to_key(stem) is not None:
                    log.warning("skipping %s: not a regular file", entry.path)
                continue
            key = key_of_stem(root, stem)
            if key is not None:
                found.append((key, stem))
    found.sort()
    return found, controls
