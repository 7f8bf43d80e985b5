"""``import --from claude-code|codex PATH`` and ``export KEY --to claude-code``: the
command-line side of :mod:`jsonl_sessions.foreign.transfer` (which does the work)."""

from __future__ import annotations

import argparse
import os
import sys

import orjson

from ..errors import SessionExistsError
from ..foreign.files import write_jsonl
from ..foreign.transfer import Imported, export_claude_code, import_claude_code, import_codex, iter_codex_rollouts
from .common import EXIT_FAILURE, EXIT_OK, CliError, UsageError, err, nl_out, open_store, out

__all__ = ["export_to", "import_from"]


def import_from(args: argparse.Namespace) -> int:
    """``import --from FORMAT PATH``: one line per imported file; exit 1 when a file failed."""
    if args.file is not None:
        raise UsageError("with --from, give only PATH")
    path = args.key
    if not os.path.exists(path):
        raise CliError(f"no such file or directory: {path}")
    store = open_store(args, create=True)
    if args.source == "claude-code":
        if args.append:
            raise UsageError("--append is implied for claude-code: entries already stored (by uuid) are skipped")
        for done in import_claude_code(store, path):
            _report(done, args.json)
        return EXIT_OK
    files = list(iter_codex_rollouts(path)) if os.path.isdir(path) else [path]
    if not files:
        raise CliError(f"no Codex rollout (*.jsonl) under {path}")
    status = EXIT_OK
    for rollout in files:
        try:
            _report(import_codex(store, rollout, append=args.append), args.json)
        except (ValueError, OSError, SessionExistsError) as exc:  # reported; the other files still go in
            err(f"error: {rollout}: {exc}")
            status = EXIT_FAILURE
    return status


def _report(done: Imported, as_json: bool) -> None:
    if as_json:  # one object a file, as each is imported
        nl_out([{"key": done.key, "written": done.written, "left_out": done.left_out,
                 "bad_lines": list(done.bad_lines), "torn": done.torn}])
        return
    notes = [f"{done.left_out} left out"] if done.left_out else []
    if done.bad_lines:
        notes.append(f"{len(done.bad_lines)} unreadable line(s) skipped (line {done.bad_lines[0]}...)")
    if done.torn:
        notes.append("a torn last line ignored")
    out(f"imported {done.written} lines into {done.key!r}" + (f" ({'; '.join(notes)})" if notes else ""))


def export_to(args: argparse.Namespace) -> int:
    """``export KEY --to claude-code [-o FILE] [--session-id ID]``."""
    if args.to is None:
        raise UsageError("-o and --session-id apply with --to")
    store = open_store(args)
    export = export_claude_code(store, args.key, session_id=args.session_id, lenient=args.lenient)
    if args.output is None:
        sys.stdout.buffer.write(b"".join(orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE) for e in export.entries))
        sys.stdout.flush()
    else:
        target = args.output
        if os.path.isdir(target):
            target = os.path.join(target, f"{export.session_id}.jsonl")
        write_jsonl(target, export.entries)
        out(f"wrote {len(export.entries)} entries of session {export.session_id} to {target}")
    if export.left_out:
        err(f"note: {export.left_out} message(s) with no Claude Code form left out")
    return EXIT_OK
