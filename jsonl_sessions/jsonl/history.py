"""Message history by id and position: count, one message, windows, fork and revert.

The contracts are those of the :class:`jsonl_sessions.SessionStore` methods of the same
names. What makes them cheap is the format: ids strictly increase down the transcript
and every line starts with its id, so a message is found by binary search over byte
offsets (:func:`jsonl_sessions.jsonl.lines.find_line`), and a window near the end skips lines
by counting newlines backwards. No index file exists to go stale. Reads take no lock
(:mod:`jsonl_sessions.jsonl.reads`); fork and revert run under the guard
(:func:`jsonl_sessions.jsonl.txn.mutate`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from .. import _platform, codec
from ..arguments import check_window
from ..errors import CorruptTranscriptError, MessageNotFoundError, SessionExistsError, SessionNotFoundError
from ..types import ChatMessage
from . import reads as snapshot
from . import sidecar
from .append import last_id
from .layout import SessionFiles
from .lines import BOM, copy_chunks, find_line, line_number_of, read_tail, skip_backward, skip_forward
from .transcript import BadLine, parse, warn_bad
from .txn import Root, Tx, mutate

#: How often a window read retries when the file keeps changing under it before it
#: counts forwards (which needs no count).
_WINDOW_ATTEMPTS = 5


def get_message_count(root: Root, files: SessionFiles) -> int:
    """Complete lines (SessionNotFoundError for a missing session). O(1) with the count cache."""
    count = snapshot.count(root, files)
    if count is None:
        raise SessionNotFoundError(key=files.key)
    return count


def get_message(root: Root, files: SessionFiles, message_id: str) -> ChatMessage | None:
    """The message with ``message_id`` (None when absent or its line is corrupt: logged)."""
    bad: list[BadLine] = []

    def read(fd: int, size: int) -> ChatMessage | None:
        bad.clear()
        found = find_line(fd, size, message_id)
        if found is None:
            return None
        start, _end, line = found
        try:
            return codec.decode_message(line)
        except ValueError as exc:
            bad.append(BadLine(line_number_of(fd, start), start, str(exc) or type(exc).__name__))
            return None

    message = snapshot.with_transcript(root, files, read)
    warn_bad(bad, files.key, files.transcript)
    return message


def get_messages(root: Root, files: SessionFiles, limit: int | None, offset: int) -> list[ChatMessage]:
    """The messages at positions ``[offset, offset + limit)``."""
    check_window(limit, offset)
    bad: list[BadLine] = []
    attempts = [0]

    def read(fd: int, size: int) -> list[ChatMessage] | None:
        bad.clear()
        if limit == 0:
            return []
        # Counted inside the read, so the counter check around it covers the count too.
        counted = snapshot.count_with_size(root, files)
        count = None if counted is None else counted[0]
        if counted is None or not _count_matches(files, fd, size, counted[1]):
            attempts[0] += 1
            if attempts[0] < _WINDOW_ATTEMPTS:
                return None  # appended or replaced since the descriptor was opened: again
            count = None  # still moving: go forwards, which needs no count
        return _window(files, fd, size, count, offset, limit, bad)

    while True:
        got = snapshot.with_transcript(root, files, read)
        if got is not None:
            warn_bad(bad, files.key, files.transcript)
            return got
        if not files.transcript_exists():
            raise SessionNotFoundError(key=files.key)


def _window(files: SessionFiles, fd: int, size: int, count: int | None, offset: int, limit: int | None,
            bad: list[BadLine]) -> list[ChatMessage]:
    """The window read from the end (the newer half, when the count is known) or the start."""
    stop = None if limit is None else offset + limit
    if count is not None:
        if offset >= count:
            return []
        stop = count if stop is None else min(stop, count)
        if count - offset < offset:  # the newer half: count lines backwards from the end
            end = skip_backward(fd, read_tail(fd, size).committed, count - stop)
            return _parse_range(files, fd, skip_backward(fd, end, stop - offset), end, offset, bad)
    begin = skip_forward(fd, 0, size, offset)
    end = read_tail(fd, size).committed if stop is None else skip_forward(fd, begin, size, stop - offset)
    return _parse_range(files, fd, begin, end, offset, bad)


def _count_matches(files: SessionFiles, fd: int, size: int, counted_size: int) -> bool:
    """Whether a count just taken (of the first ``counted_size`` bytes) describes the file
    open as ``fd`` as read at ``size`` bytes (the visible part: a durable append in flight
    is not read): the same size, still the same file (no rename; an in-place change moves
    the sequence counter, which the snapshot checks)."""
    st = _platform.fstat(fd)
    try:
        return counted_size == size and _platform.lstat(files.transcript).st_ino == st.st_ino
    except OSError:
        return False


def _parse_range(files: SessionFiles, fd: int, begin: int, end: int, first_line: int,
                 bad: list[BadLine]) -> list[ChatMessage]:
    """Parse the whole lines in bytes ``[begin, end)`` (line ``first_line``, 0-based, starts
    at ``begin``); corrupt lines are skipped and listed in ``bad``."""
    if end <= begin:
        return []
    data = _platform.pread(fd, end - begin, begin)
    skip = 0
    if begin > 0 and data.startswith(BOM):  # not a BOM at the file start: a corrupt line
        skip = data.index(b"\n") + 1
        bad.append(BadLine(first_line + 1, begin, "a byte-order mark inside the file"))
    parsed = parse(data[skip:] if skip else data, strict=False, key=files.key, path=files.transcript)
    lines_before = 1 if skip else 0
    for b in parsed.bad:
        bad.append(BadLine(first_line + lines_before + b.line, begin + skip + b.offset, b.reason))
    return parsed.messages


# -- fork and revert ----------------------------------------------------------------------
def copy_messages(root: Root, source: SessionFiles, target: SessionFiles, up_to: str | None) -> str | None:
    """Fork ``source`` into the new session ``target`` (both guards, in lock-path order)."""
    with contextlib.ExitStack() as held:
        txs: dict[str, Tx] = {}
        for one in sorted({source.lock: source, target.lock: target}.values(), key=lambda x: x.lock):
            txs[one.lock] = held.enter_context(mutate(root, one))
        src = txs[source.lock]
        if not src.open():
            raise SessionNotFoundError(key=source.key)
        if target.transcript_exists():
            raise SessionExistsError(key=target.key)
        tail = src.tail()
        if up_to is None:
            end, fork_point = tail.committed, last_id(src.fd, tail)
        else:
            end, fork_point = find_valid(src, tail.committed, up_to)[1], up_to
        txs[target.lock].create(copy_chunks(src.fd, end), _fork_meta(root, source, target, fork_point))
    return fork_point


def _fork_meta(root: Root, source: SessionFiles, target: SessionFiles, fork_point: str | None) -> dict[str, Any]:
    """The target's sidecar: parent, fork point, and the source's breadcrumb flag."""
    meta = sidecar.new_sidecar(target.key, root.clock())
    source_meta = source.read_sidecar()
    meta["trim_breadcrumb"] = source_meta.get("trim_breadcrumb") if source_meta else None
    meta["parent"] = source.key
    meta["fork_point"] = fork_point
    return meta


def find_valid(tx: Tx, size: int, message_id: str) -> tuple[int, int, bytes]:
    """The line of ``message_id`` for a mutation: MessageNotFoundError when absent,
    CorruptTranscriptError when its line does not parse."""
    found = find_line(tx.fd, size, message_id)
    if found is None:
        raise MessageNotFoundError(key=tx.files.key, message_id=message_id)
    try:
        codec.decode_record(found[2])
    except ValueError as exc:
        raise CorruptTranscriptError(key=tx.files.key, path=tx.files.transcript, offset=found[0],
                                     line=line_number_of(tx.fd, found[0]), reason=str(exc)) from None
    return found


def truncate_messages(root: Root, files: SessionFiles, up_to: str) -> int:
    """Revert to ``up_to``: the number of messages removed (strictly parsed first)."""
    with mutate(root, files) as tx:
        if not tx.open():
            raise SessionNotFoundError(key=files.key)
        tail = tx.tail()
        end = find_valid(tx, tail.committed, up_to)[1]
        count = _count_removed(tx, end, _platform.pread(tx.fd, tail.committed - end, end))
        if count == 0 and not tail.torn:
            return 0
        tx.truncate_to(end, count)
        return count


def _count_removed(tx: Tx, at: int, removed: bytes) -> int:
    """How many messages ``removed`` (the bytes from offset ``at``) holds; raises
    CorruptTranscriptError (absolute line and offset) if one does not parse."""
    files = tx.files
    if not removed:
        return 0
    if removed.startswith(BOM):  # a BOM is only skipped at the file start
        raise CorruptTranscriptError(key=files.key, path=files.transcript, line=line_number_of(tx.fd, at),
                                     offset=at, reason="a byte-order mark inside the file")
    try:
        return len(parse(removed, strict=True, key=files.key, path=files.transcript).messages)
    except CorruptTranscriptError as exc:
        line = line_number_of(tx.fd, at) + (exc.line or 1) - 1
        raise CorruptTranscriptError(key=files.key, path=files.transcript, line=line, offset=at + (exc.offset or 0),
                                     reason=exc.reason) from None
