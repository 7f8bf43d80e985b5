"""``SqliteSessionStore.verify()``: a read-only health check of the database file.

It runs in one read transaction and changes nothing. Checks, in order:

1. ``PRAGMA integrity_check``: SQLite's own check of the file (b-tree structure, page
   lists, index entries agreeing with their tables, NOT NULL / UNIQUE constraints);
2. orphan message rows (a ``session`` id no session row has);
3. per session: the ``meta`` object parses and names the session's key; the positions
   are dense (``seq`` 0..message_count-1); ``message_count`` and ``size_bytes`` agree with
   the rows; every row's line parses as a message, and its index columns (id,
   created_at, role, kind) agree with the line; ids strictly increase.

Cost: O(total bytes) (every line is decoded once, nothing kept).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import rows
from ..errors import CorruptMetadataError


@dataclass(frozen=True)
class Finding:
    """One problem: ``kind`` (a short tag, see :data:`KINDS`), the session's key (None for
    the file as a whole), the 1-based line (row position + 1) when it is about a row."""

    kind: str
    key: str | None
    detail: str
    line: int | None = None


@dataclass(frozen=True)
class VerifyReport:
    """What :meth:`SqliteSessionStore.verify` found. ``ok``: no finding at all."""

    path: str
    sessions: int
    messages: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings


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
}


def verify(conn: sqlite3.Connection, path: str) -> VerifyReport:
    """Check the open database (inside a read transaction); see the module docstring."""
    findings: list[Finding] = []
    for (result,) in conn.execute("PRAGMA integrity_check"):
        if result != "ok":
            findings.append(Finding("integrity", None, str(result)))
    orphans = conn.execute("SELECT count(*) FROM messages WHERE session NOT IN (SELECT id FROM sessions)").fetchone()[0]
    if orphans:
        findings.append(Finding("orphan-rows", None, f"{orphans} message row(s) without a session"))
    sessions = conn.execute("SELECT id, key, meta, message_count, size_bytes FROM sessions ORDER BY key").fetchall()
    total = 0
    for sid, key, meta, count, size in sessions:
        try:
            rows.decode_meta(meta, key, path)
        except CorruptMetadataError as exc:
            findings.append(Finding("corrupt-meta", key, exc.reason or str(exc)))
        query = "SELECT seq, id, created_at, role, kind, line FROM messages WHERE session = ? ORDER BY seq"
        findings.extend(check_rows(conn.execute(query, (sid,)), key, count, size))
        total += count
    return VerifyReport(path, len(sessions), total, findings)


def check_rows(found: Iterable[tuple[int, Any, Any, Any, Any, bytes]], key: str, count: int,
               size: int) -> Iterator[Finding]:
    """The findings about one session's rows ``(seq, id, created_at, role, kind, line)`` in
    position order, with its recorded ``count`` and ``size`` (shared by the database backends)."""
    n = 0
    nbytes = 0
    previous = ""
    for seq, mid, created, role, kind, line in found:
        if seq != n:
            yield Finding("positions", key, f"row at position {n} has seq {seq}", n + 1)
            n = seq
        n += 1
        nbytes += len(line) + 1
        try:
            message = rows.decode(line)
        except ValueError as exc:
            yield Finding("corrupt-row", key, str(exc) or type(exc).__name__, seq + 1)
            continue
        if (mid, created, role, kind) != rows.index_of(line):
            yield Finding("index-mismatch", key, f"columns {(mid, created, role, kind)!r} but the line says "
                          f"{rows.index_of(line)!r}", seq + 1)
        if message.id:
            if message.id <= previous:
                yield Finding("id-order", key, f"id {message.id!r} after {previous!r}", seq + 1)
            previous = message.id
    if (n, nbytes) != (count, size):
        yield Finding("counters", key, f"recorded {count} rows / {size} bytes, found {n} / {nbytes}")
