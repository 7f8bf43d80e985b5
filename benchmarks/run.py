"""jsonl_sessions benchmarks: every operation next to its floor and stdlib sqlite3, in one run.

Run from the repository root::

    python -m benchmarks                  # full run (a few minutes)
    python -m benchmarks --quick          # smoke run (~20 s)
    python benchmarks/run.py --markdown --json results.json

Each operation is timed per call with ``time.perf_counter_ns`` (garbage collector paused
while timing, warm-up calls first, implementations taking turns in small blocks so drift hits
all of them alike) and reported as median and p95, with two ratios of medians measured in this
same run: ``vs floor`` (time / the raw-syscall or plain-orjson floor) and ``vs ours``
(time / jsonl_sessions; above 1 means slower than jsonl_sessions). Then the goals: each a
ratio from this run next to its goal, printed as met / missed; the exit status is always 0
(a measurement, never a gate). Stdlib + orjson + the package only. See benchmarks/README.md
for what each line measures and how the sqlite3 peer is set up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import orjson

if __package__ in (None, ""):  # `python benchmarks/run.py`: import the package from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import baseline as older
from benchmarks import sqlite_backend as backend
from benchmarks.appendops import KEY, append_ops, append_rows
from benchmarks.concurrency import concurrency_goals, run_concurrency
from benchmarks.environ import environment, header_lines, load_average
from benchmarks.measure import BLOCK_FAST, BLOCK_SLOW, Group, Row, Target, interleaved, repeated
from benchmarks.table import render_markdown, render_text, to_json
from benchmarks.workload import (
    MessageFactory,
    SqlitePeer,
    atomic_replace_floor,
    encode_replace_floor,
    encoded_lines,
    open_append,
    orjson_floor_load,
    orjson_floor_loop,
)
from jsonl_sessions import ChatMessage, SessionStore
from jsonl_sessions.keys import key_to_stem
from jsonl_sessions.sqlite import SqliteSessionStore

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


# -- sizes --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    """How much work each benchmark does (counts are per implementation)."""

    append_flush: int = 6000  # messages appended one by one
    append_fsync: int = 1500
    batch: int = 100  # messages per append_many call
    batches_flush: int = 200  # append_many calls
    batches_fsync: int = 60
    load_messages: int = 100_000
    load_reps: int = 11
    rewrite_messages: int = 10_000
    rewrite_reps: int = 11
    remove_big: int = 200_000
    remove_small: int = 1_000
    remove_calls: int = 600  # remove_last calls per session
    concurrent_appends: int = 200  # timed durable appends per writer and round
    concurrent_rounds: int = 5

    def scaled(self, factor: float) -> Sizes:
        """Every count times ``factor`` (the batch size kept), with small floors."""
        minimum = {"load_reps": 2, "rewrite_reps": 2, "batches_flush": 3, "batches_fsync": 3,
                   "remove_calls": 5, "remove_small": 10, "remove_big": 20, "concurrent_appends": 3,
                   "concurrent_rounds": 2}
        changes = {}
        for f in fields(self):
            if f.name != "batch":
                changes[f.name] = max(minimum.get(f.name, 10), round(getattr(self, f.name) * factor))
        return replace(self, **changes)


FULL = Sizes()
QUICK = Sizes(append_flush=600, append_fsync=100, batches_flush=30, batches_fsync=10,
              load_messages=10_000, load_reps=3, rewrite_messages=2_000, rewrite_reps=3,
              remove_big=20_000, remove_small=1_000, remove_calls=60, concurrent_appends=20,
              concurrent_rounds=3)


# -- benchmarks ---------------------------------------------------------------------------
class Bench:
    """Runs the benchmark groups in fresh subdirectories of one temp dir."""

    def __init__(self, base: str, sizes: Sizes, progress: Callable[[str], None],
                 baseline: Any = None, baseline_rev: str | None = None) -> None:
        self.base = base
        self.sizes = sizes
        self.progress = progress
        self.baseline = baseline  # an older version of the package (benchmarks.baseline), or None
        self.baseline_rev = baseline_rev
        self.factory = MessageFactory()
        self._closers: list[Callable[[], object]] = []

    def subdir(self, name: str) -> str:
        path = os.path.join(self.base, name)
        os.makedirs(path)
        return path

    def sqlite(self, path: str, synchronous: str, *, schema: str = "fair") -> SqlitePeer:
        peer = SqlitePeer(path, synchronous, schema=schema)
        self._closers.append(peer.close)
        return peer

    def backend(self, directory: str, mode: str) -> SqliteSessionStore:
        """A store of the SQLite backend in ``directory`` (closed with the group)."""
        db = backend.open_backend(directory, mode)  # type: ignore[arg-type]
        self._closers.append(db.close)
        return db

    def close_all(self) -> None:
        while self._closers:
            with contextlib.suppress(Exception):
                self._closers.pop()()

    def run_all(self) -> list[Group]:
        steps: list[tuple[str, Callable[[], Group | list[Group]]]] = [
            ("append (flush)", lambda: self.append("flush")),
            ("append (fsync)", lambda: self.append("fsync")),
            ("append_many (flush)", lambda: self.append_many("flush")),
            ("append_many (fsync)", lambda: self.append_many("fsync")),
            ("load / try_load", self.load),
            ("rewrite_messages (fsync)", self.rewrite),
            ("remove_last", self.remove_last),
            ("concurrent durable appends", lambda: run_concurrency(
                self.base, self.sizes.concurrent_appends, self.sizes.concurrent_rounds, self.factory, self.progress)),
        ]
        groups: list[Group] = []
        try:
            for name, step in steps:
                started = time.monotonic()
                self.progress(f"{name} ...")
                got = step()
                groups.extend(got if isinstance(got, list) else [got])
                self.close_all()
                self.progress(f"{name} done in {time.monotonic() - started:.1f} s")
        finally:
            self.close_all()
        return groups

    # append, one message per call
    def append(self, mode: str) -> Group:
        flush = mode == "flush"
        n = self.sizes.append_flush if flush else self.sizes.append_fsync
        warmup = 100 if flush else 10
        d = self.subdir(f"append-{mode}")
        pool = self.factory.make(1000, salt=1)
        size = len(pool)
        key = KEY
        # floor, bare Python, the store, sqlite3 INTEGER PRIMARY KEY, the baseline: as appendpath times them.
        ops, store = append_ops(d, mode, pool, self._closers, self.baseline)
        peer = self.sqlite(os.path.join(d, "peer.sqlite"), "NORMAL" if flush else "FULL")
        db = self.backend(d, mode)
        ops["sqlite_wal_" + ("normal" if flush else "full")] = lambda i: peer.append(key, pool[i % size])
        ops[backend.ROW] = lambda i: db.append(key, pool[i % size])
        if flush:
            bare = self.sqlite(os.path.join(d, "bare.sqlite"), "NORMAL", schema="bare")
            ops["sqlite_bare_normal"] = lambda i: bare.append_bare(pool[i % size])
        samples = interleaved(ops, count=n, block=BLOCK_FAST if flush else BLOCK_SLOW, warmup=warmup)
        if len(store.try_load(key)) != n + warmup:
            raise RuntimeError("append benchmark: the store holds the wrong number of messages")
        sync = "NORMAL" if flush else "FULL"
        baseline = f"the same, the package at {self.baseline_rev}" if self.baseline is not None else None
        rows = append_rows(mode, samples, baseline)
        rows[4:4] = [
            Row(f"sqlite_wal_{sync.lower()}", f"sqlite3 WAL sync={sync} autocommit, (session,id) PK",
                samples[f"sqlite_wal_{sync.lower()}"]),
            Row(backend.ROW, backend.label("append", mode), samples[backend.ROW]),
        ]
        if flush:
            rows.append(Row("sqlite_bare_normal", "sqlite3 WAL sync=NORMAL autocommit, bare rowid table, body only",
                            samples["sqlite_bare_normal"]))
        return Group(f"append_{mode}", f'append, durability="{mode}"',
                     f"per message, {n:,} appends one by one", rows).finish()

    # append_many, batches
    def append_many(self, mode: str) -> Group:
        flush = mode == "flush"
        n = self.sizes.batches_flush if flush else self.sizes.batches_fsync
        b = self.sizes.batch
        d = self.subdir(f"append-many-{mode}")
        pool = self.factory.make(max(10 * b, 1000), salt=2)
        batches = [pool[i : i + b] for i in range(0, len(pool) - b + 1, b)]
        joined = [b"".join(encoded_lines(batch)) for batch in batches]
        count = len(batches)
        key = "bench"
        store = SessionStore(os.path.join(d, "store"), durability=mode)  # type: ignore[arg-type]
        fd = open_append(os.path.join(d, "floor.jsonl"))
        self._closers.append(lambda: os.close(fd))
        write, fsync = os.write, os.fsync

        if flush:
            def floor(i: int) -> None:
                write(fd, joined[i % count])
        else:
            def floor(i: int) -> None:
                write(fd, joined[i % count])
                fsync(fd)

        sync = "NORMAL" if flush else "FULL"
        peer = self.sqlite(os.path.join(d, "peer.sqlite"), sync)
        append_many = store.append_many
        db = self.backend(d, mode)
        ops: dict[str, Callable[[int], object]] = {
            "floor": floor,
            "jsonl_sessions": lambda i: append_many(key, batches[i % count]),
            f"sqlite_wal_{sync.lower()}": lambda i: peer.append_many(key, batches[i % count]),
            backend.ROW: lambda i: db.append_many(key, batches[i % count]),
        }
        samples = interleaved(ops, count=n, block=BLOCK_SLOW if flush else 2, warmup=3)
        rows = [
            Row("floor", f"floor: one os.write of the {b} joined lines" + ("" if flush else " + fsync"),
                samples["floor"]),
            Row("jsonl_sessions", f'jsonl_sessions append_many, durability="{mode}"', samples["jsonl_sessions"]),
            Row(f"sqlite_wal_{sync.lower()}", f"sqlite3 WAL sync={sync}, one transaction, executemany",
                samples[f"sqlite_wal_{sync.lower()}"]),
            Row(backend.ROW, backend.label("append_many", mode), samples[backend.ROW]),
        ]
        return Group(f"append_many_{mode}", f'append_many of {b}, durability="{mode}"',
                     f"per batch of {b} messages, {n:,} batches", rows).finish()

    # load / try_load
    def load(self) -> Group:
        n = self.sizes.load_messages
        d = self.subdir("load")
        key = "bench-load"
        store = SessionStore(os.path.join(d, "store"), durability="flush")
        msgs = self.factory.make(n, salt=3)
        store.rewrite_messages(key, msgs)
        del msgs
        records = [m.to_dict() for m in store.try_load(key)]
        peer = self.sqlite(os.path.join(d, "peer.sqlite"), "NORMAL")
        peer.rewrite(key, records)
        del records
        path = os.path.join(store.root, key_to_stem(key) + ".jsonl")
        size = os.path.getsize(path)
        db = self.backend(d, "flush")
        backend.mirror(store, db, key)
        ops: dict[str, Callable[[], Any]] = {
            "floor": lambda: orjson_floor_load(path),
            "floor_dropped": lambda: orjson_floor_loop(path),
            "load": lambda: store.load(key),
            "jsonl_sessions": lambda: store.try_load(key),
            "sqlite_wal": lambda: peer.load(key),
            backend.ROW: lambda: db.try_load(key),
        }
        samples = repeated(ops, reps=self.sizes.load_reps, expect=n)
        rows = [
            Row("floor", "floor: for line in f: orjson.loads(line), kept in a list", samples["floor"]),
            Row("floor_dropped", "floor': the same loop, each dict dropped at once", samples["floor_dropped"]),
            Row("load", "jsonl_sessions load (lenient)", samples["load"]),
            Row("jsonl_sessions", "jsonl_sessions try_load (strict)", samples["jsonl_sessions"]),
            Row("sqlite_wal", "sqlite3 SELECT body ORDER BY id + orjson.loads", samples["sqlite_wal"]),
            Row(backend.ROW, "jsonl_sessions.sqlite try_load (strict)", samples[backend.ROW]),
        ]
        return Group("load", f"load of {n:,} messages ({size / 1e6:.1f} MB)",
                     f"per whole-session read, {self.sizes.load_reps} reps, warm page cache", rows).finish()

    # rewrite_messages
    def rewrite(self) -> Group:
        n = self.sizes.rewrite_messages
        d = self.subdir("rewrite")
        key = "bench-rewrite"
        store = SessionStore(os.path.join(d, "store"), durability="fsync")
        store.rewrite_messages(key, self.factory.make(n, salt=4))
        messages: list[ChatMessage] = store.try_load(key)
        records = [m.to_dict() for m in messages]
        path = os.path.join(store.root, key_to_stem(key) + ".jsonl")
        with open(path, "rb") as f:
            data = f.read()
        on_disk = [orjson.loads(line) for line in data.splitlines()]  # the records as the file holds them
        floor_path = os.path.join(self.subdir("rewrite-floor"), "floor.jsonl")
        atomic_replace_floor(floor_path, data)
        peer = self.sqlite(os.path.join(d, "peer.sqlite"), "FULL")
        peer.rewrite(key, records)
        db = self.backend(d, "fsync")
        backend.mirror(store, db, key)
        ops: dict[str, Callable[[], object]] = {
            "floor": lambda: encode_replace_floor(floor_path, on_disk),
            "jsonl_sessions": lambda: store.rewrite_messages(key, messages),
            "sqlite_wal_full": lambda: peer.rewrite(key, records),
            backend.ROW: lambda: db.rewrite_messages(key, messages),
        }
        if self.baseline is not None:
            old = self.baseline.SessionStore(os.path.join(d, "baseline"), durability="fsync")
            old_messages = [self.baseline.ChatMessage.from_dict(m.to_dict()) for m in messages]
            ops["baseline"] = lambda: old.rewrite_messages(key, old_messages)
        samples = repeated(ops, reps=self.sizes.rewrite_reps)
        if store.try_load(key) != messages:
            raise RuntimeError("rewrite benchmark: the transcript changed")
        rows = [
            Row("floor", "floor: orjson.dumps of each record + temp + write + fsync + rename + dir fsync",
                samples["floor"]),
            Row("jsonl_sessions", 'jsonl_sessions rewrite_messages, durability="fsync"', samples["jsonl_sessions"]),
            Row("sqlite_wal_full", "sqlite3 WAL sync=FULL: DELETE + INSERT all, one transaction",
                samples["sqlite_wal_full"]),
            Row(backend.ROW, backend.label("rewrite_messages", "fsync"), samples[backend.ROW]),
        ]
        if self.baseline is not None:
            rows.append(Row("baseline", f"the same, the package at {self.baseline_rev}", samples["baseline"]))
        return Group("rewrite_fsync", f"rewrite_messages of {n:,} messages ({len(data) / 1e6:.1f} MB)",
                     f"per rewrite, {self.sizes.rewrite_reps} reps", rows).finish()

    # remove_last
    def remove_last(self) -> list[Group]:
        big_n, small_n = self.sizes.remove_big, self.sizes.remove_small
        d = self.subdir("remove")
        root = os.path.join(d, "store")
        stores = {"flush": SessionStore(root, durability="flush"), "fsync": SessionStore(root, durability="fsync")}
        build = stores["flush"]
        msgs = self.factory.make(big_n, salt=5)
        build.rewrite_messages("big", msgs)
        build.rewrite_messages("small", msgs[:small_n])
        pool = msgs[:1000]
        del msgs
        size = len(pool)
        big_path = os.path.join(root, key_to_stem("big") + ".jsonl")
        big_bytes = os.path.getsize(big_path)
        peer = self.sqlite(os.path.join(d, "peer.sqlite"), "NORMAL")
        for key in ("big", "small"):
            peer.rewrite(key, [m.to_dict() for m in build.try_load(key)])
        dbs = {mode: self.backend(d, mode) for mode in ("flush", "fsync")}  # one file, two durabilities
        backend.mirror(build, dbs["flush"], "big")

        # The floor: a copy of the big transcript, truncated at the known start of its last line.
        floor_path = os.path.join(d, "floor.jsonl")
        shutil.copyfile(big_path, floor_path)
        lines = encoded_lines(pool)
        fd = os.open(floor_path, os.O_RDWR | os.O_APPEND | _O_CLOEXEC)
        self._closers.append(lambda: os.close(fd))
        with open(floor_path, "rb") as f:
            f.seek(max(0, big_bytes - 65536))
            last_len = len(f.read().rsplit(b"\n", 2)[-2]) + 1
        state = [big_bytes, last_len]  # file size, length of its last line

        groups = []
        for mode in ("flush", "fsync"):
            durable = mode == "fsync"
            store = stores[mode]
            sync = "FULL" if durable else "NORMAL"
            peer.synchronous(sync)

            def floor(i: int, durable: bool = durable) -> None:
                os.ftruncate(fd, state[0] - state[1])
                if durable:
                    os.fsync(fd)

            def floor_refill(i: int, durable: bool = durable) -> None:
                line = lines[i % size]
                os.write(fd, line)
                if durable:
                    os.fsync(fd)
                state[0] += len(line) - state[1]
                state[1] = len(line)

            def ours(key: str, store: SessionStore = store) -> Callable[[int], object]:
                def op(i: int) -> None:
                    if not store.remove_last(key):
                        raise RuntimeError("remove_last removed nothing")
                return op

            def ours_refill(key: str, store: SessionStore = store) -> Callable[[int], object]:
                return lambda i: store.append(key, pool[i % size])

            def theirs(key: str) -> Callable[[int], object]:
                def op(i: int) -> None:
                    if not peer.remove_last(key):
                        raise RuntimeError("sqlite3 removed nothing")
                return op

            def theirs_refill(key: str) -> Callable[[int], object]:
                return lambda i: peer.append(key, pool[i % size])

            s = sync.lower()
            ops = {"floor": floor, "jsonl_sessions_small": ours("small"), "jsonl_sessions": ours("big"),
                   f"sqlite_wal_{s}_small": theirs("small"), f"sqlite_wal_{s}": theirs("big"),
                   backend.ROW: ours("big", dbs[mode])}  # type: ignore[arg-type]
            after = {"floor": floor_refill, "jsonl_sessions_small": ours_refill("small"),
                     "jsonl_sessions": ours_refill("big"), f"sqlite_wal_{s}_small": theirs_refill("small"),
                     f"sqlite_wal_{s}": theirs_refill("big"), backend.ROW: ours_refill("big", dbs[mode])}  # type: ignore[arg-type]
            samples = interleaved(ops, count=self.sizes.remove_calls, block=BLOCK_SLOW if durable else BLOCK_FAST,
                                  warmup=10, after=after)
            for key, expected in (("big", big_n), ("small", small_n)):
                if len(store.try_load(key)) != expected:
                    raise RuntimeError("remove_last benchmark: a session changed size")
            rows = [
                Row("floor", "floor: ftruncate at the known line start" + (" + fsync" if durable else ""),
                    samples["floor"]),
                Row("jsonl_sessions_small", f"jsonl_sessions remove_last, {small_n:,}-message session",
                    samples["jsonl_sessions_small"]),
                Row("jsonl_sessions", f"jsonl_sessions remove_last, {big_n:,}-message session",
                    samples["jsonl_sessions"]),
                Row(f"sqlite_wal_{s}_small", f"sqlite3 WAL sync={sync} DELETE newest, {small_n:,} rows",
                    samples[f"sqlite_wal_{s}_small"]),
                Row(f"sqlite_wal_{s}", f"sqlite3 WAL sync={sync} DELETE newest, {big_n:,} rows",
                    samples[f"sqlite_wal_{s}"]),
                Row(backend.ROW, backend.label(f"remove_last, {big_n:,}-message session", mode), samples[backend.ROW]),
            ]
            total = self.sizes.remove_calls
            groups.append(Group(f"remove_last_{mode}", f'remove_last, durability="{mode}"',
                                f"per call, {total:,} calls (each followed by an untimed append), "
                                f"{big_bytes / 1e6:.0f} MB big transcript", rows).finish())
        return groups


# -- goals --------------------------------------------------------------------------------
def goals(groups: Sequence[Group], sizes: Sizes) -> list[Target]:
    """Every ratio with a goal, from this run's medians (rates are inverse times: "floor /
    ours" is our append rate relative to the floor's)."""
    by_id = {g.id: g for g in groups}

    def ratio(gid: str, num: str, den: str) -> float:
        return by_id[gid].row(num).median_ns / by_id[gid].row(den).median_ns

    out = [
        Target("bare_flush", 'append "flush" / bare Python making the same system calls (benchmarks/bare.py)',
               "ours / bare", ratio("append_flush", "jsonl_sessions", "bare"), "<= 1.15"),
        Target("bare_fsync", 'append "fsync" / bare Python making the same system calls',
               "ours / bare", ratio("append_fsync", "jsonl_sessions", "bare"), "<= 1.15"),
        Target("durable_append", "durable append rate / a raw os.write+os.fsync loop on one open fd",
               "floor / ours", ratio("append_fsync", "floor", "jsonl_sessions"), ">= 0.85"),
        Target("flush_append", "flush append rate / sqlite3 WAL NORMAL autocommit INSERT, INTEGER PRIMARY KEY",
               "sqlite3 / ours", ratio("append_flush", "sqlite_intpk", "jsonl_sessions"), ">= 1.5"),
        Target("try_load", f"try_load of {sizes.load_messages:,} messages / [orjson.loads(l) for l in f]",
               "ours / floor", ratio("load", "jsonl_sessions", "floor"), "<= 1.3"),
        Target("rewrite", f"rewrite_messages of {sizes.rewrite_messages:,} (fsync) / encode+write+fsync+rename+dir fsync",
               "ours / floor", ratio("rewrite_fsync", "jsonl_sessions", "floor"), "<= 3.0"),
        Target("append_many", f"append_many of {sizes.batch} (fsync) / "
               "one write+fsync of the same bytes", "ours / floor",
               ratio("append_many_fsync", "jsonl_sessions", "floor"), "<= 1.5"),
    ]
    # With --baseline-rev: the same ratios for the older package, measured in this same run.
    before = {"bare_flush": ("append_flush", "baseline", "bare"), "bare_fsync": ("append_fsync", "baseline", "bare"),
              "durable_append": ("append_fsync", "floor", "baseline"),
              "flush_append": ("append_flush", "sqlite_intpk", "baseline"),
              "rewrite": ("rewrite_fsync", "baseline", "floor")}
    for target in list(out):
        if target.id in before and any(r.impl == "baseline" for r in by_id[before[target.id][0]].rows):
            gid, num, den = before[target.id]
            out.append(Target(f"{target.id}_baseline", f"{target.text} [baseline version]", target.measure,
                              ratio(gid, num, den), target.need))
    out += concurrency_goals(groups)
    for mode in ("flush", "fsync"):
        out.append(Target(f"remove_last_{mode}", f'remove_last independent of session size ("{mode}")',
                          "big / small", ratio(f"remove_last_{mode}", "jsonl_sessions", "jsonl_sessions_small"),
                          "<= 1.5"))
    return out


