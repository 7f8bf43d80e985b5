"""``jsonl-sessions gc``: remove what sessions that no longer exist left behind: their lock
files, orphan sidecars and temp files, each under its session's guard (busy sessions are
skipped, live sessions are never touched)."""

from __future__ import annotations

import argparse
import os

from ..jsonl.store import SessionStore, prune_report
from .common import EXIT_OK, is_sqlite, json_out, open_concrete, out


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def cmd_gc(args: argparse.Namespace) -> int:
    """``gc`` on the store the arguments name; returns the exit status."""
    store = open_concrete(args)
    if is_sqlite(args) or not isinstance(store, SessionStore):
        out("nothing to collect: a SQLite store keeps no files per session")
        return EXIT_OK
    report = prune_report(store)
    if args.json:
        json_out({"locks": list(report.locks), "sidecars": list(report.sidecars), "temps": list(report.temps)})
        return EXIT_OK
    if not report.removed:
        out(f"nothing to collect in {store.root}")
        return EXIT_OK
    out(f"removed {_plural(len(report.locks), 'lock file')}, {_plural(len(report.sidecars), 'orphan sidecar')} "
        f"and {_plural(len(report.temps), 'temp file')} of sessions that no longer exist")
    for path in report.removed:
        out(f"  {os.path.basename(path)}")
    return EXIT_OK
