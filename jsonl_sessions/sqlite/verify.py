"""``SqliteSessionStore.verify()``: a read-only health check of the database file.

It runs in one read transaction and changes nothing. Checks, in order:

1. ``PRAGMA integrity_check``: SQLite's own check of the file (b-tree structure, page
   lists, index entries agreeing with their tables, NOT NULL / UNIQUE constraints);
2. orphan message rows (a ``session`` id no session row has);
3. per session (every one, or those named: a named one that does not exist is a
   ``missing-session`` finding): the ``meta`` object parses and names the session's
   key; the positions are dense (``seq`` 0..message_count-1); ``message_count`` and ``size_bytes`` agree with
   the rows; every row's line parses as a message, and its index columns (id,
   created_at, role, kind) agree with the line; ids strictly increase.

Every finding is a problem (:class:`~jsonl_sessions.verification.Finding`, ``file`` ""
for the database file, ``line`` the row position + 1 and ``offset`` the row's byte
offset in the session's export); none is ``fixable``: ``fix=True`` changes nothing here
(``compact(key, repair=True)`` sets corrupt rows aside).

Cost: O(total bytes) (every line is decoded once, nothing kept).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

from .. import rows
from ..errors import CorruptMetadataError
from ..ids import IdOrder
from ..verification import Finding, VerifyReport, missing_session

#: Every finding kind, with what it means.
KINDS = {
    "integrity": "PRAGMA integrity_check reported a damaged file",
    "orphan-rows": "message rows whose session does not exist",
    "corrupt-meta": "a session's metadata does not parse",
    "positions": "the positions (seq) of a session's rows are not 0..message_count-1",
    "counters": "message_count / size_bytes do not agree with the rows",
    "corrupt-row": "a row's line does not parse as a message",
    "index-mismatch": "a row's index columns do not agree with its line",
    "id-order": "ids do not strictly increase",
    "missing-session": "a session asked for does not exist",
}


def verify(conn: sqlite3.Connection, path: str, keys: list[str] | None = None) -> VerifyReport:
    """Check the open database (inside a read transaction), every session or only
    ``keys`` (already validated); see the module docstring."""
    findings: list[Finding] = []
    for (result,) in conn.execute("PRAGMA integrity_check"):
        if result != "ok":
            findings.append(Finding("integrity", str(result)))
    orphans = conn.execute("SELECT count(*) FROM messages WHERE session NOT IN (SELECT id FROM sessions)").fetchone()[0]
    if orphans:
        findings.append(Finding("orphan-rows", f"{orphans} message row(s) without a session"))
    query = "SELECT id, key, meta, message_count, size_bytes FROM sessions"
    if keys is None:
        sessions = conn.execute(query + " ORDER BY key").fetchall()
    else:
        sessions = []
        for key in keys:
            found = conn.execute(query + " WHERE key = ?", (key,)).fetchone()
            if found is None:
                findings.append(missing_session(key))
            else:
                sessions.append(found)
    total = nbytes = 0
    for sid, key, meta, count, size in sessions:
        try:
            rows.decode_meta(meta, key, path)
        except CorruptMetadataError as exc:
            findings.append(Finding("corrupt-meta", exc.reason or str(exc), key))
        query = "SELECT seq, id, created_at, role, kind, line FROM messages WHERE session = ? ORDER BY seq"
        findings.extend(check_rows(conn.execute(query, (sid,)), key, count, size))
        total += count
        nbytes += size
    return VerifyReport(path, "sqlite", len(sessions), total, nbytes, findings)


def check_rows(found: Iterable[tuple[int, Any, Any, Any, Any, bytes]], key: str, count: int,
               size: int) -> Iterator[Finding]:
    """The findings about one session's rows ``(seq, id, created_at, role, kind, line)`` in
    position order, with its recorded ``count`` and ``size`` (shared by the database backends)."""
    n = 0
    nbytes = 0
    order = IdOrder()
    for seq, mid, created, role, kind, line in found:
        if seq != n:
            yield Finding("positions", f"row at position {n} has seq {seq}", key, line=n + 1)
            n = seq
        n += 1
        offset = nbytes
        nbytes += len(line) + 1
        try:
            message = rows.decode(line)
        except ValueError as exc:
            yield Finding("corrupt-row", str(exc) or type(exc).__name__, key, line=seq + 1, offset=offset)
            continue
        if (mid, created, role, kind) != rows.index_of(line):
            yield Finding("index-mismatch", f"columns {(mid, created, role, kind)!r} but the line says "
                          f"{rows.index_of(line)!r}", key, line=seq + 1, offset=offset)
        why = order.check(message.id)
        if why is not None:
            yield Finding("id-order", why, key, line=seq + 1, offset=offset)
    if (n, nbytes) != (count, size):
        yield Finding("counters", f"recorded {count} rows / {size} bytes, found {n} / {nbytes}", key)