# -- main ---------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes for a smoke run (~20 s)")
    p.add_argument("--scale", type=float, default=1.0, metavar="F",
                   help="multiply every count by F (after --quick); for tests and slow disks")
    p.add_argument("--dir", metavar="DIR", default=None,
                   help="make the temp dir inside DIR (default: the system temp dir); it decides the file system")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the results as JSON to PATH")
    p.add_argument("--markdown", action="store_true", help="also print a README-ready Markdown table")
    p.add_argument("--baseline-rev", metavar="REV", default=None,
                   help="also measure append and rewrite_messages of the package as it was at git revision REV, "
                   "taking turns with this checkout's, and print its ratios next to the goals")
    p.add_argument("--label", metavar="TEXT", default=None,
                   help='a note printed first in the header, e.g. "loaded machine: other jobs running"')
    args = p.parse_args(argv)
    if args.scale <= 0:
        p.error("--scale must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.scale != 1.0:
        sizes = sizes.scaled(args.scale)
    mode = ("quick" if args.quick else "full") + (f" x{args.scale:g}" if args.scale != 1.0 else "")

    def progress(text: str) -> None:
        print(f"[benchmarks] {text}", file=sys.stderr, flush=True)

    base = tempfile.mkdtemp(prefix="jsonl-sessions-bench-", dir=args.dir)
    started = time.monotonic()
    try:
        env = environment(base, args.label)
        old = older.load(args.baseline_rev, base) if args.baseline_rev else None
        groups = Bench(base, sizes, progress, old, args.baseline_rev).run_all()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.monotonic() - started
    env["loadavg_end"] = load_average()
    measured = goals(groups, sizes)
    header = header_lines(env, mode)
    print(render_text(f"jsonl_sessions benchmarks ({mode} run, {elapsed:.0f} s)", header, groups, measured))
    if args.markdown:
        print()
        print(render_markdown(header, groups, measured))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(to_json(env, mode, sizes, groups, measured, elapsed), f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
