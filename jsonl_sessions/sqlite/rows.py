"""Rows <-> API values for the SQLite backend: message lines, session metadata, checks.

A message row keeps the exact JSON line the JSONL backend would write (same encoder,
:mod:`jsonl_sessions.codec`), without its newline; the other columns (id, created_at,
role, kind) are an index over it, derived from the line when it is written. The line is
the truth: every read decodes it, so a row whose line does not parse is corruption,
whatever its columns say.

The session row's ``meta`` is the same JSON object the JSONL backend keeps in a
sidecar (key, format, created_at, updated_at, trim_breadcrumb, name, agent_alias,
principal_id, state, turn_id, state_since, context, parent, fork_point, and any field a
newer writer added), so metadata moves between the backends unchanged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from .. import codec
from ..errors import CorruptMetadataError, CorruptTranscriptError
from ..types import SESSION_STATES, ChatMessage, SessionMetadata, as_message

log = logging.getLogger("jsonl_sessions")

#: The version of the ``meta`` object (the same as the JSONL sidecar's format).
META_FORMAT = 1
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# -- messages -----------------------------------------------------------------------
def index_of(line: bytes) -> tuple[str | None, int | None, str | None, str | None]:
    """The index columns of a line: ``(id, created_at, role, kind)``; all None when the line
    is not a message record (a corrupt row keeps its bytes and is found by its seq)."""
    try:
        record = codec.decode_record(line)
    except ValueError:
        return None, None, None, None
    return record.get("id") or "", record.get("created_at"), record["role"], record.get("kind") or "message"


def decode(line: bytes) -> ChatMessage:
    """The message a line holds; ValueError (with the reason) when it is not one."""
    return as_message(codec.decode_record(line))


def corrupt(key: str, path: str, seq: int, offset: int, reason: str) -> CorruptTranscriptError:
    """The error for row ``seq`` (0-based) of ``key``: line ``seq + 1``, at byte ``offset``
    of the session's export."""
    return CorruptTranscriptError(key=key, path=path, line=seq + 1, offset=offset, reason=reason)


def decode_rows(
    rows: Iterable[tuple[int, bytes]], *, key: str, path: str, strict: bool, first_offset: int = 0
) -> list[ChatMessage]:
    """The messages of ``(seq, line)`` rows, oldest first. ``strict``: the first row that
    does not parse raises :class:`CorruptTranscriptError` (line and byte offset as in the
    export, counting from ``first_offset``); otherwise such rows are skipped with one
    logged warning. Cost: O(bytes)."""
    out: list[ChatMessage] = []
    offset = first_offset
    bad = 0
    first_bad = ""
    for seq, line in rows:
        try:
            out.append(decode(line))
        except ValueError as exc:
            reason = str(exc) or type(exc).__name__
            if strict:
                raise corrupt(key, path, seq, offset, reason) from None
            if not bad:
                first_bad = f"line {seq + 1}, byte offset {offset}: {reason}"
            bad += 1
        offset += len(line) + 1
    if bad:
        log.warning("skipped %d corrupt row(s) of session %r in %s; first at %s", bad, key, path, first_bad)
    return out


