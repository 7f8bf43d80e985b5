"""The append path of the JSONL store: every append, one message or a batch, flush or fsync
mode, alone or under contention, ends in one function (:func:`_write`), with the session's
guard held.

That function:

- finds the transcript: the descriptor the guard kept since this process's last mutation
  (:class:`~jsonl_sessions.jsonl.guard.TranscriptView`) when one ``lstat`` of the path shows
  the same regular file (its tail too, and no tail read, when the size and the control
  file's counter are also as the view recorded); otherwise it opens the path (never
  following a symlink) and reads the tail; a missing transcript is created (temp + rename);
- assigns ids (strictly increasing after the last line's id; a caller's id is checked)
  and encodes each message (JSON, no NaN, at most ``max_message_bytes``) before a byte is
  written;
- writes every line in ONE write after the committed bytes. A torn tail is waited for
  while it grows (another process may still be writing that line), then saved to a
  quarantine file and cut, only if still exactly as saved
  (:func:`~jsonl_sessions.jsonl.torn.cut_torn`); a batch of several lines of one caller commits an
  :class:`~jsonl_sessions.jsonl.control.AppendBatch` record first (all or none after a crash);
- fsyncs in ``"fsync"`` mode, with the visible end set before the write and cleared after
  the fsync (docs/format.md), so no lock-free reader returns a line that is not durable
  yet, and none waits for it;
- rolls back on any failure of the write or the fsync: counter odd, truncate to the
  committed size, counter even, kept descriptor closed; an unacknowledged line never
  appears later (never retried: after a failed fsync the page cache cannot be trusted),
  also when that truncate fails too: a :class:`~jsonl_sessions.jsonl.control.CutBack`
  record then makes the next guard holder or reader cut the bytes first
  (:func:`~jsonl_sessions.jsonl.control.roll_back`);
- keeps the count cache and the kept view current (a failure there only drops them: the
  append stands).

Group commit (``"fsync"`` mode only, and only under contention): a thread appending one
message while another thread of this process holds or waits for the session's guard
queues it (:attr:`~jsonl_sessions.jsonl.guard.SessionGuard.pending`). One queued thread
becomes the *writer*: it takes the guard, drains the queue and hands every queued message
to :func:`_write` at once (ids in queue order; one write, one fsync; a message that fails
validation or encoding fails only its own caller; an error of the write or the fsync
fails every append it covered). The others wait on a condition variable and never touch
the guard or the file. A lone thread never queues: it takes the guard and writes.

System calls of an append to a warm session: flock, pread of the control file, lstat,
write, pwrite of the count cache, unlock (6); ``"fsync"`` mode sets the visible end (a
pwrite) before the write, and after the fsync clears the visible end and writes the count
cache in one pwrite (8). Nothing stats the file after the write: the lines end it (the
size before plus theirs). A writer that ignores the lock and appends at the same moment
changes that size, which the next append's ``lstat`` and every count compare.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Iterator, Sequence
from stat import S_ISREG
from typing import Any

from .. import _platform, codec, ids, sidecar
from ..errors import LockTimeoutError, SessionStoreError
from ..ids import assign_ids, is_ulid, next_id
from ..types import ChatMessage
from . import torn
from .control import AppendBatch, finish, roll_back
from .guard import REGISTRY, UNFINISHED, GuardBusy, GuardClosed, SessionGuard, TranscriptView
from .layout import FileState, SessionFiles
from .lines import Tail, iter_lines_backward, read_tail
from .txn import Root, Tx, enter


# -- entry points -----------------------------------------------------------------------
def append(root: Root, files: SessionFiles, message: ChatMessage) -> str:
    """Append one message (creating the session if needed); its id. Errors as
    :func:`append_many`. In ``"fsync"`` mode, when another thread of this process is
    writing the same session, the append joins a group commit (see the module
    docstring). Cost: O(1) in the transcript size."""
    guard = REGISTRY.find(files.lock) or REGISTRY.get(files.lock)
    # In fsync mode a thread never waits for the guard on its own: when another thread of
    # this process holds it (or a group is forming), the append joins the queue, whose
    # writer takes every queued message in one write and one fsync.
    group_commit = root.durable and not guard.held_here()
    while True:
        if group_commit and (guard.leading or guard.pending):
            return _queued(root, files, guard, message)
        try:  # control.enter, written out: the guard taken, then recovery if it found work left
            if guard.acquire(root.lock_timeout, files.key, not group_commit) == UNFINISHED:
                finish(guard, files)
        except GuardBusy:
            return _queued(root, files, guard, message)
        except GuardClosed:
            guard = REGISTRY.get(files.lock)
            continue
        try:
            return _write(root, files, guard, (message,), None)[0]
        finally:
            guard.release()


def append_many(root: Root, files: SessionFiles, msgs: Sequence[ChatMessage]) -> list[str]:
    """Append ``msgs`` as one locked write (all or none, also after a crash); their ids.
    Raises :class:`SerializationError` / :class:`InvalidMessageError` /
    :class:`DuplicateMessageError` / :class:`LockTimeoutError` with nothing written, and
    the ``OSError`` of a failed write or fsync with nothing left on disk."""
    if not msgs:
        return []
    if len(msgs) == 1:
        return [append(root, files, msgs[0])]
    guard = REGISTRY.get(files.lock)
    while True:
        try:
            enter(root, files, guard)
        except GuardClosed:
            guard = REGISTRY.get(files.lock)
            continue
        try:
            return _write(root, files, guard, msgs, None)
        finally:
            guard.release()


# -- group commit -------------------------------------------------------------------------
class Pending:
    """One queued append: its message, then its id or its error once written."""

    __slots__ = ("done", "error", "id", "message")

    def __init__(self, message: ChatMessage) -> None:
        self.message = message
        self.id = ""
        self.error: BaseException | None = None
        self.done = False

    def result(self) -> str:
        if self.error is not None:
            raise self.error
        return self.id


def _queued(root: Root, files: SessionFiles, guard: SessionGuard, message: ChatMessage) -> str:
    """Append ``message`` through the queue: wait for the thread writing queued appends, or
    be it. :class:`LockTimeoutError` when neither this thread nor a writer that took the
    message got the guard within the store's ``lock_timeout`` (it is then never written)."""
    wait = root.lock_timeout
    entry = Pending(message)
    while True:
        deadline = None if wait is None else time.monotonic() + wait
        if _wait_for_writer(guard, files, entry, deadline, wait):
            return entry.result()
        try:
            enter(root, files, guard, wait)
        except GuardClosed:
            _step_down(guard, entry)
            guard = REGISTRY.get(files.lock)
            continue
        except BaseException:
            _step_down(guard, entry)
            raise
        try:
            with guard.pending_cond:
                group, guard.pending = guard.pending, []
            _write(root, files, guard, [p.message for p in group], group)
        except BaseException:
            if not entry.done:
                raise
            # else this thread raises its own message's outcome, as every other member does
        finally:
            guard.release()
            _step_down(guard, entry)
        return entry.result()


