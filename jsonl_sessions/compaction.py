"""What compaction keeps and drops of a session's lines, and the report of a compaction:
the rules every backend's ``compact`` follows, pure (no I/O).

Kept: every line that parses, in order, except an exact repeat of an earlier line with
the same id. A problem refuses a compaction: a line that does not parse, a second line
with an earlier line's id but other bytes, a ULID that does not sort after the ULID
before it (a line copied or moved out of order). A repair, after saving the original
bytes, drops the lines that do not parse and *renumbers* the others: such a line keeps
its place and every byte of its message, gets a new ULID between its neighbours' ids,
and keeps its old id in the extra field ``original_id`` (unless it already has one). Ids
that are not ULIDs (left by an earlier version or another tool) keep their place and are
passed over by the order, as strict reads pass over them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import codec, ids
from .corruption import BOM, BadLine


@dataclass(frozen=True)
class DroppedLine:
    """A complete line compaction drops: 1-based ``line``, byte ``offset``, ``reason``, and
    the start of its text (for a report)."""

    line: int
    offset: int
    reason: str
    text: str
    corrupt: bool  # False: a repeat of an earlier line's id, or an id out of order


@dataclass(frozen=True)
class CompactionPlan:
    """What compaction keeps of a transcript's bytes and what it drops or renumbers."""

    kept: tuple[bytes, ...]  # the kept lines, each with its newline
    dropped: tuple[DroppedLine, ...]
    problem: DroppedLine | None  # the first line only a repair may drop or renumber (None: compact may)
    torn: int  # bytes of torn tail dropped
    bom: bool  # a leading byte-order mark dropped
    renumbered: tuple[DroppedLine, ...] = ()  # kept with a new id (repair only; the old one in original_id)

    @property
    def changed(self) -> bool:
        """Whether compaction would rewrite the file."""
        return bool(self.dropped) or bool(self.renumbered) or self.bom or self.torn > 0


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


#: The extra field a renumbered line keeps its old id in.
ORIGINAL_ID = "original_id"


def plan_lines(lines: Iterable[bytes], offset: int = 0) -> CompactionPlan:
    """The plan for complete ``lines`` (without newlines; the first at byte ``offset``).
    O(total bytes)."""
    kept: list[bytes] = []
    dropped: list[DroppedLine] = []
    problem: DroppedLine | None = None
    seen: set[str] = set()  # the ids of the in-order lines
    copies: set[bytes] = set()  # every line with an id met (an exact repeat of one is dropped)
    records: dict[int, tuple[dict[str, Any], DroppedLine]] = {}  # index in kept -> lines to renumber
    order: list[tuple[int, str]] = []  # (index in kept, ULID) of the kept lines in order
    previous = ""
    where: list[tuple[int, int]] = []  # (line number, offset) of each kept line
    for number, line in enumerate(lines, 1):
        drop = None
        try:
            record = codec.decode_record(line)
        except ValueError as exc:
            corrupt = BadLine.of(number, offset, exc)
            drop = DroppedLine(corrupt.line, corrupt.offset, corrupt.reason, _excerpt(line), True)
        else:
            mid = record.get("id") or ""
            if mid and line in copies:  # an exact repeat: compact may drop it
                dropped.append(DroppedLine(number, offset, f"id {mid!r} repeats an earlier, identical line",
                                           _excerpt(line), False))
            elif mid in seen or (mid and ids.is_ulid(mid) and mid <= previous):
                copies.add(line)
                reason = (f"id {mid!r} is already used by an earlier, different line" if mid in seen
                          else f"id {mid!r} does not sort after the previous id {previous!r}")
                drop = DroppedLine(number, offset, reason, _excerpt(line), False)
                records[len(kept)] = (record, drop)
                where.append((number, offset))
                kept.append(line + b"\n")
            else:
                if mid:
                    seen.add(mid)
                    copies.add(line)
                    if ids.is_ulid(mid):
                        order.append((len(kept), mid))
                        previous = mid
                where.append((number, offset))
                kept.append(line + b"\n")
        if drop is not None:
            problem = problem or drop
            if drop.corrupt:
                dropped.append(drop)
        offset += len(line) + 1
    renumbered = _renumber(kept, where, records, order)
    return CompactionPlan(tuple(kept), tuple(dropped), problem, 0, False, renumbered)


