"""Transcript lines <-> message dicts (orjson).

A line is one JSON object followed by ``\\n``, the id first (docs/format.md, "Transcript
lines", gives the field order and why). Only JSON values are accepted: ``datetime`` and
dataclass instances are refused (orjson would silently turn them into strings /
objects), as are NaN and the infinities (orjson would write ``null``), integers beyond
64 bits, and non-string keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

import orjson

from .errors import InvalidMessageError, SerializationError
from .types import RESERVED_FIELDS, ChatMessage, from_record, has_non_finite_float

_DUMPS_OPTIONS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_dumps = orjson.dumps
loads = orjson.loads
JSONDecodeError = orjson.JSONDecodeError
_RESERVED = frozenset(RESERVED_FIELDS)


def record_of(message: ChatMessage, message_id: str, created_at: int) -> dict[str, Any]:
    """The dict written for ``message`` with its assigned id and time, fields in line order.
    When the message's own dict already is that record (the same id, time and kind, the
    fields in line order: a message read from a transcript, or built by :class:`ChatMessage`
    with an id and a time), it is returned as it is, not copied: a record is only ever
    encoded, never changed."""
    data = message._data
    if tuple(data)[:5] == RESERVED_FIELDS and data["kind"]:  # every field there, in line order
        if data["id"] == message_id and data["created_at"] == created_at:
            return data
        record = data.copy()  # the extras come along in C
        record["id"], record["created_at"] = message_id, created_at
        return record
    record = {
        "id": message_id,
        "created_at": created_at,
        "role": data["role"],
        "kind": data.get("kind") or "message",
        "content": data.get("content"),
    }
    if len(data) > 5 or not _RESERVED.issuperset(data):  # extras (also when a field is absent)
        for k, v in data.items():
            if k not in record:
                record[k] = v
    return record


def encode_record(record: dict[str, Any], key: str | None = None) -> bytes:
    """One transcript line (with its newline). Raises :class:`SerializationError`.
    :func:`encode_records` and :func:`encode_line` make the same checks written out (they
    run for every message of a rewrite, and for every append): a change here is a change
    there."""
    try:
        line = _dumps(record, option=_DUMPS_OPTIONS)
    except TypeError as exc:
        raise SerializationError(key=key, reason=str(exc)) from None
    if _has_null(line) and has_non_finite_float(record):
        raise SerializationError(key=key, reason="NaN and infinities are not JSON numbers")
    return line


def encode_line(message: ChatMessage, message_id: str, created_at: int, key: str, limit: int) -> bytes:
    """The line of ``message`` appended with its new id and time: :func:`record_of` then
    :func:`encode_record`. Raises :class:`SerializationError`, or
    :class:`InvalidMessageError` when the line is over ``limit`` bytes. The append path's
    encoding: :func:`record_of`'s usual case (every field there, in line order: a message
    built from a dict or by :class:`ChatMessage`, whose id is still "") is written out."""
    data = message._data
    if tuple(data)[:5] == RESERVED_FIELDS and data["kind"] and data["id"] != message_id:
        record = data.copy()  # the extras come along in C
        record["id"], record["created_at"] = message_id, created_at
    else:
        record = record_of(message, message_id, created_at)
    # encode_record, written out (the append path's one encoding).
    try:
        line = _dumps(record, option=_DUMPS_OPTIONS)
    except TypeError as exc:
        raise SerializationError(key=key, reason=str(exc)) from None
    if _has_null(line) and has_non_finite_float(record):
        raise SerializationError(key=key, reason="NaN and infinities are not JSON numbers")
    if len(line) > limit:
        raise InvalidMessageError(key=key, message_id=message_id,
                                  reason=f"message is {len(line)} bytes, over max_message_bytes={limit}")
    return line


#: The typed fields of a record: (name, type, required, may be null). A field that is not
#: required may be absent.
FIELDS: tuple[tuple[str, type, bool, bool], ...] = (
    ("role", str, True, False), ("id", str, False, False), ("created_at", int, False, True),
    ("kind", str, False, False),
)
_GETTERS = tuple((itemgetter(name), typ) for name, typ, _required, _null in FIELDS)
_MISSING = object()


def encode_records(records: Iterable[dict[str, Any]], key: str, limit: int) -> list[bytes]:
    """The lines of ``records``; :class:`InvalidMessageError` for one over ``limit`` bytes,
    :class:`SerializationError` for one that is not JSON. Nothing is written."""
    lines: list[bytes] = []
    append = lines.append
    dumps, options, has_null = _dumps, _DUMPS_OPTIONS, _has_null
    for record in records:
        # encode_record, inlined: a rewrite encodes every message of a session here.
        try:
            line = dumps(record, option=options)
        except TypeError as exc:
            raise SerializationError(key=key, reason=str(exc)) from None
        if has_null(line) and has_non_finite_float(record):
            raise SerializationError(key=key, reason="NaN and infinities are not JSON numbers")
        if len(line) > limit:
            raise InvalidMessageError(key=key, message_id=record["id"],
                                      reason=f"message is {len(line)} bytes, over max_message_bytes={limit}")
        append(line)
    return lines


#: Where orjson may have written a NaN or an infinity (as ``null``). The regex engine
#: finds the literal faster than ``in`` does.
_has_null = re.compile(b"null").search


def invalid_reason(obj: object) -> str | None:
    """Why a decoded line is not a message record (see :data:`FIELDS`), or None when it is one."""
    if type(obj) is not dict:
        return f"a line must be a JSON object, not {type(obj).__name__}"
    for name, typ, required, nullable in FIELDS:
        value = obj.get(name, _MISSING)
        if type(value) is typ or (not required and value is _MISSING) or (nullable and value is None):
            continue
        what = "an integer" if typ is int else "a string"
        return f"the object has no string {name!r}" if required else f"{name!r} is not {what}"
    return None


def all_complete(records: list[Any]) -> bool:
    """Whether every decoded line is a record carrying every field of :data:`FIELDS` with
    its type (what the store writes), checked with C-level loops: the fast path of a
    whole-file parse. False means "look closer" (:func:`invalid_reason` per line), not
    "invalid"."""
    try:
        for get, typ in _GETTERS:
            if set(map(type, map(get, records))) != {typ}:
                return False
    except (KeyError, TypeError):
        return False
    return True


def decode_record(line: bytes) -> dict[str, Any]:
    """Parse one line (without its newline) into a validated record; ValueError with the
    reason (for text that is not JSON: what the parser found and at which column of the
    line, never the parser's own "line 1": the caller knows the file's line number)."""
    try:
        obj = loads(line)
    except JSONDecodeError as exc:
        raise ValueError(not_json(exc)) from None
    reason = invalid_reason(obj)
    if reason is not None:
        raise ValueError(reason)
    return obj  # type: ignore[no-any-return]


def not_json(exc: ValueError) -> str:
    """The reason a single line does not parse as JSON: the parser's message and the column
    in that line (orjson says "line 1 column N (char M)" of the one line it was given)."""
    if isinstance(exc, JSONDecodeError):
        return f"not JSON: {exc.msg} at column {exc.colno}"
    return str(exc) or type(exc).__name__


def decode_message(line: bytes) -> ChatMessage:
    """The message of one line (without its newline): :func:`decode_record` wrapped as a
    :class:`ChatMessage` without copying (:func:`jsonl_sessions.types.from_record`), the
    fast way for every read of lines the store wrote. ValueError with the reason when the
    line is not a message record. Cost: one ``orjson.loads`` plus one small object."""
    return from_record(decode_record(line))


ID_PREFIX = b'{"id":"'


def prefix_id(head: bytes) -> str | None:
    """The id of a line read off its first bytes ``head`` when the line starts the way the
    store writes it (``{"id":"<id>"``, no escapes in the id); None otherwise (the line must
    then be parsed, or ``head`` is too short). No parsing: O(len(id))."""
    if head.startswith(ID_PREFIX):
        end = head.find(b'"', 7)
        if end != -1:
            raw = head[7:end]
            if b"\\" not in raw and b"\n" not in raw:
                try:
                    return raw.decode("utf-8")
                except UnicodeDecodeError:
                    return None
    return None


def id_of_line(line: bytes) -> str:
    """The id of a valid line ("" when it has none), read off its prefix when it is ours,
    else by parsing it (ValueError: the line is corrupt)."""
    found = prefix_id(line)
    if found is not None:
        return found
    return decode_record(line.rstrip(b"\r\n")).get("id") or ""
