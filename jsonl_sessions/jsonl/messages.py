"""The transcript operations of a store: load, change the end, replace, clear, delete
(appending is :mod:`jsonl_sessions.jsonl.append`).

Each function takes the store's :class:`~jsonl_sessions.jsonl.txn.Root` and the session's
:class:`~jsonl_sessions.jsonl.layout.SessionFiles`; the contracts (errors, atomicity, cost)
are those of the :class:`jsonl_sessions.SessionStore` methods of the same names.
Mutations are a few lines on top of :func:`jsonl_sessions.jsonl.txn.mutate`; reads go
through :mod:`jsonl_sessions.jsonl.reads` and take no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from .. import codec
from ..errors import CorruptTranscriptError, SessionNotFoundError, UnsafePathError
from ..ids import assign_ids, replacement_record
from ..types import ChatMessage
from . import reads as snapshot
from .append import encode_lines, has_id, new_meta, previous_id
from .layout import SessionFiles
from .lines import line_number_of
from .transcript import parse, parse_file, warn_bad
from .txn import Root, Tx, mutate

log = logging.getLogger("jsonl_sessions")


# -- reading --------------------------------------------------------------------------
def load(root: Root, files: SessionFiles) -> list[ChatMessage]:
    """Every message, lenient: corrupt lines and a symlinked transcript are logged, skipped."""
    try:
        parsed = snapshot.with_transcript(
            root, files, lambda fd, size: parse_file(fd, size, strict=False, key=files.key, path=files.transcript))
    except UnsafePathError as exc:
        log.warning("%s", exc)
        return []
    if parsed is None:
        return []
    warn_bad(parsed.bad, files.key, files.transcript)
    return parsed.messages


def try_load(root: Root, files: SessionFiles) -> list[ChatMessage]:
    """Every message, strict: the first corrupt line raises :class:`CorruptTranscriptError`."""
    parsed = snapshot.with_transcript(
        root, files, lambda fd, size: parse_file(fd, size, strict=True, key=files.key, path=files.transcript))
    return [] if parsed is None else parsed.messages


def get_trim_breadcrumb(root: Root, files: SessionFiles) -> bool | None:
    """The breadcrumb flag, read consistently with the transcript (a replace renames both
    with the counter odd)."""
    if not files.transcript_exists():
        return None
    meta = snapshot.consistent(root, files, lambda _head: files.read_sidecar())
    value = None if meta is None else meta.get("trim_breadcrumb")
    return value if isinstance(value, bool) else None


# -- helpers on an open transcript ------------------------------------------------------
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


# -- changing the end -------------------------------------------------------------------
def remove_last(root: Root, files: SessionFiles, expected_id: str | None) -> bool:
    """Remove the newest message (compare-and-remove with ``expected_id``)."""
    with mutate(root, files) as tx:
        if not tx.open():
            return False
        record = newest(tx)
        if record is None or (expected_id is not None and (record.get("id") or "") != expected_id):
            return False
        tx.truncate_to(tx.tail().last_start, 1)
        return True


def update_last(root: Root, files: SessionFiles, m: ChatMessage, expected_id: str | None) -> bool:
    """Replace the newest message (keeping its id and created_at unless ``m`` has its own)."""
    with mutate(root, files) as tx:
        if not tx.open():
            return False
        old = newest(tx)
        if old is None:
            return False
        if expected_id is not None and (old.get("id") or "") != expected_id:
            return False
        tail = tx.tail()
        fd = tx.fd
        record = replacement_record(files.key, m, old, root.clock, lambda: previous_id(fd, tail),
                                    lambda mid: has_id(fd, tail.last_start, mid))
        tx.rewrite_tail(tail.last_start, encode_lines(root, files.key, [record])[0])
        return True


# -- replacing everything -----------------------------------------------------------------
def rewrite(root: Root, files: SessionFiles, msgs: Sequence[ChatMessage]) -> None:
    """Replace the whole transcript (temp + rename), creating the session if needed."""
    with mutate(root, files) as tx:
        lines = encode_lines(root, files.key, assign_ids(files.key, msgs, None, root.clock()))
        if not files.transcript_exists():
            tx.create(lines, new_meta(root, files.key, None))
            return
        _check_clean(tx)
        tx.install(lines)
        tx.mark_clean()


def replace_state(root: Root, files: SessionFiles, msgs: Sequence[ChatMessage], breadcrumb: bool, *,
                  if_exists: bool) -> bool:
    """Replace transcript and breadcrumb flag as one unit; False (nothing written) when
    ``if_exists`` and the session does not exist."""
    with mutate(root, files) as tx:
        exists = files.transcript_exists()
        if if_exists and not exists:
            return False
        lines = encode_lines(root, files.key, assign_ids(files.key, msgs, None, root.clock()))
        if not exists:
            tx.create(lines, new_meta(root, files.key, bool(breadcrumb)))
            return True
        _check_clean(tx)
        meta = tx.read_sidecar()
        meta["trim_breadcrumb"] = bool(breadcrumb)
        meta["updated_at"] = root.clock()
        tx.move_together(lines, meta)
        return True


def set_trim_breadcrumb(root: Root, files: SessionFiles, present: bool) -> None:
    update_sidecar(root, files, lambda meta: meta.__setitem__("trim_breadcrumb", bool(present)))


def update_sidecar(root: Root, files: SessionFiles, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change(meta)`` to the sidecar of an existing session under its guard and
    replace the sidecar atomically. :class:`SessionNotFoundError` for a missing session;
    :class:`CorruptMetadataError` (nothing written) for an unreadable sidecar."""
    with mutate(root, files) as tx:
        if not files.transcript_exists():
            raise SessionNotFoundError(key=files.key)
        meta = tx.read_sidecar()
        change(meta)
        tx.write_sidecar(meta)


# -- clearing and deleting ----------------------------------------------------------------
def clear(root: Root, files: SessionFiles) -> int:
    """Remove every message (refusing corrupt lines); the number removed."""
    with mutate(root, files) as tx:
        if not tx.open():
            return 0
        count = len(parse(tx.read_all(), strict=True, key=files.key, path=files.transcript).messages)
        tx.truncate_to(0, count, remaining=0)
        return count


def delete(root: Root, files: SessionFiles) -> bool:
    """Delete transcript, sidecar and temp files; True if the session existed."""
    with mutate(root, files) as tx:
        existed = files.transcript_exists()
        tx.delete()
        return existed
