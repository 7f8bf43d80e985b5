"""Session metadata: names, attribution, ownership, run state, and lock-free looks at sessions.

The contracts are those of the :class:`jsonl_sessions.SessionStore` methods of the same
names. Rules shared by everything here:

- **Setters** never create a session (:class:`SessionNotFoundError` on a missing one);
  each takes the session's guard, reads the sidecar, changes it and replaces it
  atomically (:meth:`jsonl_sessions.jsonl.session.Session.update_sidecar`). An unreadable sidecar
  (:class:`CorruptMetadataError`) is never overwritten.
- **Getters** take no lock. The sidecar is always read whole (it is replaced by rename),
  but it and the transcript's stats are two reads, not one snapshot.
- **Activity** is the newest modification time of transcript and sidecar (the file
  system's clock); ``created_at`` and ``state_since`` come from the store's clock.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from .. import _platform, sidecar
from ..errors import CorruptMetadataError, SessionStoreError
from ..listing import Listing, Value, follows, keeps, page_at, select
from ..types import SessionList, SessionMetadata
from . import control
from .control import peek_count, read_head
from .controlfile import peek_count_stat
from .layout import SIDECAR_SUFFIX, TRANSCRIPT_SUFFIX, SessionFiles, read_sidecar_stat, scan
from .listcache import Round
from .session import Session
from .txn import Root, mutate

log = logging.getLogger("jsonl_sessions")


class Look(NamedTuple):
    """A lock-free look at one session: its sidecar (None when absent or unreadable, then
    ``error`` says why: :class:`CorruptMetadataError`, or the ``OSError`` of a sidecar
    that cannot be read, e.g. no permission), the transcript's stat, the sidecar's mtime."""

    meta: dict[str, Any] | None
    error: CorruptMetadataError | OSError | None
    transcript: os.stat_result
    sidecar_mtime_ns: int | None
    #: Whether the directory scan that found the session saw its control file as a
    #: regular file (then a listing reads its head with one open and one read).
    control_seen: bool = False
    #: The sidecar's ``fstat`` (of the version read); None when absent or unreadable.
    sidecar_stat: os.stat_result | None = None

    @property
    def activity_ns(self) -> int:
        """Newest modification time of transcript and sidecar (ns since the epoch)."""
        return max(self.transcript.st_mtime_ns, self.sidecar_mtime_ns or 0)

    @property
    def state(self) -> str | None:
        return sidecar.state(self.meta)


def look(files: SessionFiles, control_seen: bool = False, transcript: os.stat_result | None = None) -> Look | None:
    """The session's sidecar and stats without a lock; None when the session does not
    exist (or its transcript is not a regular file). An unreadable sidecar is ``error``.
    ``control_seen``: see :attr:`Look.control_seen`. ``transcript``: the transcript's
    ``lstat`` when the caller just took it (else taken here)."""
    try:
        st = _platform.lstat(files.transcript) if transcript is None else transcript
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        meta, side = read_sidecar_stat(files.sidecar, files.key)
    except (CorruptMetadataError, OSError) as exc:
        try:
            mtime = _platform.lstat(files.sidecar).st_mtime_ns
        except OSError:
            mtime = None
        return Look(None, exc, st, mtime, control_seen)
    return Look(meta, None, st, None if side is None else side.st_mtime_ns, control_seen, side)


def look_strict(files: SessionFiles) -> Look | None:
    """:func:`look`, raising the error of an unreadable sidecar (:class:`CorruptMetadataError`,
    or the ``OSError`` of one that cannot be read)."""
    found = look(files)
    if found is not None and found.error is not None:
        raise found.error
    return found


def meta_of(files: SessionFiles) -> dict[str, Any] | None:
    """The sidecar of an existing session (``{}`` when it has none); None when the session
    does not exist. Raises :class:`CorruptMetadataError`."""
    found = look_strict(files)
    if found is None:
        return None
    return found.meta if found.meta is not None else {}


def metadata(root: Root, files: SessionFiles, found: Look) -> SessionMetadata | None:
    """The session's metadata from a look plus its message count (O(1): the count cache);
    None when it vanished meanwhile. Parses no transcript."""
    count = control.count(root, files)
    if count is None:
        return None
    return sidecar.describe(files.key, found.meta, count, found.transcript.st_size, found.activity_ns)


def looks(root: Root) -> Iterator[tuple[SessionFiles, Look]]:
    """Every session with a look at it, in key order; unreadable sidecars are logged (the
    session is still looked at), a transcript that cannot even be stat'ed is logged and
    skipped: one bad session never fails a listing."""
    entries, controls = scan(root.path)
    prefix = os.path.join(root.path, "")
    for key, stem in entries:
        seen = _look_listed(root, prefix, key, stem, stem in controls)
        if seen is not None:
            yield seen


def _look_listed(root: Root, prefix: str, key: str, stem: str, control_seen: bool,
                 transcript: os.stat_result | None = None) -> tuple[SessionFiles, Look] | None:
    """A look at the session a directory scan listed as ``key`` / ``stem`` (``prefix``: the
    root with a trailing separator); None when it is not a session (or vanished) or cannot
    even be stat'ed (logged). An unreadable sidecar is logged; the look still stands.
    ``transcript``: the transcript's ``lstat`` when the caller just took it."""
    # Not the store's cache of session files (root.files): a listing of more sessions than
    # it holds would evict all of it, closing the kept transcripts of warm sessions.
    files = SessionFiles.in_dir(prefix, root.path, key, stem)
    try:
        found = look(files, control_seen=control_seen, transcript=transcript)
    except OSError as exc:
        log.warning("cannot look at session %r: %s", key, exc)
        return None
    if found is None:
        return None
    if found.error is not None:
        log.warning("cannot read the sidecar of session %r: %s", key, found.error)
    return files, found


