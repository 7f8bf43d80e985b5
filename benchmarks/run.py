"""jsonl_sessions benchmarks: every operation next to its floor and stdlib sqlite3, in one run.

Run from the repository root::

    python -m benchmarks                  # full run (~1-2 min)
    python -m benchmarks --quick          # smoke run (~10 s)
    python benchmarks/run.py --markdown --json results.json

Each operation is timed per call with ``time.perf_counter_ns`` (garbage collector paused
while timing, warm-up calls first, implementations taking turns in small blocks so drift hits
all of them alike) and reported as median and p95, with two ratios of medians measured in this
same run: ``vs floor`` (time / the raw-syscall or plain-orjson floor) and ``vs ours``
(time / jsonl_sessions; above 1 means slower than jsonl_sessions). The performance targets
(:func:`targets`) are printed as met / missed, but the exit status is always 0: this is a measurement, never
a gate. Stdlib + orjson + the package only. See benchmarks/README.md for what each line
measures and how the sqlite3 peer is set up.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/run.py`: import the package from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson

import jsonl_sessions
from jsonl_sessions import ChatMessage, SessionStore
from jsonl_sessions.ids import next_id, now_ms
from jsonl_sessions.keys import key_to_stem

_pc = time.perf_counter_ns
_loads = orjson.loads
_dumps = orjson.dumps
_NL = orjson.OPT_APPEND_NEWLINE
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
Msg = dict[str, Any]


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

    def scaled(self, factor: float) -> Sizes:
        """Every count times ``factor`` (the batch size kept), with small floors."""
        minimum = {"load_reps": 2, "rewrite_reps": 2, "batches_flush": 3, "batches_fsync": 3,
                   "remove_calls": 5, "remove_small": 10, "remove_big": 20}
        changes = {}
        for f in fields(self):
            if f.name != "batch":
                changes[f.name] = max(minimum.get(f.name, 10), round(getattr(self, f.name) * factor))
        return replace(self, **changes)


FULL = Sizes()
QUICK = Sizes(append_flush=600, append_fsync=100, batches_flush=30, batches_fsync=10,
              load_messages=10_000, load_reps=3, rewrite_messages=2_000, rewrite_reps=3,
              remove_big=20_000, remove_small=1_000, remove_calls=60)

#: Calls per interleaving block: implementations take turns every this many calls, so slow
#: drift (other load, disk write-back) hits all of them alike, while each still runs a few
#: calls in a row (a warm loop) before the next one takes over.
BLOCK_FAST = 50  # microsecond-scale calls
BLOCK_SLOW = 5  # calls that fsync or take a millisecond


# -- results ------------------------------------------------------------------------------
@dataclass
class Row:
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
    id: str
    text: str
    measure: str  # what the value is, e.g. "sqlite3 / ours"
    value: float
    need: str  # ">= 2.00" / "<= 1.50"
    met: bool = field(init=False)

    def __post_init__(self) -> None:
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


def settle() -> None:
    """Write back the data set just built (os.sync), so that its write-back is not charged to
    whichever implementation happens to fsync first (ext4 data=ordered flushes it then)."""
    if hasattr(os, "sync"):
        os.sync()


def timer_overhead_ns() -> float:
    """Median cost of one timed call of an empty op (included in every sample)."""
    with gc_paused():
        return float(statistics.median(time_calls(lambda i: None, 0, 20_000)))


# -- realistic messages -------------------------------------------------------------------
_WORD_TEXT = (
    "the of and to in is that for it as with was on be by this are or from at an which not "
    "file function return value error test agent tool call result read write path line session "
    "message user assistant system context token model python json stream buffer lock fsync "
    "commit rollback append load replace import class def self None True False list dict str "
    "int print open close retry timeout request response status 200 404 500 README main src "
    "naïve café über déjà 日本語 テスト данные ✓ — 🙂 {} [] () : , . ; ' \" \\n"
)
_WORDS = _WORD_TEXT.split()
_TOOLS = ("read_file", "write_file", "run_shell", "search", "list_dir", "http_get", "python")


class MessageFactory:
    """Deterministic realistic chat messages: roles user 30%, assistant 40% (a third of them
    with 1-2 ``tool_calls``), tool 25% (``tool_call_id`` + ``name``), system 5%; content is
    50-800 characters of mixed ASCII and non-ASCII text."""

    def __init__(self, seed: int = 20240601) -> None:
        rng = random.Random(seed)
        self._corpus = " ".join(rng.choices(_WORDS, k=200_000))
        self._seed = seed

    def make(self, n: int, salt: int = 0) -> list[Msg]:
        rng = random.Random(self._seed * 1_000_003 + salt)
        corpus = self._corpus
        top = len(corpus) - 801
        out: list[Msg] = []
        for _ in range(n):
            length = rng.randint(50, 800)
            start = rng.randrange(top)
            content = corpus[start : start + length]
            r = rng.random()
            if r < 0.05:
                out.append({"role": "system", "content": content})
            elif r < 0.35:
                out.append({"role": "user", "content": content})
            elif r < 0.75:
                msg: Msg = {"role": "assistant", "content": content}
                if rng.random() < 0.35:
                    msg["tool_calls"] = [self._tool_call(rng) for _ in range(rng.choice((1, 1, 1, 2)))]
                out.append(msg)
            else:
                out.append({"role": "tool", "tool_call_id": f"call_{rng.getrandbits(64):016x}",
                            "name": rng.choice(_TOOLS), "content": content})
        return out

    @staticmethod
    def _tool_call(rng: random.Random) -> Msg:
        args = {"path": f"src/pkg_{rng.randrange(40)}/module_{rng.randrange(200)}.py",
                "limit": rng.randrange(1, 500), "recursive": rng.random() < 0.5}
        return {"id": f"call_{rng.getrandbits(64):016x}", "type": "function",
                "function": {"name": rng.choice(_TOOLS), "arguments": _dumps(args).decode()}}


def record_of(msg: Msg, message_id: str, created_at: int) -> Msg:
    """The record the store writes for ``msg`` (same fields, same order)."""
    record = {"id": message_id, "created_at": created_at, "role": msg["role"],
              "kind": msg.get("kind") or "message", "content": msg.get("content")}
    for k, v in msg.items():
        if k not in record:
            record[k] = v
    return record


def encoded_lines(msgs: Sequence[Msg]) -> list[bytes]:
    """Transcript lines for ``msgs`` with fresh increasing ULIDs (what the floor writes)."""
    prev: str | None = None
    now = now_ms()
    lines = []
    for m in msgs:
        mid = next_id(prev)
        assert mid is not None
        lines.append(_dumps(record_of(m, mid, now), option=_NL))
        prev = mid
    return lines


# -- the sqlite3 peer ---------------------------------------------------------------------
FAIR_SCHEMA = ("CREATE TABLE messages(session TEXT NOT NULL, id TEXT NOT NULL, created_at INTEGER NOT NULL, "
               "body BLOB NOT NULL, PRIMARY KEY (session, id)) WITHOUT ROWID")
BARE_SCHEMA = "CREATE TABLE messages(body BLOB NOT NULL)"
_INSERT = "INSERT INTO messages(session, id, created_at, body) VALUES (?, ?, ?, ?)"
_SELECT = "SELECT body FROM messages WHERE session = ? ORDER BY id"
_DELETE_NEWEST = ("DELETE FROM messages WHERE session = ? AND id = "
                  "(SELECT max(id) FROM messages WHERE session = ?)")


class SqlitePeer:
    """stdlib sqlite3 doing the store's job: WAL, autocommit, one row per message keyed by
    (session, ULID id) so get-by-id and duplicate ids are caught, body = the orjson record.
    ``bare``: a rowid table with only the body (no id, no index): the harshest baseline."""

    def __init__(self, path: str, synchronous: str, *, bare: bool = False) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)  # autocommit: one commit per statement
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.synchronous(synchronous)
        self.conn.execute(BARE_SCHEMA if bare else FAIR_SCHEMA)
        # The last id per session, kept in memory: this favours sqlite3 (jsonl_sessions reads
        # it from the file's tail on every append, so several processes can share a session).
        self.last: dict[str, str | None] = {}

    def synchronous(self, mode: str) -> None:
        self.conn.execute(f"PRAGMA synchronous={mode}")

    def row(self, session: str, msg: Msg) -> tuple[str, str, int, bytes]:
        mid = next_id(self.last.get(session))
        assert mid is not None
        self.last[session] = mid
        now = now_ms()
        return (session, mid, now, _dumps(record_of(msg, mid, now)))

    def append(self, session: str, msg: Msg) -> None:
        self.conn.execute(_INSERT, self.row(session, msg))

    def append_bare(self, msg: Msg) -> None:
        self.conn.execute("INSERT INTO messages(body) VALUES (?)", (_dumps(msg),))

    def _transaction(self, fn: Callable[[], object]) -> None:
        self.conn.execute("BEGIN")
        try:
            fn()
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def append_many(self, session: str, msgs: Sequence[Msg]) -> None:
        rows = [self.row(session, m) for m in msgs]
        self._transaction(lambda: self.conn.executemany(_INSERT, rows))

    def insert_records(self, session: str, records: Sequence[Msg]) -> None:
        """Insert records that already carry ids (building a data set; also the rewrite)."""
        self.conn.executemany(_INSERT, [(session, r["id"], r["created_at"], _dumps(r)) for r in records])
        if records:
            self.last[session] = records[-1]["id"]

    def rewrite(self, session: str, records: Sequence[Msg]) -> None:
        def job() -> None:
            self.conn.execute("DELETE FROM messages WHERE session = ?", (session,))
            self.insert_records(session, records)
        self._transaction(job)

    def load(self, session: str) -> list[Msg]:
        return [_loads(body) for (body,) in self.conn.execute(_SELECT, (session,))]

    def remove_last(self, session: str) -> bool:
        return self.conn.execute(_DELETE_NEWEST, (session, session)).rowcount == 1

    def close(self) -> None:
        self.conn.close()


# -- floors -------------------------------------------------------------------------------
def open_append(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _O_CLOEXEC, 0o600)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_replace_floor(path: str, data: bytes) -> None:
    """The least a durable whole-file replace can do: temp, write, fsync, rename, dir fsync."""
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, "." + os.path.basename(path) + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def orjson_floor_load(path: str) -> list[Msg]:
    """The dict-level floor of a load: ``for line in f: orjson.loads(line)``, kept in a list
    (a load has to return every message, so the dicts must stay alive)."""
    with open(path, "rb") as f:
        return [_loads(line) for line in f]


def orjson_floor_loop(path: str) -> int:
    """The bare loop ``for line in f: orjson.loads(line)``, each dict freed at once (memory
    reused: cheaper, but no loader can do this). Returns the line count."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            _loads(line)
            n += 1
    return n


