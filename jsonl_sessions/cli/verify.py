"""``jsonl-sessions verify``: the store's health check (fsck), shown.

The checks belong to the backends (``verify()`` of each store; the JSONL checks in
:mod:`jsonl_sessions.jsonl.verify`): this command opens the store, calls its verify and
renders the :class:`~jsonl_sessions.verification.VerifyReport` (text, or JSON with
``--json``; a progress bar on a terminal). A JSONL directory is checked without opening
a :class:`~jsonl_sessions.SessionStore` (opening one removes leftover temp files, which
would hide what this reports); with ``--fix`` a store is opened to clear what killed
writers left, each session under its guard. Transcripts are never touched.
"""

from __future__ import annotations

import argparse
import os

from ..base import DEFAULT_LOCK_TIMEOUT
from ..display import clean
from ..jsonl.store import fixer
from ..jsonl.verify import verify_directory
from ..location import ENV_ROOT, resolve_root
from ..verification import VerifyReport
from .output import EXIT_FAILURE, EXIT_OK, UsageError, json_out, out
from .report import Progress, render, to_json
from .stores import is_sqlite, open_sqlite


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify [KEY...]`` on the root the arguments name."""
    keys = args.keys or None
    if is_sqlite(args):
        store = open_sqlite(args)
        try:
            return show(store.verify(keys, fix=args.fix), as_json=args.json)
        finally:
            store.close()
    return run_verify(resolve_root(args.root), keys, as_json=args.json, fix=args.fix, lock_timeout=args.lock_timeout)


def run_verify(root: str, keys: list[str] | None, *, as_json: bool = False, fix: bool = False,
               lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT) -> int:
    """Check the store directory at ``root`` and print the report (text or JSON); 0 when
    healthy, 1 when problems were found. With ``fix``, first clear what killed writers
    left and report the store as it is after. A root that is not a directory is a usage
    error."""
    if not os.path.isdir(root):
        raise UsageError(f"no store at {root}: not a directory (give --root DIR or set {ENV_ROOT})")
    bar = Progress()
    try:
        report = verify_directory(root, keys, fix=fixer(root, lock_timeout) if fix else None, progress=bar)
    finally:
        bar.finish()
    return show(report, as_json=as_json)


def show(report: VerifyReport, *, as_json: bool) -> int:
    """Print ``report``; the exit status (0 healthy, 1 problems found)."""
    if as_json:
        json_out(to_json(report))
    else:
        for line in render(report):
            out(clean(line))
    return EXIT_OK if report.ok else EXIT_FAILURE
