"""What the SQLite full-text indexes of message search share (the JSONL store's index file
and the SQLite store's table): the FTS5 table, the text it indexes and the query that
finds the candidates of a search.

The table indexes each message's searchable text casefolded
(:func:`jsonl_sessions.matcher.searchable` then ``str.casefold``) with FTS5's ``trigram``
tokenizer (case-sensitive: the text is already folded, so the tokenizer's own folding,
which is not ``str.casefold``, never applies) and ``detail=none``: the table keeps which
rows hold each trigram, not where in them. A term is looked up as the AND of its
trigrams, which finds every row holding it as a substring, and some rows that hold its
trigrams apart. The rows found are a superset of the rows that hold every term; the
collector confirms each with the exact matcher, so an indexed search returns what a scan
returns. A term shorter than three characters has no trigram: it is left to the
confirmation, and a search with no term of three characters or more is answered by a
scan. (``detail=full`` would allow phrase queries of a term's consecutive trigrams, with
fewer candidates to confirm, at about four times the size and more than twice the build
time; measured in benchmarks/README.md.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from . import matcher, records

#: The FTS5 options of every search table.
TABLE_OPTIONS = "tokenize='trigram case_sensitive 1', detail=none, columnsize=0"


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


def trigrams(term: str) -> list[str]:
    """The distinct trigrams of ``term`` (three consecutive characters; none when shorter), in order."""
    return list(dict.fromkeys(term[i : i + 3] for i in range(len(term) - 2)))


def match_expression(terms: Iterable[str]) -> str | None:
    """The FTS5 query whose rows are a superset of the rows holding every term (casefolded):
    the AND of the trigrams of each term of three characters or more (each quoted: one
    token of the trigram tokenizer); None when no term has three characters (the index
    cannot narrow the search). NUL is a space in the indexed text, so it is one here too."""
    grams = [g for t in terms for g in trigrams(t.replace("\x00", " "))]
    if not grams:
        return None
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in dict.fromkeys(grams))


__all__ = ["TABLE_OPTIONS", "folded_text", "has_fts5", "indexed", "match_expression", "trigrams"]
