"""What the SQLite full-text indexes of message search share (the JSONL store's index file
and the SQLite store's table): the FTS5 table, the text it indexes and the query that
finds the candidates of a search.

The table indexes each message's searchable text casefolded
(:func:`jsonl_sessions.matcher.searchable` then ``str.casefold``) with FTS5's ``trigram``
tokenizer (case-sensitive: the text is already folded, so the tokenizer's own folding,
which is not ``str.casefold``, never applies) and ``detail=none`` (only which rows hold a
trigram: the smallest index). A term of a search becomes the AND of its trigrams, so the
rows found are a superset of the rows that hold the term (a row holding the term holds
each of its trigrams); the collector then confirms each row with the exact matcher, so an
indexed search returns what a scan returns. A term shorter than three characters has no
trigram: it is left to the confirmation, and a search with no term of three characters
or more is answered by a scan.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from . import matcher, records

#: The FTS5 options of every search table.
TABLE_OPTIONS = "tokenize='trigram case_sensitive 1', detail=none"
#: At most this many trigrams of one term go into a query (spread over the term): more
#: narrow the candidates little and cost a posting list each.
MAX_TRIGRAMS = 12


def has_fts5() -> bool:
    """Whether this Python's SQLite has FTS5 with the trigram tokenizer (SQLite >= 3.34)."""
    try:
        conn = sqlite3.connect(":memory:")
        try:
            conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, {TABLE_OPTIONS})")
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return True


def folded_text(line: bytes) -> str | None:
    """The casefolded searchable text of a transcript line; None when the line is not a
    message or its text is empty (no term can match it: not indexed)."""
    record = records.decode_or_none(line)
    if record is None:
        return None
    text = matcher.searchable(record.get("content"))
    # NUL may end a string inside SQLite's tokenizer: a space stands in for it (a trigram
    # holding NUL is never queried, so this only adds candidates)
    return text.casefold().replace("\x00", " ") if text else None


def indexed(line: bytes) -> tuple[int | None, str] | None:
    """``(created_at, folded text)`` of a line for an index: :func:`folded_text` with the
    message's time; None when there is nothing to index."""
    record = records.decode_or_none(line)
    if record is None:
        return None
    text = matcher.searchable(record.get("content"))
    if not text:
        return None
    return record.get("created_at"), text.casefold().replace("\x00", " ")


def _trigrams(term: str) -> list[str]:
    grams = list(dict.fromkeys(g for g in (term[i : i + 3] for i in range(len(term) - 2)) if "\x00" not in g))
    if len(grams) > MAX_TRIGRAMS:
        step = (len(grams) - 1) / (MAX_TRIGRAMS - 1)
        grams = [grams[round(i * step)] for i in range(MAX_TRIGRAMS)]
    return grams


def match_expression(terms: Iterable[str]) -> str | None:
    """The FTS5 query whose rows are a superset of the rows holding every term (casefolded);
    None when no term has three characters (the index cannot narrow the search)."""
    grams: list[str] = []
    for term in terms:
        grams += _trigrams(term)
    if not grams:
        return None
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in dict.fromkeys(grams))


__all__ = ["MAX_TRIGRAMS", "TABLE_OPTIONS", "folded_text", "has_fts5", "indexed", "match_expression"]
