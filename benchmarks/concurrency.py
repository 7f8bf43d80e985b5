"""Durable appends from several writers at once, each configuration next to one writer.

Writers: 1, 2, 4 and 8 threads sharing one ``SessionStore``, and 4 processes with a store
each, appending with ``durability="fsync"`` either to ONE session (they contend for its
guard; a group commit would let them share fsyncs) or to DIFFERENT sessions (one each:
nothing to contend for but the interpreter lock and the disk). Every writer makes one
untimed warm-up append, waits at a barrier, then makes ``appends`` timed appends.

Two figures per configuration, each over ``rounds`` rounds (configurations take turns in
an order rotated per round, so drift hits all alike):

- **aggregate time per append**: the round's wall time (first writer's start to the last
  one's end) / all its appends; the ratio of one writer's median to a configuration's
  median is its throughput relative to one writer (> 1: more appends per second);
- **latency**: every single append's time, as its caller waits for it.

Floors: the same loops of ``os.write`` + ``os.fsync`` of the same lines on descriptors kept
open (one thread; 8 threads on one file; 8 threads on 8 files): what the disk and kernel
give without the store.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.measure import Group, Row, Target, settle
from benchmarks.workload import MessageFactory, Msg, encoded_lines, open_append
from jsonl_sessions import SessionStore

_now = time.monotonic_ns  # CLOCK_MONOTONIC: comparable across processes on one machine
JOIN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Config:
    id: str
    label: str
    kind: str  # "threads" | "processes" | "floor"
    writers: int
    shared: bool  # True: one session (one file); False: one session (file) per writer


CONFIGS = (
    Config("jsonl_sessions", "1 thread (one writer)", "threads", 1, True),
    Config("threads_2_one", "2 threads, one session", "threads", 2, True),
    Config("threads_2_diff", "2 threads, different sessions", "threads", 2, False),
    Config("threads_4_one", "4 threads, one session", "threads", 4, True),
    Config("threads_4_diff", "4 threads, different sessions", "threads", 4, False),
    Config("threads_8_one", "8 threads, one session", "threads", 8, True),
    Config("threads_8_diff", "8 threads, different sessions", "threads", 8, False),
    Config("processes_4_one", "4 processes, one session", "processes", 4, True),
    Config("processes_4_diff", "4 processes, different sessions", "processes", 4, False),
    Config("floor", "floor: 1 thread, os.write + os.fsync on one open fd", "floor", 1, True),
    Config("floor_8_one", "floor: 8 threads, os.write + os.fsync, one file", "floor", 8, True),
    Config("floor_8_diff", "floor: 8 threads, os.write + os.fsync, a file each", "floor", 8, False),
)

#: The goals: (config id, goal), as throughput relative to one writer. Rows without a goal
#: are reported as measured.
GOALS = {"threads_8_diff": ">= 2.0", "threads_8_one": ">= 2.0"}


@dataclass
class Timed:
    """One writer's run: when it started and ended its timed appends, and each one's time."""

    start: int
    end: int
    latencies: list[int]


# -- one writer ---------------------------------------------------------------------------
def store_writer(store: SessionStore, key: str, pool: Sequence[Msg], count: int,
                 wait: Callable[[], object]) -> Timed:
    """One warm-up append, ``wait()`` for the others, then ``count`` timed appends."""
    append = store.append
    size = len(pool)
    append(key, pool[0])
    wait()
    lat = []
    start = _now()
    t0 = start
    for i in range(count):
        append(key, pool[i % size])
        t1 = _now()
        lat.append(t1 - t0)
        t0 = t1
    return Timed(start, t0, lat)


def floor_writer(fd: int, lines: Sequence[bytes], count: int, wait: Callable[[], object]) -> Timed:
    write, fsync = os.write, os.fsync
    size = len(lines)
    write(fd, lines[0])
    fsync(fd)
    wait()
    lat = []
    start = _now()
    t0 = start
    for i in range(count):
        write(fd, lines[i % size])
        fsync(fd)
        t1 = _now()
        lat.append(t1 - t0)
        t0 = t1
    return Timed(start, t0, lat)


def in_threads(jobs: Sequence[Callable[[Callable[[], object]], Timed]]) -> list[Timed]:
    """Run each job in its own thread, all released by one barrier; re-raise the first error."""
    barrier = threading.Barrier(len(jobs))
    out: list[Timed | None] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            out[i] = jobs[i](barrier.wait)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    if errors:
        raise errors[0]
    if any(t is None for t in out):
        raise RuntimeError("a writer thread did not finish")
    return [t for t in out if t is not None]


def process_main(root: str, key: str, pool: Sequence[Msg], count: int, barrier: Any, results: Any) -> None:
    """A writer process: its own store, one warm-up append, the barrier, the timed appends."""
    try:
        timed = store_writer(SessionStore(root, durability="fsync"), key, pool, count, barrier.wait)
        results.put((timed.start, timed.end, timed.latencies))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        barrier.abort()
        results.put(repr(exc))


def in_processes(root: str, keys: Sequence[str], pool: Sequence[Msg], count: int) -> list[Timed]:
    methods = multiprocessing.get_all_start_methods()
    ctx: Any = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    barrier = ctx.Barrier(len(keys))
    results = ctx.Queue()
    procs = [ctx.Process(target=process_main, args=(root, k, pool, count, barrier, results), daemon=True)
             for k in keys]
    for p in procs:
        p.start()
    got = [results.get(timeout=JOIN_TIMEOUT_S) for _ in procs]
    for p in procs:
        p.join(JOIN_TIMEOUT_S)
    bad = [g for g in got if isinstance(g, str)]
    if bad:
        raise RuntimeError(f"a writer process failed: {bad[0]}")
    return [Timed(s, e, lat) for s, e, lat in got]


# -- the benchmark ------------------------------------------------------------------------
class ConcurrencyBench:
    """Every configuration of CONFIGS, ``rounds`` times, in fresh directories under ``base``."""

    def __init__(self, base: str, appends: int, rounds: int, factory: MessageFactory) -> None:
        self.base = base
        self.appends = appends
        self.rounds = rounds
        self.pool = factory.make(200, salt=7)
        self.lines = encoded_lines(self.pool)
        self.root = os.path.join(base, "threads")
        self.proc_root = os.path.join(base, "processes")
        self.store = SessionStore(self.root, durability="fsync")
        self.fds: dict[str, int] = {}

    def fd(self, name: str) -> int:
        if name not in self.fds:
            self.fds[name] = open_append(os.path.join(self.base, name))
        return self.fds[name]

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def keys(self, c: Config) -> list[str]:
        return [f"{c.id}-shared"] * c.writers if c.shared else [f"{c.id}-w{i}" for i in range(c.writers)]

    def run_one(self, c: Config) -> list[Timed]:
        n, keys = self.appends, self.keys(c)
        if c.kind == "processes":
            return in_processes(self.proc_root, keys, self.pool, n)
        if c.kind == "floor":
            fds = [self.fd(k) for k in keys]
            return in_threads([functools.partial(floor_writer, fd, self.lines, n) for fd in fds])
        return in_threads([functools.partial(store_writer, self.store, k, self.pool, n) for k in keys])

    def run(self, progress: Callable[[str], None]) -> list[Group]:
        os.makedirs(self.proc_root, exist_ok=True)
        per_append: dict[str, list[int]] = {c.id: [] for c in CONFIGS}
        latency: dict[str, list[int]] = {c.id: [] for c in CONFIGS}
        settle()
        try:
            for r in range(self.rounds):
                k = r % len(CONFIGS)
                for c in CONFIGS[k:] + CONFIGS[:k]:
                    runs = self.run_one(c)
                    wall = max(t.end for t in runs) - min(t.start for t in runs)
                    per_append[c.id].append(wall // (c.writers * self.appends))
                    for t in runs:
                        latency[c.id] += t.latencies
                progress(f"concurrency round {r + 1}/{self.rounds} done")
            self.check()
        finally:
            self.close()
        writers = f"{self.appends:,} timed appends per writer, {self.rounds} rounds"
        groups = [
            Group("concurrency_fsync", 'durable appends from several writers, durability="fsync"',
                  f"aggregate wall time / appends, one sample per round; {writers}",
                  [Row(c.id, c.label, per_append[c.id]) for c in CONFIGS]),
            Group("concurrency_latency", 'latency of one durable append under concurrency, durability="fsync"',
                  f"per append, as its caller waits; {writers}",
                  [Row(c.id, c.label, latency[c.id]) for c in CONFIGS]),
        ]
        return [g.finish() for g in groups]

    def check(self) -> None:
        """Every append of every writer is in its session (none lost, none doubled)."""
        per_writer = self.rounds * (self.appends + 1)
        for c in CONFIGS:
            if c.kind == "floor":
                continue
            store = self.store if c.kind == "threads" else SessionStore(self.proc_root)
            for key in set(self.keys(c)):
                expected = per_writer * (c.writers if c.shared else 1)
                got = len(store.try_load(key))
                if got != expected:
                    raise RuntimeError(f"concurrency benchmark: {key} holds {got} messages, expected {expected}")


def concurrency_goals(groups: Sequence[Group]) -> list[Target]:
    """Throughput of each configuration relative to one writer (one writer's median aggregate
    time per append / the configuration's), with the goal where there is one."""
    g = next(g for g in groups if g.id == "concurrency_fsync")
    one = g.row("jsonl_sessions").median_ns
    out = []
    for c in CONFIGS:
        if c.kind == "floor" or c.id == "jsonl_sessions":
            continue
        out.append(Target(f"concurrency_{c.id}", f"{c.label}: appends/s / one writer's", "one / these",
                          one / g.row(c.id).median_ns, GOALS.get(c.id)))
    floor = g.row("floor").median_ns
    for fid in ("floor_8_one", "floor_8_diff"):
        out.append(Target(f"concurrency_{fid}", f"{g.row(fid).label}: writes/s / one floor writer's",
                          "one / these", floor / g.row(fid).median_ns, None))
    return out


def run_concurrency(base: str, appends: int, rounds: int, factory: MessageFactory,
                    progress: Callable[[str], None]) -> list[Group]:
    """The two groups (aggregate and latency), measured in a fresh directory under ``base``."""
    d = os.path.join(base, "concurrency")
    os.makedirs(d)
    try:
        return ConcurrencyBench(d, appends, rounds, factory).run(progress)
    finally:
        shutil.rmtree(d, ignore_errors=True)
