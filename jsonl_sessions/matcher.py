"""The text matching of message search, written once for every backend: a query's terms,
whether a message's searchable text holds them all, and the snippet of a hit with the
offsets of its matches.

- **Searchable text** of a message: the texts :func:`jsonl_sessions.records.texts` finds in
  its ``content`` (a string; in a list, every string item and every object's ``"text"``;
  an object's ``"text"``), joined by a newline.
- **Terms** (:func:`parse`): the words of the query (split on whitespace) and its
  ``"quoted phrases"`` (the text between the quotes, as written, whitespace included; an
  unclosed quote runs to the end), each folded with ``str.casefold`` (full Unicode case
  folding: ``"STRASSE"``, ``"straße"`` and ``"Straße"`` are one term); empty ones are
  dropped, repeated ones kept once. A query without a term matches every message.
- **Match**: every term occurs in the casefolded searchable text (a term is a substring:
  ``"log"`` matches ``"catalog"``; no normalisation, so a precomposed ``é`` does not match
  ``e`` + combining accent).
- **Snippet**: a window of the original (unfolded) text of at most :data:`SNIPPET_CHARS`
  characters around the first match (:data:`CONTEXT_CHARS` before it when the text
  allows), widened to hold the whole first match; ``matches`` are the ``[start, end)``
  offsets in the snippet of every occurrence of every term that overlaps it, clipped to
  it, overlapping ones merged, in order. Offsets count characters of the original text:
  a match found in the folded text (where ``ß`` is ``ss``) covers the original characters
  it came from.

- **Shown** (:func:`pieces`): a snippet cut at its matches into marked and unmarked pieces,
  without the terminal escape sequences of tool output (:mod:`jsonl_sessions.ansi`), for
  the command line and the viewer alike.

Nothing here reads a store. Cost: O(length of the text) per message; the character map of
a text is built only when folding changed its length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from . import records

#: The most characters of a snippet (more only when the first match alone is longer).
SNIPPET_CHARS = 200
#: Characters of context kept before the first match when the text allows.
CONTEXT_CHARS = 60

_TERM = re.compile(r'"([^"]*)"?|([^\s"]+)')

Span = tuple[int, int]


def parse(text: str) -> tuple[str, ...]:
    """The casefolded terms of the query ``text`` (see the module docstring), in order."""
    terms: list[str] = []
    for match in _TERM.finditer(text):
        term = (match.group(1) if match.group(1) is not None else match.group(2)).casefold()
        if term and term not in terms:
            terms.append(term)
    return tuple(terms)


def searchable(content: Any) -> str:
    """The searchable text of a message whose ``content`` is ``content``."""
    parts = list(records.texts(content))
    return parts[0] if len(parts) == 1 else "\n".join(parts)


def matches_all(terms: Iterable[str], folded: str) -> bool:
    """Whether the casefolded text ``folded`` holds every term."""
    return all(term in folded for term in terms)


def _fold_map(text: str) -> tuple[str, list[int] | None]:
    """``text`` casefolded, with the index in ``text`` of each folded character; None when
    folding kept the length (casefold maps each character on its own, to one or more
    characters, so then every character folded to exactly one and indices are equal)."""
    folded = text.casefold()
    if len(folded) == len(text):
        return folded, None
    origin: list[int] = []
    for i, ch in enumerate(text):
        origin.extend([i] * len(ch.casefold()))
    return folded, origin


def spans(terms: Iterable[str], text: str) -> list[Span]:
    """The ``[start, end)`` character ranges of ``text`` where the terms occur (case
    folded), overlapping or touching ranges merged, in order."""
    folded, origin = _fold_map(text)
    found: list[Span] = []
    for term in terms:
        at = folded.find(term)
        while at != -1:
            end = at + len(term)
            if origin is None:
                found.append((at, end))
            else:
                found.append((origin[at], origin[end - 1] + 1))
            at = folded.find(term, end)
    found.sort()
    merged: list[Span] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def snippet(terms: Iterable[str], text: str) -> tuple[str, tuple[Span, ...]]:
    """``(snippet, matches)`` of a hit whose searchable text is ``text`` (see the module
    docstring). Without a match (no terms): the start of the text and no offsets."""
    found = spans(terms, text)
    if not found:
        return text[:SNIPPET_CHARS], ()
    first_start, first_end = found[0]
    start = max(0, first_start - CONTEXT_CHARS)
    end = min(len(text), start + SNIPPET_CHARS)
    start = max(0, min(start, end - SNIPPET_CHARS))
    end = max(end, first_end)
    inside = tuple((max(s, start) - start, min(e, end) - start) for s, e in found if s < end and e > start)
    return text[start:end], inside


def pieces(text: str, matches: Iterable[Span]) -> list[tuple[str, bool]]:
    """``text`` (a snippet) cut at ``matches`` (ordered, not overlapping) into ``(piece,
    marked)`` pairs in order, each without the characters of the text's terminal escape
    sequences (a match inside one is not shown); empty pieces are left out. Control
    characters stay: the caller makes them visible. Cost: O(length of the text)."""
    from . import ansi  # here: only the outputs cut snippets, and `import jsonl_sessions` stays lean

    hidden = ansi.spans(text)

    def shown(start: int, end: int) -> str:
        if not hidden:
            return text[start:end]
        out, at = [], start
        for s, e in hidden:
            if e <= at or s >= end:
                continue
            out.append(text[at:max(s, at)])
            at = min(e, end)
        out.append(text[at:end])
        return "".join(out)

    cut: list[tuple[str, bool]] = []
    at = 0
    for start, end in matches:
        cut.append((shown(at, start), False))
        cut.append((shown(start, end), True))
        at = max(at, end)
    cut.append((shown(at, len(text)), False))
    return [(piece, marked) for piece, marked in cut if piece]


__all__ = ["CONTEXT_CHARS", "SNIPPET_CHARS", "matches_all", "parse", "pieces", "searchable", "snippet", "spans"]
