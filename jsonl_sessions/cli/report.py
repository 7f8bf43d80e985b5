"""What ``jsonl-sessions verify`` found, and how it is shown: :class:`Finding`,
:class:`Report` (text for people, JSON for programs) and the terminal progress bar."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

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
}


@dataclass
class Finding:
    """One thing verify found: a problem (exit status 1) or a note."""

    kind: str
    file: str  # the name inside root; "" for root itself
    message: str
    key: str | None = None
    line: int | None = None
    offset: int | None = None
    problem: bool = True

    def location(self, root: str) -> str:
        where = self.file or root
        return f"{where}:{self.line}" if self.line is not None else where

    def to_json(self, root: str) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "file": self.file,
            "path": os.path.join(root, self.file) if self.file else root,
            "key": self.key,
            "line": self.line,
            "offset": self.offset,
            "message": self.message,
            "hint": HINTS.get(self.kind) if self.problem else None,
        }


@dataclass
class Report:
    root: str
    sessions: int = 0
    messages: int = 0
    bytes: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if not f.problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "ok": self.ok,
            "sessions": self.sessions,
            "messages": self.messages,
            "bytes": self.bytes,
            "problems": [f.to_json(self.root) for f in self.problems],
            "notes": [f.to_json(self.root) for f in self.notes],
        }

    def render(self) -> list[str]:
        """The report for people: one line per finding (``file:line: kind: what``), a
        summary, and how to fix each kind of problem found."""
        lines = []
        for f in self.problems + self.notes:
            label = LABELS.get(f.kind, f.kind) if f.problem else "note: " + LABELS.get(f.kind, f.kind)
            about = f" (session {f.key!r})" if f.key is not None else ""
            lines.append(f"{f.location(self.root)}: {label}: {f.message}{about}")
        checked = (f"{self.sessions} session{'s' if self.sessions != 1 else ''}, "
                   f"{self.messages} message{'s' if self.messages != 1 else ''}, {fmt_size(self.bytes)}")
        if self.ok:
            lines.append(f"ok: {checked} in {self.root}; no problems")
            return lines
        kinds = Counter(f.kind for f in self.problems)
        counts = ", ".join(f"{n} {LABELS.get(k, k)}" for k, n in kinds.items())
        total = len(self.problems)
        lines.append(f"{total} problem{'s' if total != 1 else ''} ({counts}) in {self.root}; checked {checked}")
        lines.append("to fix:")
        lines.extend(f"  {LABELS.get(k, k)}: {HINTS[k]}" for k in kinds if k in HINTS)
        return lines


class Progress:
    """A one-line progress bar on a terminal (stderr); silent when not a terminal or for
    few sessions. Redrawn at most ten times a second, erased when done."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.done = 0
        self._last = 0.0
        try:
            tty = self.stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.active = tty and total >= PROGRESS_MIN_SESSIONS

    def step(self) -> None:
        self.done += 1
        if not self.active:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and self.done < self.total:
            return
        self._last = now
        filled = 30 * self.done // max(self.total, 1)
        self.stream.write(f"\rverify [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} sessions")
        self.stream.flush()

    def finish(self) -> None:
        if self.active:
            self.stream.write("\r" + " " * 70 + "\r")
            self.stream.flush()
