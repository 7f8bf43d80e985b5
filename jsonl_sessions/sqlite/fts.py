"""The optional full-text index of the SQLite store: the FTS5 table ``message_texts``
(:mod:`jsonl_sessions.fts`) in the store's own file, one row per message with text, its
rowid the message row's.

**Use.** While the table exists, ``search_messages`` asks it for the candidates of a
search with a term of three characters or more and confirms each with the exact matcher
(so it returns what a scan returns); other searches scan. :func:`build` creates it
(``jsonl-sessions index build``), :func:`drop` removes it; without it, searches scan.

**Currency.** Triggers on ``messages`` keep it current in the transaction of every write
(insert, delete, update), so it is never behind; they call ``jsonl_sessions_folded``, a
function every connection of the store registers (:func:`register`). A program that
writes to the file without registering it (the ``sqlite3`` shell, an older version of this
package) gets "no such function" on writes while the table exists: drop the index first.
A ``VACUUM`` may renumber rows: build the index again after one (:func:`build` with
``rebuild=True``).

**Crashes.** The table and its triggers are created and filled in one transaction, and
every later change is part of the write that makes it: a crash leaves the index as
consistent as the messages.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from .. import fts

TABLE = "message_texts"
FUNCTION = "jsonl_sessions_folded"

_FILL = f"SELECT rowid, folded FROM (SELECT rowid, {FUNCTION}(line) AS folded FROM messages) WHERE folded IS NOT NULL"
_CREATE = (
    f"CREATE VIRTUAL TABLE {TABLE} USING fts5(folded, {fts.TABLE_OPTIONS})",
    f"""CREATE TRIGGER {TABLE}_insert AFTER INSERT ON messages BEGIN
        INSERT INTO {TABLE} (rowid, folded) SELECT new.rowid, f FROM (SELECT {FUNCTION}(new.line) AS f)
        WHERE f IS NOT NULL; END""",
    f"""CREATE TRIGGER {TABLE}_delete AFTER DELETE ON messages BEGIN
        DELETE FROM {TABLE} WHERE rowid = old.rowid; END""",
    f"""CREATE TRIGGER {TABLE}_update AFTER UPDATE ON messages BEGIN
        DELETE FROM {TABLE} WHERE rowid = old.rowid;
        INSERT INTO {TABLE} (rowid, folded) SELECT new.rowid, f FROM (SELECT {FUNCTION}(new.line) AS f)
        WHERE f IS NOT NULL; END""",
    f"INSERT INTO {TABLE} (rowid, folded) {_FILL}",
)
_DROP = (f"DROP TRIGGER IF EXISTS {TABLE}_insert", f"DROP TRIGGER IF EXISTS {TABLE}_delete",
         f"DROP TRIGGER IF EXISTS {TABLE}_update", f"DROP TABLE IF EXISTS {TABLE}")


def _folded(line: bytes | str | None) -> str | None:
    if line is None:
        return None
    return fts.folded_text(line.encode() if isinstance(line, str) else line)


def register(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the function the index's triggers call."""
    conn.create_function(FUNCTION, 1, _folded, deterministic=True)


def exists(c: sqlite3.Connection) -> bool:
    return c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone() is not None


def create(c: sqlite3.Connection, *, rebuild: bool = False) -> None:
    """Create and fill the index (in the caller's write transaction); with ``rebuild``, drop
    it first. Nothing to do when it exists and ``rebuild`` is False."""
    if rebuild:
        drop(c)
    elif exists(c):
        return
    for statement in _CREATE:
        c.execute(statement)


def drop(c: sqlite3.Connection) -> bool:
    """Remove the index and its triggers (in the caller's write transaction); whether it existed."""
    had = exists(c)
    for statement in _DROP:
        c.execute(statement)
    return had


def candidates(c: sqlite3.Connection, expr: str) -> Iterator[tuple[int, int, bytes]]:
    """``(session id, seq, line)`` of the rows the FTS5 query ``expr`` finds."""
    yield from c.execute(f"SELECT m.session, m.seq, m.line FROM {TABLE} JOIN messages m ON m.rowid = {TABLE}.rowid "
                         f"WHERE {TABLE} MATCH ?", (expr,))


@dataclass
class Status:
    exists: bool
    rows: int = 0
    messages: int = 0
    #: Whether FTS5's own check of the table passed.
    healthy: bool = True


def status(c: sqlite3.Connection) -> Status:
    if not exists(c):
        return Status(False)
    rows = c.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
    messages = c.execute("SELECT count(*) FROM messages").fetchone()[0]
    try:
        c.execute(f"INSERT INTO {TABLE} ({TABLE}, rank) VALUES ('integrity-check', 1)")
        healthy = True
    except sqlite3.DatabaseError:
        healthy = False
    return Status(True, rows, messages, healthy)


__all__ = ["FUNCTION", "TABLE", "Status", "candidates", "create", "drop", "exists", "register", "status"]