def listed(root: Root, files: SessionFiles, found: Look, kept: Round | None = None) -> SessionMetadata | None:
    """:func:`metadata` for a listing: a session whose messages cannot be counted (its
    transcript or control file unreadable, or not a regular file) is listed all the same,
    with ``message_count`` 0 and a logged warning, so one bad session never fails a
    listing of the others. ``kept``: the listing's use of the store's
    :class:`~jsonl_sessions.jsonl.listcache.Seen`, which keeps the metadata of a session
    whose count came off a matching count cache and whose sidecar was read without error
    (then the control file's ``fstat`` is taken too)."""
    st = found.transcript
    try:
        if found.control_seen:
            keeping = kept is not None and kept.keeping and found.error is None
            count, control_st = peek_count_stat(files.lock, st, files.key, with_stat=keeping)
        else:
            count, control_st = cached_count(files, st), None
        if count is not None:
            md = sidecar.describe(files.key, found.meta, count, st.st_size,
                                  max(st.st_mtime_ns, found.sidecar_mtime_ns or 0))
            if control_st is not None and kept is not None:
                return kept.keep(files.stem, md, st, found.sidecar_stat, control_st)
            return md
        return metadata(root, files, found)
    except (OSError, SessionStoreError) as exc:
        log.warning("cannot count the messages of session %r: %s (listed with message_count 0)", files.key, exc)
        return sidecar.describe(files.key, found.meta, 0, found.transcript.st_size, found.activity_ns)


def cached_count(files: SessionFiles, st: os.stat_result, *, seen: bool = False) -> int | None:
    """The message count of a transcript whose stat is ``st``, read off the control file's
    count cache alone: one read of the control file, no transcript open, no lock. None
    when the cache does not describe exactly that file (inode, size, mtime) at the
    current counter, or anything is in flight (an odd counter, a roll-forward record, a
    visible end, a removal): then the full consistent count applies. A cache entry is
    written under the guard for the state it names, so a match is that file's count.
    ``seen``: a directory scan just saw the control file as a regular file
    (:func:`jsonl_sessions.jsonl.control.peek_count`: no ``fstat``, no ``fcntl``)."""
    if seen:
        return peek_count(files.lock, st, files.key)
    head = read_head(files.lock, key=files.key)
    cache = head.cache
    if (head.seq & 1 or head.pending or head.visible is not None or head.retired or cache is None
            or not cache.matches(st, head.seq)):
        return None
    return cache.lines


