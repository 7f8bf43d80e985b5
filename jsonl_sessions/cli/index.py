"""``jsonl-sessions index build|status|drop``: the optional full-text index of message search
(:mod:`jsonl_sessions.searchindex`). ``build`` creates it or brings it up to date
(``--rebuild``: from scratch), ``status`` says what it holds, ``drop`` deletes it. Every
search uses it while it exists; nothing is lost by dropping it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import orjson

from ..searchindex import IndexStatus, build_index, drop_index, index_status
from .output import EXIT_FAILURE, EXIT_OK, err, out
from .stores import open_concrete


def _show(args: argparse.Namespace, status: IndexStatus, extra: dict[str, object] | None = None) -> None:
    if args.json:
        data = {**dataclasses.asdict(status), **(extra or {})}
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8"))
        return
    if not status.exists:
        out(f"no index ({status.backend} store): searches scan")
    else:
        out(f"index: {status.where}")
        if status.entries >= 0:
            out(f"messages indexed: {status.entries}")
        out(f"size: {status.bytes} bytes")
        if status.backend == "jsonl":
            out(f"sessions changed since indexed: {status.stale_sessions} (the next search brings them up to date)")
            if status.dead_entries:
                out(f"entries of lines changed or removed: {status.dead_entries} (skipped; --rebuild drops them)")
    for name, value in (extra or {}).items():
        out(f"{name}: {value}")
    if status.problem:
        err(status.problem)


def cmd_index(args: argparse.Namespace) -> int:
    store = open_concrete(args)
    if args.action == "status":
        status = index_status(store)
        _show(args, status)
        return EXIT_FAILURE if status.problem else EXIT_OK
    if args.action == "drop":
        had = drop_index(store)
        if args.json:
            sys.stdout.write(orjson.dumps({"dropped": had}, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8"))
        else:
            out("index dropped" if had else "no index to drop")
        return EXIT_OK
    started = time.monotonic()
    status = build_index(store, rebuild=args.rebuild)
    _show(args, status, {"seconds": round(time.monotonic() - started, 3)})
    return EXIT_FAILURE if status.problem or not status.exists else EXIT_OK


__all__ = ["cmd_index"]
