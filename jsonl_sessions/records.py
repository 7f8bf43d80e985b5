"""What a decoded message record says, read the same way by every backend: its searchable
text, and how a tool result pairs with the tool call that asked for it.

A record is the dict a transcript line decodes to (:func:`jsonl_sessions.codec.decode_record`).
Nothing here writes; each function is O(size of the record), :func:`mentions` O(size of
the line).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from . import codec


def texts(content: Any) -> Iterator[str]:
    """The searchable text of a message's ``content``: a string; in a list, every string
    item and every object's ``"text"`` string; an object's ``"text"`` string."""
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
    """Whether the message of ``line`` (without its newline) has text containing ``needle``
    (already casefolded); ``ascii_needle`` is ``needle`` in ASCII, None when it is not
    ASCII. A pure-ASCII line without escapes holds its strings as they are, and ASCII text
    casefolds to ASCII, so such a line without the needle is ruled out without decoding.
    A line that does not parse mentions nothing."""
    if line.isascii() and b"\\" not in line and (ascii_needle is None or ascii_needle not in line.lower()):
        return False
    try:
        record = codec.decode_record(line)
    except ValueError:  # a corrupt line (JSONDecodeError is a ValueError)
        return False
    return any(needle in text.casefold() for text in texts(record.get("content")))


def tool_call_id_of(record: Mapping[str, Any]) -> str | None:
    """The ``tool_call_id`` of a tool result; None for any other message."""
    value = record.get("tool_call_id")
    return value if isinstance(value, str) else None


def calls(record: Mapping[str, Any], tool_call_id: str) -> bool:
    """Whether ``record`` is the tool call of ``tool_call_id`` (an entry of its ``tool_calls``)."""
    value = record.get("tool_calls")
    return isinstance(value, list) and any(isinstance(c, dict) and c.get("id") == tool_call_id for c in value)


def decode_or_none(line: bytes) -> dict[str, Any] | None:
    """The record of ``line``; None when it does not parse."""
    try:
        return codec.decode_record(line)
    except ValueError:
        return None


__all__ = ["calls", "decode_or_none", "mentions", "texts", "tool_call_id_of"]
