"""What a listing read of each session, kept for the next listing while the session's three
files are provably unchanged.

A listing reads, for every session, the transcript's ``lstat``, the sidecar (open,
``fstat``, read, close) and the count off the control file's head (open, read, close):
eight system calls and a JSON decode a session. A store that lists again (an app's
sidebar, the viewer, a loop over pages) would read the same bytes again. :class:`Seen`
keeps, per session, the :class:`~jsonl_sessions.types.SessionMetadata` a listing built and
the stats of the three files it was built from (inode, device, size, mtime and ctime in
ns); the next listing ``lstat`` s the three files and reuses the metadata when all three
are the same: three system calls a session, no open, no read, no decode.

**Why the same stats mean the same bytes.** Any change to a file's bytes, and any rename
or re-creation of the name, gives the file at that name a new ctime (or a new inode): the
file system's current time, which no program can set (``utime`` sets mtime and atime;
ctime moves with it). So once that clock has moved past a file's ctime, any later change
shows as a different stat. The clock ticks coarsely (1 to 10 ms on Linux), and a change in
the tick of the read itself could keep the ctime; so an entry is kept only when every
ctime of the three files was at least :data:`SETTLED_NS` older than the start of the
listing that read them (git's "racy" index entries are the same problem). Recently
changed sessions are simply read again each time.

**What it still checks, and what it assumes.** The control file is one of the three: a
writer's roll-forward record, an odd counter, a visible end or a new count cache all
change its ctime, so a session with anything in flight is read in full, exactly as
without the cache (which completes a dead writer's committed record before counting).
Only a look that had nothing in flight, read the count off a cache that matched the
transcript, and read a sidecar without error is kept; an unreadable sidecar or control
file is read (and logged) every time. The cache assumes the file system's timestamps come
from a clock no more than :data:`SETTLED_NS` behind this machine's and never set back
past a kept ctime (true of a local file system; a network file system whose server clock
lags by more, or a clock stepped backwards, could let a change made in the very tick of
an earlier read go unseen). Mtimes must be settled too: on Windows ``st_ctime`` is the
creation time, so there only the mtime, size and file id tell, and a tool that rewrites
a file in place with the same size and sets its mtime back goes unseen (as it does by
the count cache, on every platform).

**Cost.** Memory: about 0.8 KB a kept session with its metadata (7.7 MB for 10,000);
nothing is kept for a store of more than :data:`MAX_ENTRIES` sessions. The first listing
of a store object keeps nothing (a one-shot ``ls`` pays nothing for it); from the second
on, a session read in full costs one ``fstat`` of its control file more (nine calls), and
a session whose files are unchanged three ``lstat``.
"""

from __future__ import annotations

import os
import struct
import time
from typing import NamedTuple

from .. import _platform
from ..types import SessionMetadata
from .layout import LOCK_SUFFIX, SIDECAR_SUFFIX

#: How long before a listing began every ctime of a session's files must be for what was
#: read of it to be kept (2 s: far above any file system clock's tick).
SETTLED_NS = 2_000_000_000
#: The most sessions kept (about 0.7 KB each, with their metadata): a listing of a store
#: with more keeps nothing.
MAX_ENTRIES = 100_000

#: A file's identity and look, packed (40 bytes, a third of a tuple's memory): inode,
#: device, size, mtime (ns), ctime (ns).
Stamp = bytes
_STAMP = struct.Struct("<QQQqq")
_pack = _STAMP.pack