def _step_down(guard: SessionGuard, entry: Pending) -> None:
    """The writer is done (or never got the guard): ``entry`` off the queue if it was not
    written, and the next queued thread may lead."""
    with guard.pending_cond:
        if not entry.done and entry in guard.pending:
            guard.pending.remove(entry)
        guard.leading = False
        guard.pending_cond.notify_all()


def _wait_for_writer(guard: SessionGuard, files: SessionFiles, entry: Pending, deadline: float | None,
                     wait: float | None) -> bool:
    """Queue ``entry`` and wait while another thread writes queued appends: True once a
    writer wrote it (or failed it); False when this thread is to write (it is then the
    writer: :attr:`SessionGuard.leading` is set). :class:`LockTimeoutError` at
    ``deadline`` if no writer took it (it is taken off the queue)."""
    cond = guard.pending_cond
    with cond:
        if entry not in guard.pending:
            guard.pending.append(entry)
        while guard.leading and not entry.done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if entry in guard.pending:
                    guard.pending.remove(entry)
                    raise LockTimeoutError(key=files.key, path=files.lock, timeout=wait, holder_pid=os.getpid())
                deadline = None  # a writer has it: its outcome comes soon
                continue
            cond.wait(left)
        if entry.done:
            return True
        guard.leading = True
        return False


