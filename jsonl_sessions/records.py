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


class Prefilter:
    """Rules out whole blocks of transcript lines for one ``needle`` (casefolded) with byte
    searches, before any line is decoded. :meth:`may_mention` is False only when no line of
    the block can have text containing the needle, so skipping such blocks never changes a
    result (a True block is checked line by line, exactly). A block is ruled out when it
    holds no ``\\u`` escape and:

    - the needle is not ASCII and the block is: ASCII text casefolds to ASCII;
    - the needle is ASCII without a character JSON may escape (``"``, ``\\``, ``/``, control
      characters), the block holds none of the non-ASCII characters whose casefold has
      one of the needle's characters (``ß`` folds to ``ss``, the Kelvin sign to ``k``...),
      and the needle is not in the block lowercased (ASCII letters only). Then every
      match in a casefolded text comes from ASCII characters written as they are, so it
      would be in the block's bytes.
    """

    __slots__ = ("ascii", "literal", "specials")

    def __init__(self, needle: str) -> None:
        self.ascii = needle.encode("ascii") if needle.isascii() else None
        self.literal = self.ascii is not None and not any(c in '"\\/' or c < " " for c in needle)
        folds = _folding_to_ascii()
        self.specials = tuple(sorted({c.encode("utf-8") for ch in set(needle) for c in folds.get(ch, ())}))

    def may_mention(self, block: bytes) -> bool:
        """Whether a line of ``block`` (complete lines) may mention the needle."""
        if b"\\u" in block:
            return True
        if self.ascii is None:
            return not block.isascii()
        if not self.literal:
            return True
        for special in self.specials:
            if special in block:
                return True
        return self.ascii in block.lower()


_FOLDS: dict[str, tuple[str, ...]] = {}


def _folding_to_ascii() -> dict[str, tuple[str, ...]]:
    """For each ASCII character, the non-ASCII characters whose casefold contains it
    (computed once from this Python's Unicode tables; cased scripts all lie below
    U+20000, so the scan stops there)."""
    if not _FOLDS:
        found: dict[str, set[str]] = {}
        for cp in range(0x80, 0x20000):
            c = chr(cp)
            folded = c.casefold()
            if folded == c:
                continue
            for ch in folded:
                if ch.isascii():
                    found.setdefault(ch, set()).add(c)
        _FOLDS.update({ch: tuple(sorted(cs)) for ch, cs in found.items()})
    return _FOLDS


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


__all__ = ["Prefilter", "calls", "decode_or_none", "mentions", "texts", "tool_call_id_of"]