def _renumber(kept: list[bytes], where: list[tuple[int, int]], records: dict[int, tuple[dict[str, Any], DroppedLine]],
              order: list[tuple[int, str]]) -> tuple[DroppedLine, ...]:
    """Give the kept lines ``records`` names (index -> record) new ULIDs in ``kept``: each
    run of them the ids just after the in-order ULID before it (``order``: the in-order
    lines' indexes and ids), below the one after it; where they do not fit, the in-order
    line after is renumbered too. Deterministic: the same lines get the same ids."""
    if not records:
        return ()
    redo = set(records)
    while True:
        anchors = [(i, mid) for i, mid in order if i not in redo]
        assigned: dict[int, str] = {}
        a = 0
        last: tuple[int, str] = (-1, "")  # the last line given an id in this pass
        for run in _runs(sorted(redo)):
            while a < len(anchors) and anchors[a][0] < run[0]:
                a += 1
            low = anchors[a - 1] if a > 0 else None
            if last[0] >= 0 and (low is None or last[0] > low[0]):
                low = last  # a run renumbered after that line: follow it
            got = _fit(len(run), None if low is None else low[1], anchors[a][1] if a < len(anchors) else None,
                       records[run[0]][0].get("created_at") if run[0] in records else None)
            if got is None:  # (after the largest ULID nothing fits, and no line can be above it)
                redo.add(anchors[a][0])  # no room below the next in-order line: renumber it too
                break
            assigned.update(zip(run, got))
            last = (run[-1], got[-1])
        else:
            break
    out = []
    for i in sorted(assigned):
        if i in records:
            record, note = records[i]
        else:  # an in-order line renumbered to make room
            record = codec.decode_record(kept[i][:-1])
            note = DroppedLine(*where[i], f"id {record.get('id')!r} renumbered to make room for the line before it",
                               _excerpt(kept[i][:-1]), False)
        old = record.get("id") or ""
        record = dict(record)
        record["id"] = assigned[i]
        if old:
            record.setdefault(ORIGINAL_ID, old)
        kept[i] = codec.encode_record(record)
        out.append(note)
    return tuple(out)


def _fit(count: int, low: str | None, high: str | None, created_at: object) -> list[str] | None:
    """``count`` increasing ULIDs after ``low`` (from its next value on; with no ``low``,
    from the ``created_at`` ms of the first line, else 0) and below ``high``; None when
    they do not fit."""
    if low is not None:
        start = (ids.decode(low) or 0) + 1
    else:
        ms = created_at if type(created_at) is int and 0 <= created_at < 1 << 48 else 0
        start = ms << 80
        if high is not None:
            start = min(start, (ids.decode(high) or 0) - count)
    stop = (1 << 128) if high is None else (ids.decode(high) or 0)
    if start < 0 or start + count > stop:
        return None
    return [ids.encode(start + k) for k in range(count)]


def _runs(indexes: list[int]) -> list[list[int]]:
    """Sorted ``indexes`` cut into runs of consecutive numbers."""
    runs: list[list[int]] = []
    for i in indexes:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def plan_compaction(data: bytes) -> CompactionPlan:
    """What compaction keeps of transcript bytes ``data`` (:func:`plan_lines` of its
    complete lines); a torn tail and a leading BOM are dropped too. O(len(data)), no I/O."""
    start = len(BOM) if data.startswith(BOM) else 0
    committed = data.rfind(b"\n") + 1
    lines = data[start : committed - 1].split(b"\n") if committed > start else []
    plan = plan_lines(lines, start)
    return CompactionPlan(plan.kept, plan.dropped, plan.problem, len(data) - committed, start > 0, plan.renumbered)


def _excerpt(line: bytes) -> str:
    return line[:200].decode("utf-8", "replace")


__all__ = ["ORIGINAL_ID", "CompactionPlan", "CompactionReport", "DroppedLine", "plan_compaction", "plan_lines"]