# -- benchmarks ---------------------------------------------------------------------------
class Bench:
    """Runs the benchmark groups in fresh subdirectories of one temp dir."""

    def __init__(self, base: str, sizes: Sizes, progress: Callable[[str], None]) -> None:
        self.base = base
        self.sizes = sizes
        self.progress = progress
        self.factory = MessageFactory()
        self._closers: list[Callable[[], object]] = []

    def subdir(self, name: str) -> str:
        path = os.path.join(self.base, name)
        os.makedirs(path)
        return path

    def sqlite(self, path: str, synchronous: str, *, bare: bool = False) -> SqlitePeer:
        peer = SqlitePeer(path, synchronous, bare=bare)
        self._closers.append(peer.close)
        return peer

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
        lines = encoded_lines(pool)
        size = len(pool)
        key = "bench"
        store = SessionStore(os.path.join(d, "store"), durability=mode)  # type: ignore[arg-type]
        fd = open_append(os.path.join(d, "floor.jsonl"))
        self._closers.append(lambda: os.close(fd))
        write, fsync = os.write, os.fsync
        append = store.append

        if flush:
            def floor(i: int) -> None:
                write(fd, lines[i % size])
        else:
            def floor(i: int) -> None:
                write(fd, lines[i % size])
                fsync(fd)

        peer = self.sqlite(os.path.join(d, "peer.sqlite"), "NORMAL" if flush else "FULL")
        ops: dict[str, Callable[[int], object]] = {
            "floor": floor,
            "jsonl_sessions": lambda i: append(key, pool[i % size]),
            "sqlite_wal_" + ("normal" if flush else "full"): lambda i: peer.append(key, pool[i % size]),
        }
        if flush:
            bare = self.sqlite(os.path.join(d, "bare.sqlite"), "NORMAL", bare=True)
            ops["sqlite_bare_normal"] = lambda i: bare.append_bare(pool[i % size])
        samples = interleaved(ops, count=n, block=BLOCK_FAST if flush else BLOCK_SLOW, warmup=warmup)
        if len(store.try_load(key)) != n + warmup:
            raise RuntimeError("append benchmark: the store holds the wrong number of messages")
        sync = "NORMAL" if flush else "FULL"
        rows = [
            Row("floor", "floor: os.write of the encoded line, O_APPEND" + ("" if flush else " + fsync"),
                samples["floor"]),
            Row("jsonl_sessions", f'jsonl_sessions append, durability="{mode}"', samples["jsonl_sessions"]),
            Row(f"sqlite_wal_{sync.lower()}", f"sqlite3 WAL sync={sync} autocommit, (session,id) PK",
                samples[f"sqlite_wal_{sync.lower()}"]),
        ]
        if flush:
            rows.append(Row("sqlite_bare_normal", "sqlite3 WAL sync=NORMAL autocommit, bare rowid table",
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
        ops: dict[str, Callable[[int], object]] = {
            "floor": floor,
            "jsonl_sessions": lambda i: append_many(key, batches[i % count]),
            f"sqlite_wal_{sync.lower()}": lambda i: peer.append_many(key, batches[i % count]),
        }
        samples = interleaved(ops, count=n, block=BLOCK_SLOW if flush else 2, warmup=3)
        rows = [
            Row("floor", f"floor: one os.write of the {b} joined lines" + ("" if flush else " + fsync"),
                samples["floor"]),
            Row("jsonl_sessions", f'jsonl_sessions append_many, durability="{mode}"', samples["jsonl_sessions"]),
            Row(f"sqlite_wal_{sync.lower()}", f"sqlite3 WAL sync={sync}, one transaction, executemany",
                samples[f"sqlite_wal_{sync.lower()}"]),
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
        ops: dict[str, Callable[[], Any]] = {
            "floor": lambda: orjson_floor_load(path),
            "floor_dropped": lambda: orjson_floor_loop(path),
            "load": lambda: store.load(key),
            "jsonl_sessions": lambda: store.try_load(key),
            "sqlite_wal": lambda: peer.load(key),
        }
        samples = repeated(ops, reps=self.sizes.load_reps, expect=n)
        rows = [
            Row("floor", "floor: for line in f: orjson.loads(line), kept in a list", samples["floor"]),
            Row("floor_dropped", "floor': the same loop, each dict dropped at once", samples["floor_dropped"]),
            Row("load", "jsonl_sessions load (lenient)", samples["load"]),
            Row("jsonl_sessions", "jsonl_sessions try_load (strict)", samples["jsonl_sessions"]),
            Row("sqlite_wal", "sqlite3 SELECT body ORDER BY id + orjson.loads", samples["sqlite_wal"]),
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
        floor_path = os.path.join(self.subdir("rewrite-floor"), "floor.jsonl")
        atomic_replace_floor(floor_path, data)
        peer = self.sqlite(os.path.join(d, "peer.sqlite"), "FULL")
        peer.rewrite(key, records)
        ops: dict[str, Callable[[], object]] = {
            "floor": lambda: atomic_replace_floor(floor_path, data),
            "jsonl_sessions": lambda: store.rewrite_messages(key, messages),
            "sqlite_wal_full": lambda: peer.rewrite(key, records),
        }
        samples = repeated(ops, reps=self.sizes.rewrite_reps)
        if store.try_load(key) != messages:
            raise RuntimeError("rewrite benchmark: the transcript changed")
        rows = [
            Row("floor", "floor: temp + write + fsync + rename + dir fsync", samples["floor"]),
            Row("jsonl_sessions", 'jsonl_sessions rewrite_messages, durability="fsync"', samples["jsonl_sessions"]),
            Row("sqlite_wal_full", "sqlite3 WAL sync=FULL: DELETE + INSERT all, one transaction",
                samples["sqlite_wal_full"]),
        ]
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
                   f"sqlite_wal_{s}_small": theirs("small"), f"sqlite_wal_{s}": theirs("big")}
            after = {"floor": floor_refill, "jsonl_sessions_small": ours_refill("small"),
                     "jsonl_sessions": ours_refill("big"), f"sqlite_wal_{s}_small": theirs_refill("small"),
                     f"sqlite_wal_{s}": theirs_refill("big")}
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
            ]
            total = self.sizes.remove_calls
            groups.append(Group(f"remove_last_{mode}", f'remove_last, durability="{mode}"',
                                f"per call, {total:,} calls (each followed by an untimed append), "
                                f"{big_bytes / 1e6:.0f} MB big transcript", rows).finish())
        return groups


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


# -- targets ------------------------------------------------------------------------------
def targets(groups: Sequence[Group]) -> list[Target]:
    by_id = {g.id: g for g in groups}
    out = []
    g = by_id["append_fsync"]
    out.append(Target("durable_append", "durable append throughput >= 0.85x raw write+fsync",
                      "floor / ours", g.row("floor").median_ns / g.row("jsonl_sessions").median_ns, ">= 0.85"))
    g = by_id["append_flush"]
    out.append(Target("flush_append", "flush append >= 2x sqlite3 WAL-NORMAL autocommit",
                      "sqlite3 / ours", g.row("sqlite_wal_normal").median_ns / g.row("jsonl_sessions").median_ns,
                      ">= 2.0"))
    g = by_id["load"]
    out.append(Target("try_load", "try_load <= 1.5x the orjson dict-level floor",
                      "ours / floor", g.row("jsonl_sessions").median_ns / g.row("floor").median_ns, "<= 1.5"))
    out.append(Target("try_load_dropped", "try_load <= 1.5x floor' (the literal loop, dicts dropped)",
                      "ours / floor'", g.row("jsonl_sessions").median_ns / g.row("floor_dropped").median_ns,
                      "<= 1.5"))
    for mode in ("flush", "fsync"):
        g = by_id[f"remove_last_{mode}"]
        out.append(Target(f"remove_last_{mode}", f'remove_last independent of size ("{mode}", within 1.5x)',
                          "big / small", g.row("jsonl_sessions").median_ns / g.row("jsonl_sessions_small").median_ns,
                          "<= 1.5"))
    return out


# -- environment --------------------------------------------------------------------------
def _unescape_mount(text: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, ch)
    return text


def filesystem_of(path: str) -> dict[str, str] | None:
    """The /proc/mounts entry holding ``path`` (longest mount-point prefix), if readable."""
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            entries = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best: dict[str, str] | None = None
    for parts in entries:
        if len(parts) < 4:
            continue
        mount = _unescape_mount(parts[1])
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best["mount"])):
            best = {"device": _unescape_mount(parts[0]), "mount": mount, "type": parts[2], "options": parts[3]}
    return best


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def environment(directory: str) -> dict[str, Any]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "cpu_model": cpu_model(),
        "dir": directory,
        "filesystem": filesystem_of(directory),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "jsonl_sessions": getattr(jsonl_sessions, "__version__", "?"),
        "orjson": orjson.__version__,
        "sqlite": sqlite3.sqlite_version,
        "timer_overhead_ns": timer_overhead_ns(),
        "loadavg_start": load_average(),
    }


