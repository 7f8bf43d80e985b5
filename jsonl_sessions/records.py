"""What a decoded message record says, read the same way by every backend: its searchable
text, and how a tool result pairs with the tool call that asked for it.

A record is the dict a transcript line decodes to (:func:`jsonl_sessions.codec.decode_record`).
Nothing here writes; each function is O(size of the record), :func:`mentions` O(size of
the line).
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterator, Mapping
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
    """Finds, with byte searches and before any line is decoded, the lines of a block of
    transcript lines that may mention one ``needle`` (casefolded): every line whose text
    contains the needle is among them, so checking only those never changes a result.

    A decoded string differs from its bytes in the line only by JSON escapes and by UTF-8:
    when the needle is ASCII without a character JSON may escape (``"``, ``\\``, ``/``,
    control characters), a line holding it in its text either holds it in its bytes
    lowercased (ASCII letters only), or holds a ``\\u`` escape of a character that is not
    a control character (an escaped letter, an escaped non-ASCII character), or holds
    one of the non-ASCII characters whose casefold has one of the needle's characters
    (:data:`FOLDS_TO_ASCII`): the candidates are the lines with any of these, each found by
    its own byte search. Escapes of control characters (``\\u001b`` of ANSI colour codes,
    which tool output is full of) hide no letter, so they make no line a candidate. When
    the needle is not ASCII, each of its non-ASCII characters can only come from a
    non-ASCII character of the text whose casefold holds it (ASCII text casefolds to
    ASCII; :func:`folding_into`): the candidates are the lines holding, in UTF-8, one such
    character for every non-ASCII character of the needle and passing the ASCII test
    above for the needle's longest run of ASCII characters (when it has two or more), and
    the lines with such an escape. Otherwise every line is a candidate.

    Each search is a compiled pattern (the regex engine skips to a literal's first byte
    faster than ``bytes.find`` does); the non-ASCII characters are looked for by their
    UTF-8 lead byte first (one ``memchr``; UTF-8 never puts a lead byte inside another
    character), and only the groups whose lead byte the block holds are searched. Cost:
    O(len(block)) per search, plus O(1) per candidate line.
    """

    __slots__ = ("_find", "ascii", "leads", "literal", "needs", "run")

    def __init__(self, needle: str) -> None:
        self.ascii = needle.encode("ascii") if needle.isascii() else None
        self.literal = bool(needle) and self.ascii is not None and not any(c in '"\\/' or c < " " for c in needle)
        found = sorted({c.encode("utf-8") for ch in set(needle) for c in FOLDS_TO_ASCII.get(ch, "")})
        groups: dict[bytes, list[bytes]] = {}
        for encoded in found:
            groups.setdefault(encoded[:1], []).append(encoded)
        #: (lead byte, search for the characters starting with it), per lead byte.
        self.leads = [(lead, re.compile(b"|".join(map(re.escape, chars))).search) for lead, chars in groups.items()]
        self._find = re.compile(re.escape(self.ascii)).search if self.literal and self.ascii else None
        #: Per non-ASCII character of the needle, a search for the characters it can come from.
        self.needs = [re.compile(b"|".join(re.escape(c.encode("utf-8")) for c in folding_into(ch))).search
                      for ch in sorted(set(needle)) if not ch.isascii()]
        runs = re.findall(r"[\x00-\x7f]{2,}", needle) if self.needs else []
        #: The test of the needle's longest ASCII run, for a needle that is not ASCII.
        self.run = Prefilter(max(runs, key=len)) if runs else None

    def line_starts(self, block: bytes, start: int = 0, end: int | None = None) -> list[int] | None:
        """The offsets of the lines of ``block[start:end]`` (complete lines, each ending
        with a newline; bytes after ``end`` are ignored) that may mention the needle, in
        order; None when every line may. O(len(block))."""
        if end is None:
            end = len(block)
        if self.ascii is None:  # the lines passing every test, one pass over the block each
            starts: set[int] | None = None
            if self.run is not None and (passing := self.run.line_starts(block, start, end)) is not None:
                starts = set(passing)
            for need in self.needs:
                if starts is not None and not starts:
                    break
                found: set[int] = set()
                _lines_with(need, block, start, end, found)
                starts = found if starts is None else starts & found
            assert starts is not None  # a needle that is not ASCII has a non-ASCII character
            _lines_with(_TEXT_ESCAPE, block, start, end, starts)
            return sorted(starts)
        find = self._find
        if find is None:
            return None
        starts = set()
        _lines_with(find, block.lower(), start, end, starts)
        if not block.isascii():
            for lead, search in self.leads:
                if block.find(lead, start, end) != -1:
                    _lines_with(search, block, start, end, starts)
        _lines_with(_TEXT_ESCAPE, block, start, end, starts)  # one regex pass (faster than bytes.find here)
        return sorted(starts)

    def may_hold(self, line: bytes) -> bool:
        """Whether one line (without its newline) may mention the needle: :meth:`line_starts`
        for a block of that one line, without building the block. O(len(line))."""
        if self.ascii is None:
            return ((all(need(line) is not None for need in self.needs) and (self.run is None or self.run.may_hold(line)))
                    or _TEXT_ESCAPE(line) is not None)
        find = self._find
        if find is None or find(line.lower()) is not None:
            return True
        if not line.isascii():
            for lead, search in self.leads:
                if lead in line and search(line) is not None:
                    return True
        return b"\\u" in line and _TEXT_ESCAPE(line) is not None

    def candidates(self, block: bytes, end: int | None = None) -> list[bytes] | None:
        """The lines of ``block[:end]`` (see :meth:`line_starts`) that may mention the
        needle, without their newlines; None when every line may."""
        starts = self.line_starts(block, 0, end)
        if starts is None:
            return None
        return [block[at : block.index(b"\n", at)] for at in starts]


#: A ``\\u`` escape of a character that is not a control character (``\\u0000``-``\\u001f``
#: hide no letter). An escaped backslash followed by ``u`` is found too: a superset.
_TEXT_ESCAPE = re.compile(rb"\\u(?!00[01])").search


def _lines_with(search: Callable[[bytes, int, int], re.Match[bytes] | None], block: bytes, start: int, end: int,
                starts: set[int]) -> None:
    """Add to ``starts`` the start of every line of ``block[start:end]`` where ``search``
    finds a match starting in the line (a match never spans a newline here); each line is
    searched once past its first match."""
    match = search(block, start, end)
    while match is not None:
        at = match.start()
        starts.add(max(block.rfind(b"\n", start, at) + 1, start))
        stop = block.find(b"\n", at)
        if stop == -1 or stop + 1 >= end:
            return
        match = search(block, stop + 1, end)


#: For each ASCII character, the non-ASCII characters whose casefold contains it (``ß``
#: folds to ``ss``, the Kelvin sign to ``k``, ``ﬁ`` to ``fi``...), as computed from Python
#: 3.11's tables (Unicode 14.0). Unicode never changes the folding of an existing
#: character; ``tests/jsonl/test_scale.py`` recomputes this table with the running Python, so a
#: character a later Unicode version adds with such a folding fails a test.
FOLDS_TO_ASCII: dict[str, str] = {
    "a": "\u1e9a", "f": "\ufb00\ufb01\ufb02\ufb03\ufb04", "h": "\u1e96", "i": "\u0130\ufb01\ufb03",
    "j": "\u01f0", "k": "\u212a", "l": "\ufb02\ufb04", "n": "\u0149", "s": "\u00df\u017f\u1e9e\ufb05\ufb06",
    "t": "\u1e97\ufb05\ufb06", "w": "\u1e98", "y": "\u1e99",
}


@functools.cache
def _non_ascii_folds() -> dict[str, str]:
    """Each non-ASCII character some other character's casefold holds -> those characters
    (``σ`` <- ``Σς``, ``ö`` <- ``Ö``): one pass over every code point (about 0.2 s), on the
    first search for a non-ASCII needle in a process."""
    out: dict[str, str] = {}
    for cp in range(0x80, sys.maxunicode + 1):
        c = chr(cp)
        folded = c.casefold()
        if folded != c:
            for ch in set(folded):
                if not ch.isascii():
                    out[ch] = out.get(ch, "") + c
    return out


def folding_into(ch: str) -> str:
    """Every character whose casefold holds ``ch``, a non-ASCII character of a casefolded
    text: ``ch`` itself and, say for ``σ``, ``Σ`` and ``ς``."""
    return ch + _non_ascii_folds().get(ch, "")


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


__all__ = ["FOLDS_TO_ASCII", "Prefilter", "calls", "decode_or_none", "mentions", "texts", "tool_call_id_of"]
