"""How ``jsonl-sessions verify`` shows a store's
:class:`~jsonl_sessions.verification.VerifyReport`: text for people (:func:`render`),
JSON for programs (:func:`to_json`, each problem with a hint), and the terminal
progress bar (:class:`Progress`)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any, TextIO

from ..verification import Finding, VerifyReport
from .output import size as fmt_size

#: The progress bar appears (on a terminal) from this many sessions on.
PROGRESS_MIN_SESSIONS = 50

LABELS = {
    "torn-tail": "torn tail",
    "corrupt-line": "corrupt line",
    "id-order": "id out of order",
    "missing-sidecar": "missing sidecar",
    "corrupt-sidecar": "corrupt sidecar",
    "key-mismatch": "sidecar key mismatch",
    "orphan-sidecar": "orphan sidecar",
    "unknown-key": "unknown key",
    "temp-file": "leftover temp file",
    "pending-record": "pending roll-forward record",
    "odd-counter": "odd sequence counter",
    "permissions": "permissions",
    "symlink": "symlink",
    "not-regular": "not a regular file",
    "unreadable": "unreadable",
    "missing-session": "no such session",
    "quarantine": "quarantine file",
    "bom": "byte-order mark",
    "foreign": "not the store's",
    "busy": "write in progress",
    "sidecar-recreated": "sidecar made anew",
    # the database backends' kinds
    "integrity": "integrity check failed",
    "orphan-rows": "rows without a session",
    "corrupt-meta": "corrupt metadata",
    "positions": "row positions out of order",
    "counters": "counters disagree",
    "corrupt-row": "corrupt row",
    "index-mismatch": "index columns disagree",
    "schema": "schema version",
    "meta-columns": "metadata columns disagree",
}

HINTS = {
    "torn-tail": "an append that never completed (a crash mid-write), or a last line whose newline was cut: "
                 "reads ignore it and the next write to the session removes it, after saving its bytes in a "
                 "quarantine file; `jsonl-sessions repair KEY` does that now",
    "corrupt-line": "`jsonl-sessions repair KEY` keeps every line that parses, after saving the original bytes "
                    "in a quarantine file next to the transcript",
    "id-order": "ids must strictly increase down the file (lookups by id binary-search them): "
                "`jsonl-sessions repair KEY` drops exact duplicates and sets conflicting ones aside; for other "
                "disorder, export the session, fix the ids and import it with --new-ids",
    "missing-sidecar": "the messages are intact (the transcript is the truth); the next metadata write recreates "
                       "the sidecar, but a long key (a file name with ~) is lost without it",
    "sidecar-recreated": "nothing to repair: set the name, alias, owner or context again if they are wanted "
                         "(a backup of the old sidecar restores them all)",
    "corrupt-sidecar": "metadata writes refuse until it is fixed; messages are unaffected: fix the JSON, or "
                       "delete the file (name, state and attribution are lost; the session keeps loading)",
    "key-mismatch": "the sidecar describes another key (copied or renamed by hand): fix its \"key\" or delete it",
    "orphan-sidecar": "left by an interrupted create, fork or delete: `jsonl-sessions verify --fix` (or `gc`) "
                      "removes it now; so does the next create or delete of that key, or cleanup_stale; "
                      "safe to delete",
    "unknown-key": "a long key lives only in its sidecar: without a readable one the session is invisible "
                   "to `ls` (its messages are in the file)",
    "temp-file": "left by an interrupted atomic replace: the original is intact; the next command that opens "
                 "the store (e.g. `jsonl-sessions ls`), or `jsonl-sessions verify --fix`, removes it; safe to delete",
    "pending-record": "a committed multi-step write whose process died: the next access to the session "
                      "(e.g. `jsonl-sessions verify --fix`) completes it",
    "odd-counter": "an in-place write whose process died: the next access to the session "
                   "(e.g. `jsonl-sessions verify --fix`) settles it",
    "permissions": "`chmod 600 FILE` (`chmod 700` for the store directory): sessions may hold private "
                   "conversations",
    "symlink": "the store never follows symlinks, so that session is unreadable: replace the link with the file",
    "not-regular": "the store only uses regular files under these names: move it away",
    "unreadable": "check the file's owner and permissions",
    "missing-session": "check the key with `jsonl-sessions ls`",
    "corrupt-row": "`jsonl-sessions repair KEY` sets the session's corrupt rows aside (every original row is kept "
                   "in the quarantine table)",
    "corrupt-meta": "metadata writes refuse until it is fixed; messages are unaffected",
    "integrity": "the database file itself is damaged (SQLite's own check): restore it from a backup",
}


def location(f: Finding, root: str) -> str:
    """Where a finding is: ``file:line`` in a store directory, ``session 'k' line N`` in a
    database, else the store itself."""
    if f.file:
        return f"{f.file}:{f.line}" if f.line is not None else f.file
    if f.key is not None:
        return f"session {f.key!r}" + (f" line {f.line}" if f.line is not None else "")
    return root


def label(kind: str) -> str:
    return LABELS.get(kind, kind)


def to_json(report: VerifyReport) -> dict[str, Any]:
    """The report's JSON form, each problem with its ``hint`` (how to fix it; None for a note)."""
    found = report.to_json()
    for name in ("problems", "notes", "fixed"):
        for item in found[name]:
            item["hint"] = HINTS.get(item["kind"]) if item["severity"] == "problem" else None
    return found


def render(report: VerifyReport) -> list[str]:
    """The report for people: what was fixed, one line per finding (``where: kind: what``),
    a summary, and how to fix each kind of problem found."""
    root = report.location
    lines = [f"{location(f, root)}: fixed: {label(f.kind)}" + (f" (session {f.key!r})" if f.key is not None else "")
             for f in report.fixed]
    for f in report.problems + report.notes:
        name = label(f.kind) if f.problem else "note: " + label(f.kind)
        about = f" (session {f.key!r})" if f.key is not None and f.file else ""
        lines.append(f"{location(f, root)}: {name}: {f.message}{about}")
    checked = (f"{report.sessions} session{'s' if report.sessions != 1 else ''}, "
               f"{report.messages} message{'s' if report.messages != 1 else ''}, {fmt_size(report.bytes)}")
    if report.ok:
        lines.append(f"ok: {checked} in {root}; no problems")
        return lines
    kinds = Counter(f.kind for f in report.problems)
    counts = ", ".join(f"{n} {label(k)}" for k, n in kinds.items())
    total = len(report.problems)
    lines.append(f"{total} problem{'s' if total != 1 else ''} ({counts}) in {root}; checked {checked}")
    lines.append("to fix:")
    lines.extend(f"  {label(k)}: {HINTS[k]}" for k in kinds if k in HINTS)
    return lines


class Progress:
    """A one-line progress bar on a terminal (stderr), called as ``progress(done, total)``
    by the store's verify after each session; silent when not a terminal or for few
    sessions. Redrawn at most ten times a second, erased by :meth:`finish`."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._last = 0.0
        self._drawn = False
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False

    def __call__(self, done: int, total: int) -> None:
        if not self.tty or total < PROGRESS_MIN_SESSIONS:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done < total:
            return
        self._last = now
        self._drawn = True
        filled = 30 * done // max(total, 1)
        self.stream.write(f"\rverify [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} sessions")
        self.stream.flush()

    def finish(self) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * 70 + "\r")
            self.stream.flush()
            self._drawn = False
