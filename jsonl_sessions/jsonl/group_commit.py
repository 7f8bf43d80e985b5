"""Group commit: threads of one process appending to one session share a write and an fsync.

A thread appending one message queues it on the session's guard
(:attr:`~jsonl_sessions.jsonl.guard.SessionGuard.pending`). If no thread of the process is
writing queued appends, it becomes the *writer*: it takes the guard, drains the queue,
gives every queued message its id in queue order, encodes each (a message that fails
validation or encoding fails only its own caller), writes all their lines in ONE write,
fsyncs once (``"fsync"`` mode) and only then acknowledges each (a condition variable
wakes the waiting threads). Otherwise it waits for the writer: a thread whose message a
writer took never touches the guard or the file; one whose message was queued too late
for that writer's group becomes the next writer. Cost per group: one lock, one write, one
fsync, whatever the group's size.

Guarantees, as for a lone append: no message is acknowledged before its bytes are on
stable storage (``"fsync"``); an error of the write or of the fsync fails EVERY append
it covered, and the transcript is truncated back to its committed size before the guard
is released (never retried: after a failed fsync the page cache cannot be trusted), so
none of them appears later. A crash before the acknowledgement may keep a prefix of the
group's lines (each a whole line: none of them was acknowledged). Appends of other
processes still serialise through the file lock. A thread already holding the guard (a
``store.lock(key)`` block) writes only its own message, so nothing of another thread
lands inside its block.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Literal

from .. import codec
from ..errors import LockTimeoutError, SessionStoreError
from ..ids import assign_ids
from ..types import ChatMessage
from .guard import REGISTRY, GuardClosed, SessionGuard
from .layout import SessionFiles
from .messages import append_many, has_id, last_id
from .txn import DEFAULT, Root, Tx, enter


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


def append(root: Root, files: SessionFiles, message: ChatMessage,
           timeout: float | None | Literal[False] = DEFAULT) -> str:
    """Append one message, sharing the write and the fsync with other threads' appends to
    the same session (see the module docstring); its id. Errors as ``append_many``;
    :class:`LockTimeoutError` when neither this thread nor a writer that took its
    message got the guard within ``timeout`` (the message is then never written)."""
    wait = root.lock_timeout if timeout is False else timeout
    entry = Pending(message)
    while True:
        guard = REGISTRY.get(files.lock)
        if guard.held_here():  # inside this thread's lock block: only its own message
            return append_many(root, files, [message])[0]
        deadline = None if wait is None else time.monotonic() + wait
        if _wait_for_writer(guard, files, entry, deadline, wait):
            return entry.result()
        try:
            return _lead(root, files, guard, entry, wait)
        except GuardClosed:
            continue
        finally:
            with guard.pending_cond:
                if not entry.done and entry in guard.pending:  # never written: off the queue
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


def _lead(root: Root, files: SessionFiles, guard: SessionGuard, entry: Pending, timeout: float | None) -> str:
    """As the writer: take the guard (waiting up to ``timeout`` for it), write every queued
    append (``entry`` among them)."""
    enter(root, files, guard, timeout)
    try:
        with guard.pending_cond:
            group, guard.pending = guard.pending, []
        _write(root, files, guard, group, entry)
    finally:
        guard.release()
    return entry.result()


def _write(root: Root, files: SessionFiles, guard: SessionGuard, group: list[Pending], entry: Pending) -> None:
    """Write ``group`` (``entry``, this thread's, is among them); every member ends done."""
    tx = Tx(root, files, guard)
    try:
        if not tx.open():  # a new session: created by this append alone; the others queue again
            others = [p for p in group if p is not entry]
            with guard.pending_cond:
                guard.pending[:0] = others
            group = [entry]
            entry.id = append_many(root, files, [entry.message])[0]
            entry.done = True
            return
        lines = _encode(root, files, tx, group)
        if len(lines) == 1:
            tx.append(lines[0], 1)
        elif lines:
            tx.append(b"".join(lines), len(lines), atomic=False)
    except BaseException as exc:
        tx.forget()
        for p in group:
            if not p.done:
                p.error = exc if p is entry else copy.copy(exc)
                p.done = True
        raise
    tx.close()
    for p in group:
        p.done = True


def _encode(root: Root, files: SessionFiles, tx: Tx, group: list[Pending]) -> list[bytes]:
    """The lines of ``group``'s messages, ids assigned in queue order; a member that fails
    validation or encoding gets its error (and is done) without a line."""
    tail = tx.tail()
    fd = tx.fd
    previous = last_id(fd, tail)
    now = root.clock()
    written: set[str] = set()
    lines: list[bytes] = []
    for p in group:
        try:
            records = assign_ids(files.key, [p.message], previous, now,
                                 lambda mid: mid in written or has_id(fd, tail.size, mid))
            line = codec.encode_records(records, files.key, root.max_message_bytes)[0]
        except (SessionStoreError, ValueError, TypeError) as exc:
            p.error, p.done = exc, True
            continue
        previous = p.id = records[0]["id"]
        written.add(previous)
        lines.append(line)
    return lines


__all__ = ["Pending", "append"]
