"""Rows <-> API values of the database backends: message lines and the session metadata column.

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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from . import codec, sidecar
from .errors import CorruptMetadataError, CorruptTranscriptError
from .types import ChatMessage

log = logging.getLogger("jsonl_sessions")


# -- messages -----------------------------------------------------------------------
#: The largest value of SQLite's INTEGER (signed 64 bits).
MAX_INTEGER = 2**63 - 1


#: The SQL tests that an ``id`` column holds a ULID (a canonical one, as
#: :func:`jsonl_sessions.ids.is_ulid`): new ids are made after the newest such id, so an id
#: an earlier version took from a caller (``"msg_abc"``) never blocks an append.
_ULID_CLASS = "[0123456789ABCDEFGHJKMNPQRSTVWXYZ]"
ULID_GLOB = "[01234567]" + _ULID_CLASS * 25  # SQLite: id GLOB '<this>'
ULID_REGEX = f"^[01234567]{_ULID_CLASS}{{25}}$"  # PostgreSQL: id ~ '<this>'


def created_column(created_at: int | None) -> int | None:
    """The ``created_at`` index column of a message created at ``created_at``: the value,
    clamped to :data:`MAX_INTEGER` (the codec writes ints up to 2**64 - 1, SQLite stores
    signed 64 bits). The line keeps the exact value; the clamp keeps the order."""
    return created_at if created_at is None or created_at <= MAX_INTEGER else MAX_INTEGER


def index_of(line: bytes) -> tuple[str | None, int | None, str | None, str | None]:
    """The index columns of a line: ``(id, created_at, role, kind)``; all None when the line
    is not a message record (a corrupt row keeps its bytes and is found by its seq)."""
    try:
        record = codec.decode_record(line)
    except ValueError:
        return None, None, None, None
    return (record.get("id") or "", created_column(record.get("created_at")), record["role"],
            record.get("kind") or "message")


def decode(line: bytes) -> ChatMessage:
    """The message a line holds; ValueError (with the reason) when it is not one."""
    return codec.decode_message(line)


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


# -- metadata ---------------------------------------------------------------------------
def encode_meta(meta: Mapping[str, Any]) -> bytes:
    return orjson.dumps(meta)


def decode_meta(raw: bytes | str, key: str, path: str) -> dict[str, Any]:
    """The meta object of session ``key`` (:func:`jsonl_sessions.sidecar.decode`, and it
    must name this session); :class:`CorruptMetadataError` when it is not one (or is of a
    newer format: refused rather than misread)."""
    data = sidecar.decode(raw.encode("utf-8") if isinstance(raw, str) else raw, path, key)
    if data["key"] != key:
        raise CorruptMetadataError(key=key, path=path, reason="not a metadata object with this session's 'key'")
    return data


def sizes(lines: Sequence[bytes]) -> int:
    """Bytes of ``lines`` in an export (each with its newline)."""
    return sum(map(len, lines)) + len(lines)