# -- the write --------------------------------------------------------------------------
# One function body for the usual append (a kept, unchanged transcript; one message without
# an id; flush mode): the checks, the id, the line, the write and the bookkeeping are
# written out in it rather than spread over helpers, since every call and attribute lookup
# on this path is paid by every append. The rare cases branch out of it: no kept view or a
# changed file (_open_cold), a torn tail (torn.settle / torn.cut_torn), several messages or
# a group (_encode), a caller's id or a last line without a ULID (_encode), a batch or
# fsync mode (_mark, _show), a failure (roll_back), a foreign writer.
def _write(root: Root, files: SessionFiles, guard: SessionGuard, msgs: Sequence[ChatMessage],
           group: list[Pending] | None) -> list[str]:
    """Append ``msgs`` to the session whose guard this thread holds (recovery done); their
    ids. ``group``: the queued appends ``msgs`` come from (one each): every member ends
    done, with its id or its own error; ``None``: one caller's messages, all or none, an
    error raised.

    The write: ``data`` (the lines of the new ids) after the committed bytes of the
    transcript, in one write (and one fsync when durable); rolled back on error (and the
    descriptor closed: :func:`~jsonl_sessions.jsonl.control.roll_back`), so none of the
    lines appears later. A torn tail is cut first. A batch (several lines of one caller)
    commits an :class:`AppendBatch` record first; lines of separate appends (a group) do
    not: a crash may keep a prefix of them, none acknowledged yet.

    Durable mode: the counter is odd throughout for a batch, else the visible end hides the
    new bytes from lock-free readers (one ``pwrite`` before the write, one after the fsync,
    which also writes the count cache, so that after the fsync only that ``pwrite`` and the
    unlock remain). If clearing it fails, the lines are cut as after a failed fsync
    (a reader may not see them until the next guard holder clears it, and the append is not
    acknowledged). Failing to finish the bookkeeping after a successful write (the counter
    made even again, the record cleared) does not fail the append: the next guard holder
    completes it.

    Then the transcript stays open as the guard's view (with its tail and last id) and the
    count cache is kept current. The append stands whatever fails there: the view or the
    cache is then dropped, rebuilt later."""
    view = guard.view
    st: os.stat_result | None = None
    if view is not None:  # the warm precondition: the kept descriptor still names the path's file
        try:
            st = _platform.lstat(files.transcript)
        except FileNotFoundError:
            guard.drop_view()
            return _create(root, files, guard, msgs, group)
        except BaseException:
            guard.drop_view()
            raise
    # TranscriptView.unchanged (same size, counter, inode, device), written out: the kept
    # tail and last id are current, nothing is read.
    if (view is not None and st is not None and st.st_size == view.size and guard.seq == view.seq
            and st.st_ino == view.ino and st.st_dev == view.dev and S_ISREG(st.st_mode)):
        fd, tail, clean, last = view.fd, view.tail, view.clean, view.last_id
    else:
        opened = _open_cold(files, guard, view, st)
        if opened is None:
            return _create(root, files, guard, msgs, group)
        view, fd, st, tail, clean, last = opened
    key = files.key
    try:
        if tail is None:
            tail = read_tail(fd, st.st_size)
        while True:
            # Tail's fields unpacked at once (each attribute of a named tuple is a descriptor call).
            t_size, committed, _start, last_line = tail
            if committed != t_size:  # a crash's leftover, or a line another process is still writing
                tail, settled = torn.settle(root, files, fd, tail)
                if settled is not None:
                    st, last, clean = settled, "", False
                t_size, committed, _start, last_line = tail
            if group is None and len(msgs) == 1 and not (fields := msgs[0]._data).get("id"):  # no id to check
                now = root.clock()
                new_id = next_id(last or (codec.prefix_id(last_line) if last_line is not None else None)
                                 or last_id(fd, tail), now)
                if new_id is None:  # the last id is not a ULID (an earlier version's): after the newest ULID
                    new_id = _after_newest_ulid(key, fd, tail, msgs, now)
                created = fields.get("created_at")
                data = codec.encode_line(msgs[0], new_id, now if created is None else created, key,
                                         root.max_message_bytes)
                new_ids = [new_id]
            else:
                new_ids, data = _encode(root, key, fd, tail, last, msgs, group)
            if not data or committed == t_size:
                break
            cut_tail, st = torn.cut_torn(root, files, guard, fd, tail)
            if cut_tail.committed == tail.committed:
                tail = cut_tail
                break
            # Lines another process completed meanwhile precede this append: ids again after them.
            tail, last, clean = cut_tail, "", False
    except BaseException as exc:
        _drop(guard, view, fd)
        _fail(group, exc)
        raise
    if not data:  # every queued message failed its own caller
        _drop(guard, view, fd)
        return []
    committed = tail.committed
    end = committed + len(data)
    lines = len(new_ids)
    seq = guard.seq
    cache = guard.count
    before = None  # the lines counted before this append, when the count cache holds them
    ino = st.st_ino
    if cache is not None:  # CountCache.matches, written out
        c_ino, c_size, c_lines, c_seq = cache
        if c_size == st.st_size and c_ino == ino and c_seq == seq:
            before = c_lines
    guard.changes += 1  # the file may change from here on: a Tx open around this call reads it again
    durable = root.durable
    batch = lines > 1 and group is None
    in_place = hide = counted = False  # counted: clearing the visible end wrote the count cache too
    try:
        if durable or batch:
            in_place, hide = _mark(guard, committed, end, durable, batch)
        # The tail the lines leave, made before the write: after a durable append's fsync
        # only the control file's write and the unlock remain. Tail(...) without its __new__.
        if lines == 1:
            written = _new_tuple(Tail, (end, end, committed, data[:-1]))
        else:
            nl = data.rfind(b"\n", 0, len(data) - 1)
            written = _new_tuple(Tail, (end, end, committed + nl + 1, data[nl + 1 : -1]))
        try:
            _platform.write(fd, data)
            if durable:
                _platform.fsync(fd)
                if hide:
                    counted = _show(guard, ino, end, before, lines)
        except BaseException:
            in_place = True
            outcome = roll_back(guard, files, fd, committed)  # even if the counter could not be marked
            if outcome == "cut" and hide and guard.hidden is not None:  # nothing left to hide
                with contextlib.suppress(OSError):
                    guard.show_all()
            batch = batch and outcome == "cut"  # else its record gave way to the cut's, or must stay
            _drop(guard, view, fd)
            raise
        finally:
            if in_place:
                try:
                    guard.end_in_place()
                    if batch:
                        guard.clear_record(durable)
                except OSError:
                    pass
    except BaseException as exc:
        _fail(group, exc)
        raise
    # The file is taken to end where the lines do; should a writer ignoring the lock have
    # appended too, the size the next append's lstat sees differs from the view's and the
    # count cache's, so that append reads the tail again and readers count again.
    last = new_ids[-1]
    if view is not None:  # the same descriptor, already counted: moved forward in place
        view.size, view.seq = end, guard.seq
        view.tail, view.clean, view.last_id = written, clean, last
        guard.view = view
    else:
        guard.keep_view(TranscriptView(fd, st.st_dev, ino, end, guard.seq, written, clean, last), counted=False)
    if before is not None and not counted:
        try:
            guard.write_count(ino, end, before + lines)
        except OSError:  # a cache: the next reader rebuilds it
            pass
    if group is not None:
        _done(group)
    return new_ids


