"""``jsonl-sessions stats``: totals for a store, from metadata, file stats and one byte per
transcript (corrupt lines need a full read, which is ``verify``)."""

from __future__ import annotations

import argparse
import os
from collections import Counter
from typing import Any

from .. import _platform
from ..errors import SessionStoreError
from ..jsonl.layout import TMP_SUFFIX, SessionFiles, classify
from . import sqlite as sqlite_cli
from .common import EXIT_OK, PROG, existing_root, is_sqlite, json_out, open_path, open_sqlite, out
from .format import clean, when
from .format import size as fmt_size


def _torn(root: str, key: str) -> bool:
    """Whether the transcript ends without a newline (reads one byte); False when it is
    missing, unreadable or not a regular file (the listing warned about it)."""
    try:
        opened = SessionFiles.of(root, key).open_transcript(os.O_RDONLY)
    except (OSError, SessionStoreError):
        return False
    if opened is None:
        return False
    fd, st = opened
    try:
        return st.st_size > 0 and _platform.pread(fd, 1, st.st_size - 1) != b"\n"
    except OSError:
        return False
    finally:
        _platform.close(fd)


def _temp_files(root: str) -> set[str]:
    return {n for n in os.listdir(root) if n.startswith(".") and n.endswith(TMP_SUFFIX)}


def _files(root: str) -> dict[str, int]:
    """Counts over the store's own files: how many and how many bytes, orphan sidecars,
    quarantine files (one ``scandir``; dot files, symlinks and foreign names skipped)."""
    files = total = quarantined = 0
    sidecars: set[str] = set()
    transcripts: set[str] = set()
    with os.scandir(root) as entries:
        for entry in entries:
            name = entry.name
            if not entry.is_file(follow_symlinks=False) or name.startswith("."):
                continue
            role, stem = classify(name) or ("", "")
            if role == "quarantine":
                quarantined += 1
            elif role == "sidecar":
                sidecars.add(stem)
            elif role == "transcript":
                transcripts.add(stem)
            elif role != "lock":
                continue
            files += 1
            total += entry.stat(follow_symlinks=False).st_size
    return {"store_files": files, "store_bytes": total, "orphan_sidecars": len(sidecars - transcripts),
            "quarantine_files": quarantined}


def cmd_stats(args: argparse.Namespace) -> int:
    """Print the store's totals, as text or (``--json``) one JSON object."""
    if is_sqlite(args):
        return sqlite_cli.run_stats(open_sqlite(args), as_json=args.json)
    root = existing_root(args)
    temps = _temp_files(root)  # before opening the store, which removes those of idle sessions
    store = open_path(root, sqlite=False, lock_timeout=args.lock_timeout)
    temps_removed = len(temps - _temp_files(root))
    sessions = store.list_sessions_with_metadata()
    states = Counter(md.state or "none" for md in sessions)
    activity = [md.updated_at for md in sessions if md.updated_at is not None]
    files = _files(root)
    result: dict[str, Any] = {
        "root": root,
        "sessions": len(sessions),
        "states": dict(sorted(states.items())),
        "messages": sum(md.message_count for md in sessions),
        "transcript_bytes": sum(md.size_bytes for md in sessions),
        "store_files": files["store_files"],
        "store_bytes": files["store_bytes"],
        "torn_tails": sum(_torn(root, md.key) for md in sessions),
        "temp_files": len(temps),
        "temp_files_removed": temps_removed,
        "orphan_sidecars": files["orphan_sidecars"],
        "quarantine_files": files["quarantine_files"],
        "corrupt_lines": None,  # needs a full read of every transcript: that is `verify`
        "oldest_activity": min(activity).isoformat() if activity else None,
        "newest_activity": max(activity).isoformat() if activity else None,
    }
    if args.json:
        json_out(result)
        return EXIT_OK
    state_text = ", ".join(f"{states[s]} {'without a state' if s == 'none' else s}"
                           for s in ("running", "idle", "error", "none") if states[s])
    activity_text = f"{when(min(activity))} .. {when(max(activity))}" if activity else "-"
    _render(result, state_text, activity_text)
    return EXIT_OK


def _render(result: dict[str, Any], state_text: str, activity_text: str) -> None:
    temps, removed = result["temp_files"], result["temp_files_removed"]
    rows = [
        ("store", result["root"]),
        ("sessions", f"{result['sessions']}" + (f" ({state_text})" if result["sessions"] else "")),
        ("messages", str(result["messages"])),
        ("transcripts", fmt_size(result["transcript_bytes"])),
        ("all files", (f"{fmt_size(result['store_bytes'])} in {result['store_files']} files "
                       "(transcripts, sidecars, locks, quarantine)")),
        ("torn tails", str(result["torn_tails"])),
        ("temp files", f"{temps}" + (f" (left by interrupted writes; {removed} removed just now by "
                                     "opening the store)" if temps else "")),
        ("orphan sidecars", str(result["orphan_sidecars"])),
        ("quarantine files", str(result["quarantine_files"])),
        ("corrupt lines", f"not counted (a full read): run `{PROG} verify`"),
        ("activity", activity_text),
    ]
    for label, value in rows:
        out(f"{label + ':':<18}{clean(value, one_line=True)}")
