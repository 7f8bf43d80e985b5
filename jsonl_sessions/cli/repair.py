"""``jsonl-sessions repair``: set a session's corrupt lines aside and rewrite it, then say
what was kept, dropped and saved where."""

from __future__ import annotations

import argparse
from typing import Any

from ..compaction import CompactionReport
from ..jsonl.store import SessionStore, compaction_report
from ..sqlite import SqliteSessionStore
from . import sqlite as sqlite_cli
from .common import EXIT_OK, json_out, open_concrete, out
from .format import clean, short


def cmd_repair(args: argparse.Namespace) -> int:
    """``repair KEY`` on the store the arguments name."""
    store = open_concrete(args)
    if getattr(args, "json", False):
        json_out(report_json(store.compaction_report(args.key, repair=True) if isinstance(store, SqliteSessionStore)
                             else compaction_report(store, args.key, repair=True)))
        return EXIT_OK
    if isinstance(store, SqliteSessionStore):
        return sqlite_cli.run_repair(store, args.key)
    return run_repair(store, args.key)


def report_json(report: CompactionReport) -> dict[str, Any]:
    """``repair --json``: one object, the same keys for every backend."""
    plan = report.plan
    return {"key": report.key, "changed": plan.changed, "kept": len(plan.kept),
            "dropped": [{"line": d.line, "offset": d.offset, "reason": d.reason, "corrupt": d.corrupt}
                        for d in plan.dropped],
            "torn_bytes": plan.torn, "bom": plan.bom, "recovered": report.recovered,
            "quarantine": report.quarantine, "torn_saved": report.torn_saved}


def run_repair(store: SessionStore, key: str) -> int:
    """Repair session ``key`` (``compact(key, repair=True)`` under the session's guard) and
    print its report; returns the exit status. Raises SessionNotFoundError, UnsafePathError."""
    report = compaction_report(store, key, repair=True)  # taking the guard completes an interrupted write first
    plan = report.plan
    if report.recovered:
        out("completed an interrupted write left by a process that died")
    if not plan.changed:
        out(f"session {key!r} needs no repair: {len(plan.kept)} messages, nothing changed")
        return EXIT_OK
    out(f"repaired session {key!r}: kept {len(plan.kept)} messages")
    corrupt = [d for d in plan.dropped if d.corrupt]
    if corrupt:
        out(f"set aside {len(corrupt)} corrupt line{'s' if len(corrupt) != 1 else ''}:")
        for bad in corrupt[:20]:
            out(f"  line {bad.line}, byte offset {bad.offset}: {clean(bad.reason, one_line=True)}: {short(bad.text, 60)}")
        if len(corrupt) > 20:
            out(f"  and {len(corrupt) - 20} more")
    duplicates = len(plan.dropped) - len(corrupt)
    if duplicates > 0:
        out(f"dropped {duplicates} line{'s' if duplicates != 1 else ''} repeating an earlier id "
            "(the first line with an id is kept)")
    if plan.torn:
        out(f"dropped a torn tail of {plan.torn} bytes (a last line without its newline: an append that never "
            "completed, or a line cut short)")
        if report.torn_saved is not None and report.torn_saved != report.quarantine:
            out(f"its bytes are saved in {report.torn_saved}")
    if plan.bom:
        out("removed a leading byte-order mark")
    if report.quarantine is not None:
        out(f"the original bytes are saved in {report.quarantine}")
    return EXIT_OK