def _open_cold(files: SessionFiles, guard: SessionGuard, view: TranscriptView | None, st: os.stat_result | None
               ) -> tuple[TranscriptView | None, int, os.stat_result, Tail | None, bool, str] | None:
    """The transcript to append to when the kept view is missing or out of date (``st``:
    the ``lstat`` of its path when there is a view): the kept descriptor when the path
    still names its file (its tail read again), else the path opened afresh (the view
    dropped). ``(view, fd, st, tail or None, clean, last id or "")``; None when there is no
    transcript (create it)."""
    if view is not None and st is not None:
        if S_ISREG(st.st_mode) and view.same_file(st):
            return view, view.fd, st, None, False, ""
        guard.drop_view()
    opened = files.open_transcript_for_write()
    if opened is None:
        return None
    fd, st = opened
    return None, fd, st, None, guard.clean_mark == (FileState.of(st), guard.seq), ""


def _after_newest_ulid(key: str, fd: int, tail: Tail, msgs: Sequence[ChatMessage], now: int) -> str:
    """The id of one new message when the last line's id is not a ULID: after the newest
    ULID of the transcript. Raises the error of "no id fits"."""
    previous = newest_ulid(fd, tail)
    new_id = next_id(previous, now)
    if new_id is None:
        assign_ids(key, msgs, previous, now)  # raises the error of "no id fits"
        raise AssertionError("unreachable")
    return new_id


