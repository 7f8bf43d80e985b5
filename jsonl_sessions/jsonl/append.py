"""The lean path of the most common write: one message appended to a warm session.

"Warm" means this process kept the transcript open since its own last mutation
(:class:`~jsonl_sessions.jsonl.guard.TranscriptView`) and nothing has happened since: the
guard is taken first (no reentry), the control file holds no roll-forward record and an
even counter, one ``lstat`` of the path shows the same regular file with the size, mtime
and counter the view recorded, the view's tail is known, is not torn and its last line
starts the way the store writes ids, and no group commit is waiting. Then the append is
the same work as :func:`jsonl_sessions.jsonl.messages.append_many` does (same id rule, same
encoding and limits, one write after the committed bytes, count cache and view kept
current), without the general machinery's wrappers.

Anything else (a cold or changed session, a message with its own id, recovery work, a
nested guard) takes the general path before a byte is written. A failing write is undone as by :meth:`jsonl_sessions.jsonl.txn.Tx.append` (counter odd,
truncate to the committed size, counter even, descriptor closed): an unacknowledged line
never appears later. Only ``"flush"`` mode: durable appends go through
:mod:`jsonl_sessions.jsonl.group_commit`.

System calls of a warm append: flock, pread of the control file, lstat, write, fstat,
pwrite of the count cache (when the cache matched), unlock.
"""

from __future__ import annotations

import contextlib
import stat

from .. import _platform, codec, ids
from ..types import ChatMessage
from .guard import REGISTRY, GuardClosed, SessionGuard, TranscriptView
from .layout import SessionFiles
from .lines import Tail
from .messages import append_many
from .txn import DEFAULT, Root, enter


def append(root: Root, files: SessionFiles, message: ChatMessage) -> str:
    """Append ``message`` in ``"flush"`` mode and return its id: the lean way when the
    session is in the plain warm state, else (still under the guard taken here, so the
    control file is read once) :func:`jsonl_sessions.jsonl.messages.append_many`. Raises what
    :meth:`jsonl_sessions.SessionStore.append` raises. Cost: O(1)."""
    guard = REGISTRY.get(files.lock)
    if guard.view is None or message.id or guard.pending or guard.leading:
        return append_many(root, files, (message,))[0]
    first: list[bool] = []
    try:
        enter(root, files, guard, DEFAULT, first)  # completes a dead writer's work, if any
    except GuardClosed:
        return append_many(root, files, (message,))[0]
    try:
        if first[0]:  # not nested in a held guard: the general path knows the outer mutation
            found = _append_held(root, files, guard, message)
            if found is not None:
                return found
        return append_many(root, files, (message,))[0]
    finally:
        guard.release()


def _append_held(root: Root, files: SessionFiles, guard: SessionGuard, message: ChatMessage) -> str | None:
    view = guard.view
    if view is None or view.seq != guard.seq:
        return None
    tail = view.tail
    if tail is None or tail.committed != tail.size or tail.last_line is None:
        return None
    previous = view.last_id or codec.prefix_id(tail.last_line)
    if not previous:
        return None
    try:
        st = _platform.lstat(files.transcript)
    except FileNotFoundError:
        return None
    if not (stat.S_ISREG(st.st_mode) and st.st_size == view.size and st.st_mtime_ns == view.mtime
            and st.st_ino == view.ino and st.st_dev == view.dev):
        return None
    now = root.clock()
    new_id = ids.next_id(previous, now)
    if new_id is None:
        return None  # the general path reports it
    created = message.created_at
    line = codec.encode_record(codec.record_of(message, new_id, now if created is None else created), files.key)
    if len(line) > root.max_message_bytes:
        return None  # the general path reports it
    cache = guard.count
    before = cache.lines if cache is not None and cache.matches(st, guard.seq) else None
    fd = view.fd
    guard.changes += 1
    try:
        _platform.write(fd, line)
    except BaseException:
        _undo(guard, fd, tail.committed)
        raise
    _keep(guard, view, line, new_id, before)
    return new_id


def _undo(guard: SessionGuard, fd: int, committed: int) -> None:
    """After a failed write: cut whatever part of it landed (counter odd around the cut)
    and close the kept descriptor."""
    with contextlib.suppress(OSError):
        guard.begin_in_place()
    with contextlib.suppress(OSError):
        _platform.truncate(fd, committed)
    with contextlib.suppress(OSError):
        guard.end_in_place()
    guard.drop_view()


def _keep(guard: SessionGuard, view: TranscriptView, line: bytes, new_id: str, before: int | None) -> None:
    """After the write: the new view (and count cache) of the transcript. The append
    stands whatever fails here: the view or the cache is then dropped, rebuilt later."""
    try:
        st = _platform.fstat(view.fd)
    except OSError:
        guard.drop_view()
        return
    end = view.size + len(line)
    ours = st.st_size == end  # else a foreign writer appended too: read the tail again, count later
    guard.view = TranscriptView(view.fd, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, guard.seq,
                                Tail(end, end, view.size, line[:-1]) if ours else None, view.clean and ours,
                                new_id if ours else "")
    if before is not None and ours:
        try:
            guard.write_count(st, before + 1)
        except OSError:  # a cache: the next reader rebuilds it
            pass
