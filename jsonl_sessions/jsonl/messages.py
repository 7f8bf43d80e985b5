"""Appending a batch of messages, and the id lookups on an open transcript that appends
and the end-changing operations of :class:`~jsonl_sessions.jsonl.session.Session` share.

Each function takes the store's :class:`~jsonl_sessions.jsonl.txn.Root` and the session's
:class:`~jsonl_sessions.jsonl.layout.SessionFiles`, or an open :class:`~jsonl_sessions.jsonl.txn.Tx`;
the contracts are those of the :class:`jsonl_sessions.SessionStore` methods.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from .. import codec
from ..errors import CorruptTranscriptError
from ..ids import assign_ids
from ..types import ChatMessage
from . import sidecar
from .layout import SessionFiles
from .lines import Tail, iter_lines_backward, line_number_of
from .transcript import parse
from .txn import Root, Tx, mutate

log = logging.getLogger("jsonl_sessions")


# -- helpers on an open transcript ------------------------------------------------------
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


def previous_id(fd: int, tail: Tail) -> str | None:
    """The id of the newest parseable line before the last one."""
    return next(_ids_backward(fd, tail.size, skip=1), "") or None


def has_id(fd: int, size: int, message_id: str) -> bool:
    """Whether ``message_id`` is in the first ``size`` bytes (the backward scan stops at the
    first smaller id: ids increase)."""
    for found in _ids_backward(fd, size):
        if found == message_id:
            return True
        if found < message_id:
            return False
    return False


def newest(tx: Tx) -> dict[str, Any] | None:
    """The newest message's record of the open transcript; None when it has no complete
    line. A corrupt newest line raises :class:`CorruptTranscriptError` (its line number
    counted: O(n) then, O(1) otherwise)."""
    tail = tx.tail()
    if tail.last_line is None:
        return None
    try:
        return codec.decode_record(tail.last_line)
    except ValueError as exc:
        raise CorruptTranscriptError(key=tx.files.key, path=tx.files.transcript, offset=tail.last_start,
                                     line=line_number_of(tx.fd, tail.last_start), reason=str(exc)) from None


def _check_clean(tx: Tx) -> None:
    """Refuse (CorruptTranscriptError) to replace a transcript holding bytes that do not
    parse: they would be destroyed. O(transcript), or O(1) when the transcript is known
    to be clean (written or checked by this process, unchanged since: :attr:`Tx.clean`)."""
    if tx.open() and not tx.clean:
        data = tx.read_all()
        if data:
            parse(data, strict=True, key=tx.files.key, path=tx.files.transcript)
        tx.clean = True


def _encode(root: Root, key: str, records: list[dict[str, Any]]) -> list[bytes]:
    return codec.encode_records(records, key, root.max_message_bytes)


# -- appending ------------------------------------------------------------------------
def append_many(root: Root, files: SessionFiles, msgs: Sequence[ChatMessage]) -> list[str]:
    """Append ``msgs`` as one locked write (all or none); their ids."""
    if not msgs:
        return []
    with mutate(root, files) as tx:
        if not tx.open():
            records = assign_ids(files.key, msgs, None, root.clock())
            tx.create(_encode(root, files.key, records), _new_meta(root, files.key, None))
            return [r["id"] for r in records]
        tail = tx.tail()
        fd = tx.fd
        records = assign_ids(files.key, msgs, last_id(fd, tail), root.clock(),
                             lambda mid: has_id(fd, tail.size, mid))
        lines = _encode(root, files.key, records)
        tx.append(lines[0] if len(lines) == 1 else b"".join(lines), len(lines))
        return [r["id"] for r in records]


def _new_meta(root: Root, key: str, breadcrumb: bool | None) -> dict[str, Any]:
    meta = sidecar.new_sidecar(key, root.clock())
    meta["trim_breadcrumb"] = breadcrumb
    return meta