def _encode(root: Root, key: str, fd: int, tail: Tail, last: str, msgs: Sequence[ChatMessage],
            group: list[Pending] | None) -> tuple[list[str], bytes]:
    """The ids and bytes of ``msgs`` appended after ``tail`` of the transcript open as ``fd``
    (``last``: the last line's id when known, else ""), when they are not one message
    without an id (which :func:`_write` encodes itself): a batch, a caller's id, or a
    group. Raises the error of a message that cannot be written (with ``group``: that
    member fails alone)."""
    now = root.clock()
    if group is None:
        records = assign_ids(key, msgs, last or newest_ulid(fd, tail), now, lambda mid: has_id(fd, tail.size, mid))
        return [r["id"] for r in records], b"".join(encode_lines(root, key, records))
    lines = _encode_group(root, key, group, last or newest_ulid(fd, tail), now,
                          lambda mid: has_id(fd, tail.size, mid))
    return [p.id for p in group if p.error is None], b"".join(lines)


def _mark(guard: SessionGuard, committed: int, end: int, durable: bool, batch: bool) -> tuple[bool, bool]:
    """Before the write of a batch or of a durable append: a batch commits its
    :class:`AppendBatch` record and makes the counter odd (``in_place``); a durable append
    of separate lines hides the bytes from ``committed`` on from lock-free readers
    (``hide``). ``(in_place, hide)``."""
    if batch:
        guard.write_record(AppendBatch(committed, end), durable)
        guard.begin_in_place()
        return True, False
    guard.hide_from(committed)
    return False, True


def _show(guard: SessionGuard, ino: int, end: int, before: int | None, lines: int) -> bool:
    """After a durable append's fsync: readers may use the whole transcript again, in one
    ``pwrite`` with the count cache (the transcript, inode ``ino``, ``end`` bytes long)
    when the count is known (True); otherwise the count is left for later (False)."""
    if before is not None:
        guard.show_all(ino, end, before + lines)
        return True
    guard.show_all()  # no count known: count later
    return False


_new_tuple = tuple.__new__


def _drop(guard: SessionGuard, view: TranscriptView | None, fd: int) -> None:
    """Nothing was written (an error, or nothing to write): close the transcript (the kept
    view it came from, or the descriptor opened here)."""
    if view is not None:
        guard.drop_view()
    else:
        guard.close_taken(fd, counted=False)


def _done(group: list[Pending] | None) -> None:
    """Every member of ``group`` (None: no group) is written: its id stands."""
    for p in group or ():
        p.done = True


def _fail(group: list[Pending] | None, exc: BaseException) -> None:
    """Every member of ``group`` (None: no group) not done yet fails with ``exc`` (the
    first one) or a copy of it (the others), so that no two threads raise the same
    exception object."""
    first = True
    for p in group or ():
        if not p.done:
            p.error = exc if first else copy.copy(exc)
            p.done, first = True, False