def get_session_metadata(root: Root, files: SessionFiles) -> SessionMetadata | None:
    found = look_strict(files)
    return None if found is None else metadata(root, files, found)


def everything(root: Root) -> list[SessionMetadata]:
    """The metadata of every session, in key order: :func:`where` of every session, with
    what is unchanged since the store's last listing reused
    (:mod:`jsonl_sessions.jsonl.listcache`: three ``lstat`` a session instead of eight calls)."""
    entries, controls = scan(root.path)
    prefix = os.path.join(root.path, "")
    kept = root.seen.begin(len(entries))
    out = []
    for key, stem in entries:
        md = _listed_at(root, kept, prefix, key, stem, stem in controls)
        if md is not None:
            out.append(md)
    if kept.keeping:
        root.seen.replace(kept.fresh)
    return out


def _listed_at(root: Root, kept: Round, prefix: str, key: str, stem: str, control_seen: bool,
               transcript: os.stat_result | None = None, side: os.stat_result | None = None) -> SessionMetadata | None:
    """:func:`listed` of the session a directory scan listed as ``key`` / ``stem``: its kept
    metadata when its files are unchanged (``transcript`` / ``side``: their ``lstat``, when
    the caller just took them), else a full look. None when it is not a session (or
    vanished) or cannot even be stat'ed (logged)."""
    own = None  # a transcript lstat taken here, which the full look then need not repeat
    entry = kept.entries.get(stem) if control_seen else None
    if entry is not None:
        base = prefix + stem
        st = transcript
        if st is None:
            try:
                st = own = _platform.lstat(base + TRANSCRIPT_SUFFIX)
            except OSError:
                st = None
        if st is not None and stat.S_ISREG(st.st_mode):
            md = kept.reuse(stem, entry, key, st, base, side)
            if md is not None:
                return md
    seen = _look_listed(root, prefix, key, stem, control_seen, own)
    return None if seen is None else listed(root, *seen, kept)


def where(root: Root, keep: Callable[[Look], bool]) -> list[SessionMetadata]:
    """The metadata of every session whose look passes ``keep``, in key order."""
    out = []
    for files, found in looks(root):
        if keep(found):
            md = listed(root, files, found)
            if md is not None:
                out.append(md)
    return out


