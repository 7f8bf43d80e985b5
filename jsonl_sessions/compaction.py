"""What compaction keeps and drops of a session's lines, and the report of a compaction:
the rules every backend's ``compact`` follows, pure (no I/O).

Kept: every line that parses, in order, except an exact repeat of an earlier line with
the same id. A problem (a line that does not parse, or a second line with an earlier
line's id but other bytes) refuses a compaction; a repair drops it (of lines sharing an
id it keeps the first) after saving the original bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import codec
from .corruption import BOM, BadLine


@dataclass(frozen=True)
class DroppedLine:
    """A complete line compaction drops: 1-based ``line``, byte ``offset``, ``reason``, and
    the start of its text (for a report)."""

    line: int
    offset: int
    reason: str
    text: str
    corrupt: bool  # False: a repeat of an earlier line's id


@dataclass(frozen=True)
class CompactionPlan:
    """What compaction keeps of a transcript's bytes and what it drops."""

    kept: tuple[bytes, ...]  # the kept lines, each with its newline
    dropped: tuple[DroppedLine, ...]
    problem: DroppedLine | None  # the first line only a repair may drop (None: compact may)
    torn: int  # bytes of torn tail dropped
    bom: bool  # a leading byte-order mark dropped

    @property
    def changed(self) -> bool:
        """Whether compaction would rewrite the file."""
        return bool(self.dropped) or self.bom or self.torn > 0


@dataclass(frozen=True)
class CompactionReport:
    """What a compaction did: the plan it carried out, where the original bytes were saved
    (repair only: a file, or the SQLite backend's quarantine table), whether taking
    the guard first completed a write left by a process that died, and where the bytes
    of a dropped torn tail were saved (the repair's copy of the whole file, or a
    quarantine file of their own; None when no torn tail was dropped)."""

    key: str
    plan: CompactionPlan
    quarantine: str | None
    recovered: bool
    torn_saved: str | None = None

    @property
    def dropped(self) -> int:
        return len(self.plan.dropped)


def plan_lines(lines: Iterable[bytes], offset: int = 0) -> CompactionPlan:
    """The plan for complete ``lines`` (without newlines; the first at byte ``offset``).
    O(total bytes)."""
    kept: list[bytes] = []
    dropped: list[DroppedLine] = []
    problem: DroppedLine | None = None
    seen: dict[str, bytes] = {}
    for number, line in enumerate(lines, 1):
        drop = None
        try:
            record = codec.decode_record(line)
        except ValueError as exc:
            corrupt = BadLine.of(number, offset, exc)
            drop = DroppedLine(corrupt.line, corrupt.offset, corrupt.reason, _excerpt(line), True)
        else:
            mid = record.get("id") or ""
            first = seen.get(mid) if mid else None
            if first is None:
                if mid:
                    seen[mid] = line
                kept.append(line + b"\n")
            else:
                drop = DroppedLine(number, offset, f"id {mid!r} is already used by an earlier, different line",
                                   _excerpt(line), False)
                if first == line:  # an exact repeat: compact may drop it
                    dropped.append(drop)
                    drop = None
        if drop is not None:
            dropped.append(drop)
            problem = problem or drop
        offset += len(line) + 1
    return CompactionPlan(tuple(kept), tuple(dropped), problem, 0, False)


def plan_compaction(data: bytes) -> CompactionPlan:
    """What compaction keeps of transcript bytes ``data`` (:func:`plan_lines` of its
    complete lines); a torn tail and a leading BOM are dropped too. O(len(data)), no I/O."""
    start = len(BOM) if data.startswith(BOM) else 0
    committed = data.rfind(b"\n") + 1
    lines = data[start : committed - 1].split(b"\n") if committed > start else []
    plan = plan_lines(lines, start)
    return CompactionPlan(plan.kept, plan.dropped, plan.problem, len(data) - committed, start > 0)


def _excerpt(line: bytes) -> str:
    return line[:200].decode("utf-8", "replace")


__all__ = ["CompactionPlan", "CompactionReport", "DroppedLine", "plan_compaction", "plan_lines"]