def _encode_group(root: Root, key: str, group: list[Pending], previous: str | None, now: int,
                  exists: Any) -> list[bytes]:
    """The lines of ``group``'s messages, ids assigned in queue order; a member that fails
    validation or encoding gets its error (and is done) without a line."""
    written: set[str] = set()
    lines: list[bytes] = []
    for p in group:
        try:
            records = assign_ids(key, [p.message], previous, now, lambda mid: mid in written or exists(mid))
            line = encode_lines(root, key, records)[0]
        except (SessionStoreError, ValueError, TypeError) as exc:
            p.error, p.done = exc, True
            continue
        previous = p.id = records[0]["id"]
        written.add(previous)
        lines.append(line)
    return lines


def _create(root: Root, files: SessionFiles, guard: SessionGuard, msgs: Sequence[ChatMessage],
            group: list[Pending] | None) -> list[str]:
    """Create the session with ``msgs`` as its transcript (temp + rename: all or none)."""
    now = root.clock()
    try:
        if group is None:
            records = assign_ids(files.key, msgs, None, now)
            lines = encode_lines(root, files.key, records)
            new_ids = [r["id"] for r in records]
        else:
            lines = _encode_group(root, files.key, group, None, now, lambda _mid: False)
            new_ids = [p.id for p in group if p.error is None]
            if not lines:
                return []
        tx = Tx(root, files, guard)
        try:
            tx.create(lines, new_meta(root, files.key, None))
        except BaseException:
            tx.forget()
            raise
    except BaseException as exc:
        _fail(group, exc)
        raise
    _done(group)
    return new_ids


def new_meta(root: Root, key: str, breadcrumb: bool | None) -> dict[str, Any]:
    """The sidecar of a session created now."""
    meta = sidecar.new_sidecar(key, root.clock())
    meta["trim_breadcrumb"] = breadcrumb
    return meta


# -- ids and lines of an open transcript ------------------------------------------------
def encode_lines(root: Root, key: str, records: list[dict[str, Any]]) -> list[bytes]:
    """The lines of ``records``: :class:`SerializationError`, or :class:`InvalidMessageError`
    for one over ``max_message_bytes``."""
    return codec.encode_records(records, key, root.max_message_bytes)


def _ids_backward(fd: int, size: int, skip: int = 0) -> Iterator[str]:
    """The readable ids of the lines before ``size``, newest first (corrupt lines stepped over)."""
    lines = iter_lines_backward(fd, size)
    for _ in range(skip):
        next(lines, None)
    for _start, line, _committed in lines:
        try:
            yield codec.id_of_line(line)
        except ValueError:
            continue


def last_id(fd: int, tail: Tail) -> str | None:
    """The id of the newest parseable line (normally the last one, already read: O(1))."""
    if tail.last_line is not None:
        try:
            return codec.id_of_line(tail.last_line) or None
        except ValueError:
            pass
    return next(_ids_backward(fd, tail.size), "") or None


def newest_ulid(fd: int, tail: Tail) -> str | None:
    """The newest ULID of the transcript (:func:`jsonl_sessions.ids.newest_ulid`): the last
    line's id, normally (O(1)); lines whose id is not a ULID are passed over."""
    if tail.last_line is not None:
        try:
            found = codec.id_of_line(tail.last_line)
        except ValueError:
            found = ""
        if is_ulid(found):
            return found
    return ids.newest_ulid(_ids_backward(fd, tail.size))


def previous_id(fd: int, tail: Tail) -> str | None:
    """The newest ULID before the last line (lines whose id is not a ULID passed over)."""
    return ids.newest_ulid(_ids_backward(fd, tail.size, skip=1))


def has_id(fd: int, size: int, message_id: str) -> bool:
    """Whether ``message_id`` (a ULID) is in the first ``size`` bytes (the backward scan
    stops at the first smaller ULID: they increase)."""
    for found in _ids_backward(fd, size):
        if found == message_id:
            return True
        if found < message_id and is_ulid(found):
            return False
    return False


__all__ = ["Pending", "append", "append_many", "encode_lines", "has_id", "last_id", "new_meta", "newest_ulid",
           "previous_id"]