def listing(root: Root, spec: Listing) -> SessionList:
    """A page of ``list_sessions_with_metadata``: what :func:`jsonl_sessions.listing.select`
    returns over :func:`where`, reading less. A sort by name, creation time or message
    count needs every session's sidecar or count: that is the full listing, sorted. By key
    or by ``updated_at``, the order comes from the directory scan (keys) and, for
    ``updated_at`` (or an ``updated_since`` filter), the ``lstat`` of each session's
    transcript and sidecar (its activity); then sessions are looked at in that order,
    each filtered on its metadata, until the page and one more are found. So a page of a
    sidebar (``sort="updated_at", limit=50``) costs two ``lstat`` a session plus the
    full look at about 51 of them, instead of eight system calls a session. A session
    whose files are unchanged since this store object's last listing costs three
    ``lstat`` instead of a full look (:mod:`jsonl_sessions.jsonl.listcache`); a full
    listing by ``updated_at`` hands the two of its order on, so such a session costs
    one more (its lock file's), while a page takes the three again for the few sessions
    it looks at.

    The page is ordered by the values read before its sessions were looked at, and the
    next cursor names that position: a session written during the call shows its newer
    metadata where its older activity placed it."""
    if spec.sort not in ("key", "updated_at"):
        return select(spec, everything(root))
    entries, controls = scan(root.path)
    prefix = os.path.join(root.path, "")
    timed = spec.sort == "updated_at" or spec.updated_since is not None
    # The stats of the order are handed to the look of a full listing; a page (a limit)
    # looks at a few sessions, which take theirs again: keeping every session's two stat
    # results alive for it made a sidebar page of 10,000 sessions 10-15% slower.
    keep_stats = spec.limit is None
    order: list[tuple[Value, str, str, os.stat_result | None, os.stat_result | None]] = []
    for key, stem in entries:
        st = side = None
        if timed:
            stats = _activity(prefix + stem)
            if stats is None:
                continue
            activity, st, side = stats if keep_stats else (stats[0], None, None)
            if spec.updated_since is not None and activity < spec.updated_since:
                continue
            value: Value = activity if spec.sort == "updated_at" else key
        else:
            value = key
        if spec.after is None or follows(value, key, spec.after, spec.descending):
            order.append((value, key, stem, st, side))
    if spec.sort == "updated_at":
        order.sort(reverse=spec.descending)  # keys are unique: tuples never compare past them
    elif spec.descending:
        order.reverse()
    want = None if spec.limit is None else spec.offset + spec.limit + 1
    kept = root.seen.begin(len(entries))

    def looked() -> Iterator[tuple[SessionMetadata, Value]]:
        found = 0
        for value, key, stem, st, side in order:
            if want is not None and found >= want:
                return
            md = _listed_at(root, kept, prefix, key, stem, stem in controls, st, side)
            if md is not None and keeps(spec, md):
                found += 1
                yield md, value

    return page_at(spec, looked())


def _activity(path: str) -> tuple[int, os.stat_result, os.stat_result | None] | None:
    """The activity of the session whose files start with ``path`` (the root and stem), in
    microseconds, from an ``lstat`` of its transcript and sidecar, with both stats (the
    sidecar's None when it has none); None when it has no regular transcript (it
    vanished, or a look would skip it)."""
    try:
        st = _platform.lstat(path + TRANSCRIPT_SUFFIX)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        side: os.stat_result | None = _platform.lstat(path + SIDECAR_SUFFIX)
    except OSError:
        side = None
    return max(st.st_mtime_ns, 0 if side is None else side.st_mtime_ns) // 1000, st, side


def set_field(root: Root, files: SessionFiles, name: str, value: object) -> None:
    """Set one sidecar field of an existing session (atomic, under the guard)."""
    Session(root, files).update_sidecar(lambda meta: meta.__setitem__(name, value))


def delete_session_owned(root: Root, files: SessionFiles, owner: str) -> bool:
    """Delete the session when its principal is ``owner`` (non-empty), checked under the guard."""
    with mutate(root, files):
        if not files.transcript_exists():
            return False
        if sidecar.text(files.read_sidecar(), "principal_id") != owner:
            return False
        return Session(root, files).delete()


# -- run state ------------------------------------------------------------------------------
def set_session_state(root: Root, files: SessionFiles, state: str, turn: str | None) -> None:
    """Enter run state ``state`` for ``turn`` (both checked), under the guard."""
    Session(root, files).update_sidecar(lambda meta: sidecar.set_state(meta, state, turn, root.clock()))


# -- agent attribution ------------------------------------------------------------------------
def reattribute(root: Root, old: str, new: str | None) -> int:
    """Move every session of alias ``old`` to ``new`` (None: clear), each under its own
    guard; the number changed."""
    changed = 0
    for files, found in looks(root):
        if sidecar.text(found.meta, "agent_alias") != old:
            continue  # lock-free prefilter; re-checked under the guard
        with mutate(root, files) as tx:
            if not files.transcript_exists():
                continue
            try:
                meta = files.read_sidecar()
            except CorruptMetadataError as exc:
                log.warning("%s", exc)
                continue
            if meta is None or sidecar.text(meta, "agent_alias") != old:
                continue
            meta["agent_alias"] = new
            tx.write_sidecar(meta)
            changed += 1
    return changed
