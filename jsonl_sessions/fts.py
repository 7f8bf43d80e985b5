"""What the SQLite full-text indexes of message search share (the JSONL store's index file
and the SQLite store's table): the FTS5 table, the text it indexes and the query that
finds the candidates of a search.

The table indexes each message's searchable text casefolded
(:func:`jsonl_sessions.matcher.searchable` then ``str.casefold``) with FTS5's ``trigram``
tokenizer (case-sensitive: the text is already folded, so the tokenizer's own folding,
which is not ``str.casefold``, never applies) and full detail (positions: a term is
looked up as the phrase of its consecutive trigrams, which finds the rows holding it as
a substring, with few rows that do not). The rows found are a superset of the rows that
hold every term; the collector confirms each with the exact matcher, so an indexed search
returns what a scan returns. A term shorter than three characters has no trigram: it is
left to the confirmation, and a search with no term of three characters or more is
answered by a scan. (``detail=none`` makes the index a third of the size and its build
twice as fast, but then a term can only be the AND of its trigrams, which leaves ten
times the candidates to confirm.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from . import matcher, records

#: The FTS5 options of every search table.
TABLE_OPTIONS = "tokenize='trigram case_sensitive 1', detail=full"


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


def match_expression(terms: Iterable[str]) -> str | None:
    """The FTS5 query whose rows are a superset of the rows holding every term (casefolded):
    each term of three characters or more as a phrase (the trigram tokenizer makes it the
    phrase of its consecutive trigrams); None when no term has three characters (the index
    cannot narrow the search). NUL is a space in the indexed text, so it is one here too."""
    phrases = [t.replace("\x00", " ") for t in terms if len(t) >= 3]
    if not phrases:
        return None
    return " AND ".join('"' + p.replace('"', '""') + '"' for p in dict.fromkeys(phrases))


__all__ = ["TABLE_OPTIONS", "folded_text", "has_fts5", "indexed", "match_expression"]