def texts(content: Any) -> Iterator[str]:
    """The searchable text of a message's content: a string, or in a list every string item
    and every object's ``"text"`` (a single part object as content counts too)."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                yield part
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
    elif isinstance(content, dict) and isinstance(content.get("text"), str):
        yield content["text"]


def mentions(line: bytes, needle: str, ascii_needle: bytes | None) -> bool:
    """Whether the message of ``line`` has text containing ``needle`` (casefolded). A pure
    ASCII line without escapes is ruled out without decoding when it cannot hold the needle."""
    if line.isascii() and b"\\" not in line and (ascii_needle is None or ascii_needle not in line.lower()):
        return False
    try:
        record = codec.decode_record(line)
    except ValueError:
        return False
    return any(needle in text.casefold() for text in texts(record.get("content")))


# -- metadata ---------------------------------------------------------------------------
def new_meta(key: str, now_ms: int, breadcrumb: bool | None = None) -> dict[str, Any]:
    return {"format": META_FORMAT, "key": key, "created_at": now_ms, "updated_at": now_ms, "trim_breadcrumb": breadcrumb}


def encode_meta(meta: Mapping[str, Any]) -> bytes:
    return orjson.dumps(meta)


def decode_meta(raw: bytes | str, key: str, path: str) -> dict[str, Any]:
    """The meta object of session ``key``; :class:`CorruptMetadataError` when it is not one
    (or is of a newer format: refused rather than misread)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptMetadataError(key=key, path=path, reason=f"not JSON: {exc}") from None
    if type(data) is not dict or data.get("key") != key:
        raise CorruptMetadataError(key=key, path=path, reason="not a metadata object with this session's 'key'")
    version = data.get("format")
    if type(version) is not int or not 1 <= version <= META_FORMAT:
        raise CorruptMetadataError(key=key, path=path, reason=f"unsupported metadata format {version!r}")
    return data


def text(meta: Mapping[str, Any] | None, name: str) -> str | None:
    """Field ``name`` when it is a string, else None."""
    value = None if meta is None else meta.get(name)
    return value if type(value) is str else None


def millis(meta: Mapping[str, Any] | None, name: str) -> int | None:
    """Field ``name`` when it is an integer, else None."""
    value = None if meta is None else meta.get(name)
    return value if type(value) is int else None


def state_of(meta: Mapping[str, Any] | None) -> str | None:
    value = text(meta, "state")
    return value if value in SESSION_STATES else None


def from_ms(ms: int | None) -> datetime | None:
    return None if ms is None else EPOCH + timedelta(milliseconds=ms)


def from_ns(ns: int) -> datetime:
    return EPOCH + timedelta(microseconds=ns // 1000)


def metadata(key: str, meta: Mapping[str, Any] | None, count: int, size: int, activity_ns: int) -> SessionMetadata:
    """The public metadata of a session row (``meta`` None: unreadable, stats only)."""
    crumb = None if meta is None else meta.get("trim_breadcrumb")
    context = None if meta is None else meta.get("context")
    state = state_of(meta)
    return SessionMetadata(
        key=key,
        name=text(meta, "name"),
        agent_alias=text(meta, "agent_alias"),
        principal_id=text(meta, "principal_id"),
        state=state,
        turn_id=text(meta, "turn_id") if state is not None else None,
        created_at=from_ms(millis(meta, "created_at")),
        updated_at=from_ns(activity_ns),
        message_count=count,
        size_bytes=size,
        trim_breadcrumb=crumb if isinstance(crumb, bool) else None,
        context={k: v for k, v in context.items() if type(k) is str and type(v) is str} if type(context) is dict else {},
        parent=text(meta, "parent"),
        fork_point=text(meta, "fork_point"),
    )


# -- argument checks (the same errors as the JSONL backend) -----------------------------
def check_text(what: str, value: object, *, empty: bool = True) -> str:
    """``value`` if it is a string JSON can hold (TypeError / ValueError otherwise)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not empty and not value:
        raise ValueError(f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode text (lone surrogate): {value!r}") from None
    return str(value)


def check_number(what: str, value: object) -> float:
    """``value`` if it is a finite number >= 0 (TypeError / ValueError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number >= 0, not {value!r}")
    return float(value)


def tool_call_id_of(message: ChatMessage) -> str | None:
    value = message.extra.get("tool_call_id")
    return value if isinstance(value, str) else None


def calls(message: ChatMessage, tool_call_id: str) -> bool:
    """Whether ``message`` is the tool call of ``tool_call_id`` (an entry of its ``tool_calls``)."""
    value = message.extra.get("tool_calls")
    return isinstance(value, list) and any(isinstance(c, dict) and c.get("id") == tool_call_id for c in value)


def sizes(lines: Sequence[bytes]) -> int:
    """Bytes of ``lines`` in an export (each with its newline)."""
    return sum(map(len, lines)) + len(lines)