def stamp(st: os.stat_result) -> Stamp:
    """What :class:`Seen` compares of a file's stat."""
    return _pack(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Entry(NamedTuple):
    """One kept session: its key, the metadata built, the stamps of its transcript, sidecar
    (None: it had none) and control file, and whether its ``context`` was empty (then the
    metadata object itself is handed out again, else a copy)."""

    key: str
    metadata: SessionMetadata
    transcript: Stamp
    sidecar: Stamp | None
    control: Stamp
    plain: bool


class Seen:
    """The kept sessions of one store object, by stem. Thread-safe: entries are immutable
    and each is checked against the files on its own, so threads listing at once can
    only disagree on which still-valid entries are kept."""

    def __init__(self, settle_ns: int = SETTLED_NS) -> None:
        #: see :data:`SETTLED_NS` (a test may shorten it, then wait that long and a tick)
        self.settle_ns = settle_ns
        self._entries: dict[str, Entry] = {}
        self._listings = 0

    def begin(self, sessions: int) -> Round:
        """Start a listing of a store of ``sessions`` sessions: what it may reuse, and
        whether it keeps what it reads (from the second listing of this object on, and
        only when the store has at most :data:`MAX_ENTRIES` sessions)."""
        self._listings += 1
        return Round(self, keep=self._listings > 1 and sessions <= MAX_ENTRIES)

    def put(self, stem: str, entry: Entry) -> None:
        if len(self._entries) >= MAX_ENTRIES and stem not in self._entries:
            self._entries = {}
        self._entries[stem] = entry

    def replace(self, entries: dict[str, Entry]) -> None:
        """After a listing of every session: keep exactly what it kept (sessions gone since
        the last full listing are forgotten)."""
        self._entries = entries if len(entries) <= MAX_ENTRIES else {}

    def clear(self) -> None:
        self._entries = {}

    def __len__(self) -> int:
        return len(self._entries)


class Round:
    """One listing's use of :class:`Seen`: ``entries`` holds what it may :meth:`reuse`;
    :meth:`keep` keeps what was just read of a session. ``fresh``: what a listing of every
    session kept, for :meth:`Seen.replace`."""

    def __init__(self, seen: Seen, *, keep: bool) -> None:
        self.seen = seen
        self.keeping = keep
        #: the kept sessions by stem, as the listing began
        self.entries = seen._entries
        #: ctimes from this one on are too recent to trust (see :data:`SETTLED_NS`)
        self.settled = time.time_ns() - seen.settle_ns
        self.fresh: dict[str, Entry] = {}

    def reuse(self, stem: str, entry: Entry, key: str, transcript: os.stat_result, base: str,
              sidecar: os.stat_result | None = None) -> SessionMetadata | None:
        """The metadata ``entry`` kept for session ``key`` (stem ``stem``, its files'
        paths ``base`` + suffix), whose transcript's ``lstat`` is ``transcript`` (and
        sidecar's ``sidecar``, when the caller has it): None unless the three files' stats
        are those it was read from. One ``lstat`` of the sidecar (unless given) and one
        of the control file; an error in either is None (the full look reports it)."""
        st = transcript
        if entry.key != key or entry.transcript != _pack(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns,
                                                         st.st_ctime_ns):
            return None
        try:
            st = sidecar if sidecar is not None else _platform.lstat(base + SIDECAR_SUFFIX)
            side: Stamp | None = _pack(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except FileNotFoundError:
            side = None
        except OSError:
            return None
        if side != entry.sidecar:
            return None
        try:
            st = _platform.lstat(base + LOCK_SUFFIX)
        except OSError:
            return None
        if entry.control != _pack(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
            return None
        md = entry.metadata
        if entry.plain:
            if md.context:  # a caller filled the dict of the object it was handed: read again
                return None
            self.fresh[stem] = entry
            return md
        self.fresh[stem] = entry
        return _copy(md)

    def keep(self, stem: str, md: SessionMetadata, transcript: os.stat_result, sidecar: os.stat_result | None,
             control: os.stat_result) -> SessionMetadata:
        """Keep ``md``, read from files whose stats are these, when every ctime and mtime is settled;
        returns what to hand out (``md``, or a copy when its context is not empty, so the
        kept one is never the caller's)."""
        if not self.keeping:
            return md
        settled = self.settled
        # mtime too: on Windows st_ctime is the creation time, and a write moves only the mtime
        if (max(transcript.st_ctime_ns, transcript.st_mtime_ns) >= settled
                or max(control.st_ctime_ns, control.st_mtime_ns) >= settled
                or (sidecar is not None and max(sidecar.st_ctime_ns, sidecar.st_mtime_ns) >= settled)):
            return md
        plain = not md.context
        entry = Entry(md.key, md, stamp(transcript), None if sidecar is None else stamp(sidecar), stamp(control),
                      plain)
        self.seen.put(stem, entry)
        self.fresh[stem] = entry
        return md if plain else _copy(md)


def _copy(md: SessionMetadata) -> SessionMetadata:
    """``md`` with a context dict of its own (every other field is immutable)."""
    return SessionMetadata(md.key, md.name, md.agent_alias, md.principal_id, md.state, md.turn_id, md.created_at,
                           md.updated_at, md.message_count, md.size_bytes, md.trim_breadcrumb, dict(md.context),
                           md.parent, md.fork_point)


__all__ = ["MAX_ENTRIES", "SETTLED_NS", "Entry", "Round", "Seen", "Stamp", "stamp"]