def load_average() -> float | None:
    """The 1-minute load average (other processes make the numbers noisier)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


# -- output -------------------------------------------------------------------------------
def fmt_ns(ns: float) -> str:
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        us = ns / 1_000
        return f"{us:.2f} us" if us < 10 else f"{us:.1f} us"
    if ns < 1_000_000_000:
        ms = ns / 1_000_000
        return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def fmt_ratio(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


def header_lines(env: Mapping[str, Any], mode: str, sizes: Sizes) -> list[tuple[str, str]]:
    fs = env["filesystem"]
    if fs:
        fs_text = f"{fs['type']} ({fs['device']} on {fs['mount']}, {fs['options']})"
        if fs["type"] in ("tmpfs", "ramfs"):
            fs_text += "  WARNING: fsync is a no-op on a RAM file system"
    else:
        fs_text = "unknown (/proc/mounts not readable)"
    cpus = f"{env['cpu_count']} logical ({env['cpu_usable']} usable)"
    if env["cpu_model"]:
        cpus += f", {env['cpu_model']}"
    return [
        ("python", env["python"]),
        ("platform", env["platform"]),
        ("cpus", cpus),
        ("temp dir", env["dir"]),
        ("file system", fs_text),
        ("date", env["date"]),
        ("load avg", (f"{env['loadavg_start']} at start, {env.get('loadavg_end')} at end (1-minute; this run "
                      f"adds about 1, the rest is other processes sharing the {env['cpu_usable']} CPUs and the disk)")),
        ("versions", f"jsonl_sessions {env['jsonl_sessions']}, orjson {env['orjson']}, sqlite {env['sqlite']}"),
        ("timing", (f"{mode} run; perf_counter_ns per call, gc paused while timing, implementations take turns "
                    f"every {BLOCK_FAST} (us-scale) / {BLOCK_SLOW} (fsync-scale) calls; timer overhead "
                    f"{env['timer_overhead_ns']:.0f} ns per sample (included)")),
    ]


def render_text(env: Mapping[str, Any], mode: str, sizes: Sizes, groups: Sequence[Group],
                goals: Sequence[Target], elapsed: float) -> str:
    out = [f"jsonl_sessions benchmarks ({mode} run, {elapsed:.0f} s)"]
    out += [f"  {k:<12} {v}" for k, v in header_lines(env, mode, sizes)]
    out.append("")
    out.append("  vs floor = median / floor median;  vs ours = median / jsonl_sessions median (> 1: slower than ours)")
    out.append("")
    w = 62
    out.append(f"{'operation / implementation':<{w}} {'median':>10} {'p95':>10} {'vs floor':>9} {'vs ours':>8}")
    for g in groups:
        out.append(f"{g.title}  [{g.unit}]")
        for r in g.rows:
            out.append(f"  {r.label:<{w - 2}} {fmt_ns(r.median_ns):>10} {fmt_ns(r.p95_ns):>10} "
                       f"{fmt_ratio(r.vs_floor):>9} {fmt_ratio(r.vs_ours):>8}")
    out.append("")
    out.append("targets")
    for t in goals:
        verdict = "met   " if t.met else "MISSED"
        out.append(f"  {verdict}  {t.text:<58} {t.measure} = {t.value:.2f}x (need {t.need}x)")
    return "\n".join(out)


def render_markdown(env: Mapping[str, Any], mode: str, sizes: Sizes, groups: Sequence[Group],
                    goals: Sequence[Target]) -> str:
    out = [f"- {k}: {v}" for k, v in header_lines(env, mode, sizes)]
    out += ["", "| operation | implementation | median | p95 | vs floor | vs ours |", "|---|---|--:|--:|--:|--:|"]
    for g in groups:
        for i, r in enumerate(g.rows):
            op = f"**{g.title}**<br>{g.unit}" if i == 0 else ""
            label = f"**{r.label}**" if r.impl == g.ours else r.label
            out.append(f"| {op} | {label} | {fmt_ns(r.median_ns)} | {fmt_ns(r.p95_ns)} | "
                       f"{fmt_ratio(r.vs_floor)} | {fmt_ratio(r.vs_ours)} |")
    out += ["", "| target | measured | verdict |", "|---|--:|---|"]
    for t in goals:
        out.append(f"| {t.text} | {t.measure} = {t.value:.2f}x (need {t.need}x) | {'met' if t.met else '**missed**'} |")
    return "\n".join(out)


def to_json(env: Mapping[str, Any], mode: str, sizes: Sizes, groups: Sequence[Group],
            goals: Sequence[Target], elapsed: float) -> dict[str, Any]:
    return {
        "environment": dict(env),
        "mode": mode,
        "sizes": asdict(sizes),
        "elapsed_s": round(elapsed, 2),
        "groups": [
            {"id": g.id, "title": g.title, "unit": g.unit, "floor": g.floor, "ours": g.ours,
             "rows": [{"impl": r.impl, "label": r.label, "samples": len(r.samples), "median_ns": r.median_ns,
                       "p95_ns": r.p95_ns, "vs_floor": r.vs_floor, "vs_ours": r.vs_ours} for r in g.rows]}
            for g in groups
        ],
        "targets": [asdict(t) for t in goals],
    }


# -- main ---------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes for a smoke run (~10 s)")
    p.add_argument("--scale", type=float, default=1.0, metavar="F",
                   help="multiply every count by F (after --quick); for tests and slow disks")
    p.add_argument("--dir", metavar="DIR", default=None,
                   help="make the temp dir inside DIR (default: the system temp dir); it decides the file system")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the results as JSON to PATH")
    p.add_argument("--markdown", action="store_true", help="also print a README-ready Markdown table")
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
        env = environment(base)
        groups = Bench(base, sizes, progress).run_all()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.monotonic() - started
    env["loadavg_end"] = load_average()
    goals = targets(groups)
    print(render_text(env, mode, sizes, groups, goals, elapsed))
    if args.markdown:
        print()
        print(render_markdown(env, mode, sizes, groups, goals))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(to_json(env, mode, sizes, groups, goals, elapsed), f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
