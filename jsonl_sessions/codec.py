"""Transcript lines <-> message dicts (orjson).

A line is one JSON object followed by ``\\n``, the id first (docs/format.md, "Transcript
lines", gives the field order and why). Only JSON values are accepted: ``datetime`` and
dataclass instances are refused (orjson would silently turn them into strings /
objects), as are NaN and the infinities (orjson would write ``null``), integers beyond
64 bits, and non-string keys.
"""

from __future__ import annotations

from typing import Any

import orjson

from .errors import SerializationError
from .types import ChatMessage, has_non_finite_float

_DUMPS_OPTIONS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_dumps = orjson.dumps
loads = orjson.loads
JSONDecodeError = orjson.JSONDecodeError


def record_of(message: ChatMessage, message_id: str, created_at: int) -> dict[str, Any]:
    """The dict written for ``message`` with its assigned id and time, fields in line order."""
    data = message._data
    record = {
        "id": message_id,
        "created_at": created_at,
        "role": data["role"],
        "kind": data.get("kind") or "message",
        "content": data.get("content"),
    }
    if len(data) > 5:
        for k, v in data.items():
            if k not in record:
                record[k] = v
    return record


def encode_record(record: dict[str, Any], key: str | None = None) -> bytes:
    """One transcript line (with its newline). Raises :class:`SerializationError`."""
    try:
        line = _dumps(record, option=_DUMPS_OPTIONS)
    except TypeError as exc:
        raise SerializationError(key=key, reason=str(exc)) from None
    if b"null" in line and has_non_finite_float(record):
        raise SerializationError(key=key, reason="NaN and infinities are not JSON numbers")
    return line


def invalid_reason(obj: object) -> str | None:
    """Why a decoded line is not a message record, or None when it is one."""
    if type(obj) is not dict:
        return f"a line must be a JSON object, not {type(obj).__name__}"
    role = obj.get("role")
    if type(role) is not str:
        return "the object has no string 'role'"
    mid = obj.get("id", "")
    if type(mid) is not str:
        return "'id' is not a string"
    created = obj.get("created_at")
    if created is not None and type(created) is not int:
        return "'created_at' is not an integer"
    kind = obj.get("kind", "message")
    if type(kind) is not str:
        return "'kind' is not a string"
    return None


def decode_record(line: bytes) -> dict[str, Any]:
    """Parse one line (without its newline) into a validated record; ValueError with the reason."""
    obj = loads(line)
    reason = invalid_reason(obj)
    if reason is not None:
        raise ValueError(reason)
    return obj  # type: ignore[no-any-return]


def id_of_line(line: bytes) -> str:
    """The id of a valid line, read off its prefix when it is ours, else by parsing it."""
    if line.startswith(b'{"id":"'):
        end = line.find(b'"', 7)
        if end != -1 and b"\\" not in line[7:end]:
            return line[7:end].decode("utf-8")
    return decode_record(line.rstrip(b"\r\n")).get("id") or ""
