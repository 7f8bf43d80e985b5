"""The commands that look after a store: ``rm``, ``prune``, ``stats``, ``gc`` and ``repair``,
on a JSONL directory or a SQLite file (``verify`` is :mod:`.verify`).

Each ``cmd_*`` takes the parsed arguments and returns the exit status; failures are
raised (see :mod:`jsonl_sessions.cli.output`).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

from .. import _platform
from ..compaction import ORIGINAL_ID, CompactionPlan, CompactionReport
from ..display import clean
from ..errors import SessionStoreError
from ..jsonl.layout import TMP_SUFFIX, SessionFiles, classify
from ..jsonl.store import SessionStore, compaction_report, prune_report
from ..keys import key_to_stem
from ..sqlite import SqliteSessionStore
from .output import EXIT_FAILURE, EXIT_OK, PROG, err, iso, json_out, out, short, when
from .output import size as fmt_size
from .stores import existing_root, is_sqlite, open_concrete, open_path, open_sqlite, open_store


# -- rm --------------------------------------------------------------------------------------
def quarantine_files(root: str, stem: str) -> set[str]:
    """The names of the quarantine files a repair left for the session file stem ``stem``."""
    return {n for n in os.listdir(root) if classify(n) == ("quarantine", stem)}


def cmd_rm(args: argparse.Namespace) -> int:
    for key in args.keys:
        key_to_stem(key)  # every key valid before anything is removed
    store = open_store(args)
    status = EXIT_OK
    results: list[dict[str, Any]] = []  # --json: one object a key, in the order given
    for key in args.keys:
        with store.lock(key):
            if not store.session_exists(key):
                if not args.force:
                    err(f"error: session {key!r} does not exist")
                    status = EXIT_FAILURE
                results.append({"key": key, "removed": False, "reason": "missing", "kept": []})
                continue
            if not args.force:
                state = store.get_session_state(key)
                if state is not None and state.state == "running":
                    err(f"error: session {key!r} is running (turn {state.turn_id!r}); --force removes it anyway")
                    status = EXIT_FAILURE
                    results.append({"key": key, "removed": False, "reason": "running", "kept": []})
                    continue
            store.delete_session(key)
        kept = sorted(quarantine_files(store.root, key_to_stem(key))) if isinstance(store, SessionStore) else []
        results.append({"key": key, "removed": True, "reason": None, "kept": kept})
        if not args.json:
            out(f"removed session {key!r}" + (f" (kept its quarantine files: {', '.join(kept)})" if kept else ""))
    if args.json:
        json_out(results)
    return status


# -- stats ----------------------------------------------------------------------------------
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
        return run_sqlite_stats(open_sqlite(args), as_json=args.json)
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
        "oldest_activity": iso(min(activity)) if activity else None,
        "newest_activity": iso(max(activity)) if activity else None,
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


# -- prune ----------------------------------------------------------------------------------
def cmd_prune(args: argparse.Namespace) -> int:
    """``prune --older-than HOURS``: the store's ``cleanup_stale`` (sessions with no activity
    for that long; never a running one), or with ``--dry-run`` the sessions it would delete."""
    store = open_store(args)
    hours: float = args.older_than
    cutoff = datetime.now(timezone.utc) - timedelta(hours=hours)
    idle = [md for md in store.list_sessions_with_metadata() if md.updated_at is not None and md.updated_at < cutoff]
    running = [md.key for md in idle if md.state == "running"]
    stale = [md for md in idle if md.state != "running"]
    if args.dry_run:
        removed, count = stale, len(stale)
    else:  # the store decides again, each session under its guard: the list is what is gone now
        count = store.cleanup_stale(hours)
        removed = [md for md in stale if not store.session_exists(md.key)]
    if args.json:
        json_out({"dry_run": args.dry_run, "older_than_hours": hours, "cutoff": iso(cutoff), "removed": count,
                  "sessions": [{"key": md.key, "last_activity": iso(md.updated_at)} for md in removed],
                  "kept_running": running})
        return EXIT_OK
    for md in removed:
        out(f"{'would remove' if args.dry_run else 'removed'} {clean(md.key, one_line=True)}  "
            f"(last activity {when(md.updated_at)})")
    verb = "would remove" if args.dry_run else "removed"
    span = f"{hours:g} hour{'' if hours == 1 else 's'}"
    out(f"{verb} {_plural(count, 'session')} with no activity for {span}"
        + (f"; kept {_plural(len(running), 'running session')} idle as long: "
           f"{', '.join(clean(k, one_line=True) for k in running)}" if running else ""))
    return EXIT_OK


# -- gc -------------------------------------------------------------------------------------
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


# -- repair ---------------------------------------------------------------------------------
def cmd_repair(args: argparse.Namespace) -> int:
    """``repair KEY`` on the store the arguments name."""
    store = open_concrete(args)
    if getattr(args, "json", False):
        json_out(report_json(store.compaction_report(args.key, repair=True) if isinstance(store, SqliteSessionStore)
                             else compaction_report(store, args.key, repair=True)))
        return EXIT_OK
    if isinstance(store, SqliteSessionStore):
        return run_sqlite_repair(store, args.key)
    return run_repair(store, args.key)


def report_json(report: CompactionReport) -> dict[str, Any]:
    """``repair --json``: one object, the same keys for every backend."""
    plan = report.plan
    return {"key": report.key, "changed": plan.changed, "kept": len(plan.kept),
            "dropped": [{"line": d.line, "offset": d.offset, "reason": d.reason, "corrupt": d.corrupt}
                        for d in plan.dropped],
            "renumbered": [{"line": d.line, "offset": d.offset, "reason": d.reason} for d in plan.renumbered],
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
        out(f"dropped {duplicates} exact cop{'ies' if duplicates != 1 else 'y'} of an earlier line")
    _renumbered(plan)
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


def _renumbered(plan: CompactionPlan) -> None:
    """Print the lines a repair kept under a new id."""
    moved = plan.renumbered
    if moved:
        out(f"gave {len(moved)} line{'s' if len(moved) != 1 else ''} a new id (a repeated or out-of-order id; "
            f"the old one is kept in the field {ORIGINAL_ID!r}):")
        for line in moved[:20]:
            out(f"  line {line.line}, byte offset {line.offset}: {clean(line.reason, one_line=True)}")
        if len(moved) > 20:
            out(f"  and {len(moved) - 20} more")


# -- repair on a SQLite store ---------------------------------------------------------------
def run_sqlite_repair(store: SqliteSessionStore, key: str) -> int:
    """``repair KEY`` on a SQLite store: ``compact(key, repair=True)`` with its report."""
    report = store.compaction_report(key, repair=True)
    plan = report.plan
    if not plan.dropped and not plan.renumbered:
        out(f"session {key!r} needs no repair: {len(plan.kept)} messages, nothing changed")
        return EXIT_OK
    out(f"repaired session {key!r}: kept {len(plan.kept)} messages, set aside {report.dropped} row"
        f"{'s' if report.dropped != 1 else ''} (corrupt, or an exact copy of an earlier one)")
    for bad in plan.dropped[:20]:
        out(f"  line {bad.line}, byte offset {bad.offset}: {clean(bad.reason, one_line=True)}: {short(bad.text, 60)}")
    if len(plan.dropped) > 20:
        out(f"  and {len(plan.dropped) - 20} more")
    _renumbered(plan)
    if report.quarantine is not None:
        out(f"every original row is saved in {report.quarantine} (SELECT * FROM quarantine WHERE session_key = ...)")
    return EXIT_OK


# -- stats on a SQLite store ----------------------------------------------------------------
def run_sqlite_stats(store: SqliteSessionStore, *, as_json: bool) -> int:
    """``stats`` on a SQLite store: sessions by state, messages, bytes, the file's size,
    quarantined rows. Reads metadata and the session rows only."""
    sessions = store.list_sessions_with_metadata()
    states = Counter(md.state or "none" for md in sessions)
    activity = [md.updated_at for md in sessions if md.updated_at is not None]
    files = [store.root + suffix for suffix in ("", "-wal", "-shm") if os.path.exists(store.root + suffix)]
    conn = sqlite3.connect(f"file:{store.root}?mode=ro", uri=True)
    try:
        quarantined = conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]
    finally:
        conn.close()
    result: dict[str, Any] = {
        "root": store.root,
        "backend": "sqlite",
        "sessions": len(sessions),
        "states": dict(sorted(states.items())),
        "messages": sum(md.message_count for md in sessions),
        "transcript_bytes": sum(md.size_bytes for md in sessions),
        "store_files": len(files),
        "store_bytes": sum(os.path.getsize(f) for f in files),
        "quarantined_rows": quarantined,
        "oldest_activity": iso(min(activity)) if activity else None,
        "newest_activity": iso(max(activity)) if activity else None,
    }
    if as_json:
        json_out(result)
        return EXIT_OK
    state_text = ", ".join(f"{states[s]} {'without a state' if s == 'none' else s}"
                           for s in ("running", "idle", "error", "none") if states[s])
    rows = [
        ("store", f"{store.root} (SQLite)"),
        ("sessions", f"{result['sessions']}" + (f" ({state_text})" if sessions else "")),
        ("messages", str(result["messages"])),
        ("messages bytes", fmt_size(result["transcript_bytes"])),
        ("all files", f"{fmt_size(result['store_bytes'])} in {len(files)} files (database, WAL)"),
        ("quarantined rows", str(quarantined)),
        ("corrupt rows", f"not counted (a full read): run `{PROG} verify`"),
        ("activity", f"{when(min(activity))} .. {when(max(activity))}" if activity else "-"),
    ]
    for label, value in rows:
        out(f"{label + ':':<18}{clean(value, one_line=True)}")
    return EXIT_OK
