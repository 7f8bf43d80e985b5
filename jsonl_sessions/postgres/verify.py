"""``PostgresSessionStore.verify()``: a read-only health check of the store's schema.

It runs in one read-only snapshot and changes nothing. Checks: the schema version;
per session (every one, or those named: a named one that does not exist is a
``missing-session`` finding), in key order: the ``meta`` object parses and names the session's key; the
columns copied from it (``agent_alias``, ``principal_id``, ``state``) agree; and the
rows' checks shared with the SQLite backend (dense positions, counters, every line
parses, index columns agree with the line, ids strictly increase). An id column left
NULL for a line that repeats an earlier id (the unique id index cannot
hold it twice) or has none agrees with its line; a ``created_at`` past bigint is stored
clamped to bigint's largest value (as on SQLite), and a NULL left for it by schema
version 1 also agrees. Findings as in :mod:`jsonl_sessions.sqlite.verify` (all
problems, none fixable). Cost: O(total bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import rows, sidecar
from ..errors import CorruptMetadataError
from ..sqlite.verify import KINDS as SQLITE_KINDS
from ..sqlite.verify import check_rows
from ..verification import Finding, VerifyReport, missing_session
from .base import nul_back
from .db import Conn
from .schema import SCHEMA_VERSION, current_version

#: Every finding kind, with what it means.
KINDS = {**{k: v for k, v in SQLITE_KINDS.items() if k != "integrity"},
         "schema": "the schema's version is not the one this code writes",
         "meta-columns": "the columns copied from a session's metadata do not agree with it"}


def _normalised(got: Any) -> Iterator[tuple[int, Any, Any, Any, Any, bytes]]:
    seen: set[str] = set()
    for seq, col_id, created, col_role, col_kind, text in got:
        line = text.encode()
        mid, role, kind = nul_back(col_id), nul_back(col_role), nul_back(col_kind)
        line_id, line_created, _role, _kind = rows.index_of(line)
        if mid is None and (line_id == "" or line_id in seen):
            mid = line_id
        if created is None and line_created == rows.MAX_INTEGER:
            created = line_created  # written by schema version 1, which left a time past bigint NULL
        if line_id:
            seen.add(line_id)
        yield seq, mid, created, role, kind, line


def verify(c: Conn, s: str, where: str, keys: list[str] | None = None) -> VerifyReport:
    """Check the store in schema ``s`` (quoted) inside a read transaction, every session
    or only ``keys`` (already validated); see the module docstring."""
    findings: list[Finding] = []
    name = s[1:-1].replace('""', '"')
    version = current_version(c, s, name)
    if version != SCHEMA_VERSION:
        findings.append(Finding("schema", f"version {version}, expected {SCHEMA_VERSION}"))
    query = (f"SELECT id, key, meta, agent_alias, principal_id, state, message_count, size_bytes "
             f"FROM {s}.sessions")
    if keys is None:
        sessions = c.execute(query).fetchall()
    else:
        sessions = []
        for key in keys:
            found = c.execute(query + " WHERE key = %s", (key,)).fetchone()
            if found is None:
                findings.append(missing_session(key))
            else:
                sessions.append(found)
    sessions.sort(key=lambda r: r[1])
    total = nbytes = 0
    for sid, key, meta, alias, principal, state, count, size in sessions:
        try:
            obj = rows.decode_meta(meta, key, where)
        except CorruptMetadataError as exc:
            findings.append(Finding("corrupt-meta", exc.reason or str(exc), key))
        else:
            want = (sidecar.text(obj, "agent_alias"), sidecar.text(obj, "principal_id"), sidecar.state(obj))
            if (nul_back(alias), nul_back(principal), nul_back(state)) != want:
                findings.append(Finding("meta-columns", f"columns {(alias, principal, state)!r}, meta {want!r}", key))
        got = c.execute(f"SELECT seq, id, created_at, role, kind, line FROM {s}.messages WHERE session = %s "
                        "ORDER BY seq", (sid,))
        findings.extend(check_rows(_normalised(got), key, count, size))
        total += count
        nbytes += size
    return VerifyReport(where, "postgres", len(sessions), total, nbytes, findings)


__all__ = ["KINDS", "verify"]
