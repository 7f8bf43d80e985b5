"""How every benchmark times its calls and what a result is: per-call samples, their median
and p95 (never a mean), ratios of medians measured in the same run, goals printed as met or
missed. Shared by ``benchmarks.run``, ``benchmarks.history``, ``benchmarks.peers`` and
``benchmarks.concurrency``."""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

_pc = time.perf_counter_ns

#: Calls per interleaving block: implementations take turns every this many calls, so slow
#: drift (other load, disk write-back) hits all of them alike, while each still runs a few
#: calls in a row (a warm loop) before the next one takes over.
BLOCK_FAST = 50  # microsecond-scale calls
BLOCK_SLOW = 5  # calls that fsync or take a millisecond


# -- results ------------------------------------------------------------------------------
@dataclass
class Row:
    """One implementation's samples (nanoseconds per call) and their summary."""

    impl: str  # stable id, e.g. "floor", "jsonl_sessions", "sqlite_wal_normal"
    label: str
    samples: list[int]
    median_ns: float = 0.0
    p95_ns: float = 0.0
    vs_floor: float | None = None
    vs_ours: float | None = None

    def __post_init__(self) -> None:
        values = sorted(self.samples)
        self.median_ns = float(statistics.median(values))
        self.p95_ns = percentile(values, 0.95)


@dataclass
class Group:
    """Rows doing the same job; ratios are of medians, to the floor and to our row."""

    id: str  # stable id, e.g. "append_flush"
    title: str
    unit: str  # what one sample is
    rows: list[Row]
    floor: str | None = "floor"
    ours: str = "jsonl_sessions"

    def row(self, impl: str) -> Row:
        for r in self.rows:
            if r.impl == impl:
                return r
        raise KeyError(impl)

    def finish(self) -> Group:
        floor = self.row(self.floor).median_ns if self.floor else None
        ours = self.row(self.ours).median_ns
        for r in self.rows:
            r.vs_floor = r.median_ns / floor if floor else None
            r.vs_ours = r.median_ns / ours if ours else None
        return self


@dataclass
class Target:
    """A ratio measured in this run next to its goal (``need``: ">= 2.0", "<= 1.5", or None
    for a ratio reported without a goal)."""

    id: str
    text: str
    measure: str  # what the value is, e.g. "sqlite3 / ours"
    value: float
    need: str | None
    met: bool | None = field(init=False)

    def __post_init__(self) -> None:
        if self.need is None:
            self.met = None
            return
        op, bound = self.need.split()
        self.met = self.value >= float(bound) if op == ">=" else self.value <= float(bound)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (numpy's default)."""
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


# -- timing -------------------------------------------------------------------------------
@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Collect, then keep the collector off while timing (as timeit does)."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def time_calls(op: Callable[[int], object], start: int, count: int,
               after: Callable[[int], object] | None = None) -> list[int]:
    """Time ``op(i)`` for ``count`` consecutive indexes; ``after(i)`` runs untimed after each."""
    out = []
    pc = _pc
    for i in range(start, start + count):
        t0 = pc()
        op(i)
        t1 = pc()
        out.append(t1 - t0)
        if after is not None:
            after(i)
    return out


def interleaved(ops: Mapping[str, Callable[[int], object]], *, count: int, block: int, warmup: int,
                after: Mapping[str, Callable[[int], object]] | None = None) -> dict[str, list[int]]:
    """Per-call samples of each op: ``warmup`` untimed calls each, then ``count`` timed calls
    each, the ops taking turns every ``block`` calls (order rotated per turn)."""
    names = list(ops)
    samples: dict[str, list[int]] = {name: [] for name in names}
    post = {name: after.get(name) if after else None for name in names}
    settle()
    with gc_paused():
        for name in names:
            time_calls(ops[name], 0, warmup, post[name])
        done = 0
        turn = 0
        while done < count:
            k = min(block, count - done)
            r = turn % len(names)
            for name in names[r:] + names[:r]:
                samples[name] += time_calls(ops[name], warmup + done, k, post[name])
            done += k
            turn += 1
    return samples


def repeated(ops: Mapping[str, Callable[[], object]], *, reps: int, expect: int | None = None) -> dict[str, list[int]]:
    """One untimed warm-up call of each op, then ``reps`` rounds timing each op once (order
    rotated per round). Results are dropped outside the timed region."""
    names = list(ops)
    samples: dict[str, list[int]] = {name: [] for name in names}
    settle()
    for name in names:
        result = ops[name]()
        if expect is not None:
            got = result if isinstance(result, int) else len(result)  # type: ignore[arg-type]
            if got != expect:
                raise RuntimeError(f"{name} returned {got} items, expected {expect}")
        del result
    for r in range(reps):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            op = ops[name]
            with gc_paused():
                t0 = _pc()
                result = op()
                t1 = _pc()
                del result
            samples[name].append(t1 - t0)
    return samples


def settle() -> None:
    """Write back the data set just built (os.sync), so that its write-back is not charged to
    whichever implementation happens to fsync first (ext4 data=ordered flushes it then)."""
    if hasattr(os, "sync"):
        os.sync()


def timer_overhead_ns() -> float:
    """Median cost of one timed call of an empty op (included in every sample)."""
    with gc_paused():
        return float(statistics.median(time_calls(lambda i: None, 0, 20_000)))
