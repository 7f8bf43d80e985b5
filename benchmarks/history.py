"""jsonl_sessions history benchmarks: count, get_message, a window at the end, page(50) and
copy_messages on 1k / 100k / 1M-message sessions, next to their floors and stdlib sqlite3
(with an index) doing the same queries, in one run.

Run from the repository root::

    python -m benchmarks.history                 # full run (~3-5 min; builds a ~600 MB session)
    python -m benchmarks.history --quick         # 1k / 10k / 100k sessions (~30 s)
    python -m benchmarks.history --markdown --json history.json

Conventions are those of ``benchmarks/run.py`` (the helpers of ``benchmarks.measure`` and ``benchmarks.table``): every call
timed alone with ``perf_counter_ns``, garbage collector paused, warm-up first,
implementations taking turns every few calls, medians and p95, ratios of medians measured
in the same run, an environment header, and goals printed as met / missed with exit
status 0 (a measurement, never a gate). Reads run with a warm page cache.

What "the same query" is for sqlite3 (one table ``messages(session, id, created_at,
body)``, primary key ``(session, id)``, WITHOUT ROWID, WAL):

- count: ``SELECT count(*) WHERE session=?``;
- get_message: ``SELECT body WHERE session=? AND id=?`` + ``orjson.loads``;
- window at the end: ``SELECT body WHERE session=? ORDER BY id LIMIT 50 OFFSET n-50``;
- page(50): ``SELECT body WHERE session=? ORDER BY id DESC LIMIT 50`` (reversed);
- page(50, before=cursor in the middle): the same with ``AND id < ?``;
- copy_messages: ``INSERT INTO messages SELECT ?, id, created_at, body FROM messages
  WHERE session=?``, one transaction (synchronous FULL / NORMAL).

Floors: an ``os.stat`` for count (the least a file-based answer costs; the naive
whole-file newline count is shown too); for reads, ``os.pread`` of the known byte range
(an in-memory offset index: 64 KiB blocks read backwards from the end or from the
cursor's line) + ``orjson.loads`` of exactly the lines returned; for copy, a raw file
copy (``shutil.copyfile``, which uses sendfile on Linux; + fsync, rename and directory
fsync in fsync mode).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/history.py`: import from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson

from benchmarks import sqlite_backend as backend
from benchmarks.environ import environment, header_lines, load_average
from benchmarks.measure import BLOCK_FAST, Group, Row, Target, gc_paused, interleaved, settle
from benchmarks.table import render_markdown, render_text, to_json
from benchmarks.workload import FAIR_SCHEMA, MessageFactory, fsync_dir
from jsonl_sessions import SessionStore
from jsonl_sessions.keys import key_to_stem

_pc = time.perf_counter_ns
_loads = orjson.loads
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
PAGE = 50


@dataclass(frozen=True)
class Sizes:
    sessions: tuple[int, ...] = (1_000, 100_000, 1_000_000)  # messages per session
    calls: int = 2_000  # timed calls per read operation and implementation
    copy_messages: int = 100_000  # the copied session
    copy_reps: int = 7

    def scaled(self, factor: float) -> Sizes:
        return replace(
            self,
            sessions=tuple(max(100 * 4**i, round(n * factor)) for i, n in enumerate(self.sessions)),
            calls=max(20, round(self.calls * factor)),
            copy_messages=max(100, round(self.copy_messages * factor)),
            copy_reps=max(2, round(self.copy_reps * factor)),
        )


FULL = Sizes()
QUICK = Sizes(sessions=(1_000, 10_000, 100_000), calls=300, copy_messages=10_000, copy_reps=3)


def label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else \
        f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


@dataclass
class Session:
    """One benchmark session: its key, size, file, and a sample of (id, offset, length)."""

    key: str
    n: int
    path: str
    bytes: int
    sample: list[tuple[str, int, int]]  # random lines: id, byte offset, length with newline
    middle: tuple[str, int]  # the line in the middle: id, offset


class HistoryBench:
    def __init__(self, base: str, sizes: Sizes, progress: Callable[[str], None]) -> None:
        self.base = base
        self.sizes = sizes
        self.progress = progress
        self.factory = MessageFactory()
        self.root = os.path.join(base, "store")
        self.store = SessionStore(self.root, durability="flush")
        self.conn = sqlite3.connect(os.path.join(base, "peer.sqlite"), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute(FAIR_SCHEMA)
        self.db = backend.open_backend(base, "flush")
        self.fds: list[int] = []

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.conn.close()
        self.db.close()

    # -- data ---------------------------------------------------------------------------
    def build(self, key: str, n: int, seed: int) -> Session:
        """The session through the store (append_many of 10k), the same rows in sqlite3."""
        batch = 10_000
        for lo in range(0, n, batch):
            self.store.append_many(key, self.factory.make(min(batch, n - lo), salt=seed * 1000 + lo // batch))
        path = os.path.join(self.root, key_to_stem(key) + ".jsonl")
        rng = random.Random(seed)
        wanted = set(rng.sample(range(n), min(n, 2000)))
        sample: list[tuple[str, int, int]] = []
        middle = ("", 0)
        rows: list[tuple[str, str, int, bytes]] = []
        self.conn.execute("BEGIN")
        with open(path, "rb") as f:
            offset = 0
            for i, line in enumerate(f):
                record = _loads(line)
                rows.append((key, record["id"], record["created_at"], line[:-1]))
                if len(rows) >= 20_000:
                    self.conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?)", rows)
                    rows.clear()
                if i in wanted:
                    sample.append((record["id"], offset, len(line)))
                if i == n // 2:
                    middle = (record["id"], offset)
                offset += len(line)
        self.conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?)", rows)
        self.conn.execute("COMMIT")
        rng.shuffle(sample)
        backend.mirror(self.store, self.db, key)
        if self.store.get_message_count(key) != n or self.db.get_message_count(key) != n:
            raise RuntimeError("build: wrong message count")
        return Session(key, n, path, os.path.getsize(path), sample, middle)

    def open_fd(self, path: str) -> int:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        self.fds.append(fd)
        return fd

    # -- reads --------------------------------------------------------------------------
    def reads(self, sessions: Sequence[Session]) -> list[Group]:
        calls = self.sizes.calls
        groups: list[Group] = []
        store, conn, db = self.store, self.conn, self.db
        per_op: dict[str, list[tuple[Session, dict[str, Callable[[int], object]], dict[str, str]]]] = {}
        for s in sessions:
            fd = self.open_fd(s.path)
            key, n, sample, size = s.key, s.n, s.sample, s.bytes
            mid_id, mid_off = s.middle
            m = len(sample)

            def tail_floor(i: int, fd: int = fd, end: int = size) -> list[Any]:
                return floor_lines_before(fd, end, PAGE)

            def before_floor(i: int, fd: int = fd, end: int = mid_off) -> list[Any]:
                return floor_lines_before(fd, end, PAGE)

            def get_floor(i: int, fd: int = fd, sample: list[tuple[str, int, int]] = sample, m: int = m) -> Any:
                _id, offset, length = sample[i % m]
                return _loads(os.pread(fd, length, offset))

            def get_ours(i: int, key: str = key, sample: list[tuple[str, int, int]] = sample, m: int = m) -> Any:
                return store.get_message(key, sample[i % m][0])

            def get_sqlite(i: int, key: str = key, sample: list[tuple[str, int, int]] = sample, m: int = m) -> Any:
                (body,) = conn.execute("SELECT body FROM messages WHERE session = ? AND id = ?",
                                       (key, sample[i % m][0])).fetchone()
                return _loads(body)

            def count_naive(i: int, path: str = s.path) -> int:
                with open(path, "rb") as f:
                    return f.read().count(b"\n")

            per_op.setdefault("count", []).append((s, {
                "floor": lambda i, path=s.path: os.stat(path),
                "naive": count_naive,
                "jsonl_sessions": lambda i, key=key: store.get_message_count(key),
                backend.ROW: lambda i, key=key: db.get_message_count(key),
                "sqlite": lambda i, key=key: conn.execute(
                    "SELECT count(*) FROM messages WHERE session = ?", (key,)).fetchone()[0],
            }, {"floor": "floor: os.stat of the transcript",
                "naive": "naive: read the file, count newlines",
                "jsonl_sessions": "jsonl_sessions get_message_count",
                backend.ROW: "jsonl_sessions.sqlite get_message_count (kept in the session row)",
                "sqlite": "sqlite3 SELECT count(*) WHERE session=? (PK index)"}))
            per_op.setdefault("get_message", []).append((s, {
                "floor": get_floor, "jsonl_sessions": get_ours, "sqlite": get_sqlite,
                backend.ROW: lambda i, key=key, sample=sample, m=m: db.get_message(key, sample[i % m][0]),
            }, {"floor": "floor: pread of the known line + orjson.loads",
                "jsonl_sessions": "jsonl_sessions get_message (binary search)",
                backend.ROW: "jsonl_sessions.sqlite get_message ((session, id) index)",
                "sqlite": "sqlite3 SELECT body WHERE session=? AND id=?"}))
            per_op.setdefault("window_end", []).append((s, {
                "floor": tail_floor,
                "jsonl_sessions": lambda i, key=key, n=n: store.get_messages(key, offset=n - PAGE, limit=PAGE),
                backend.ROW: lambda i, key=key, n=n: db.get_messages(key, offset=n - PAGE, limit=PAGE),
                "sqlite": lambda i, key=key, n=n: [_loads(b) for (b,) in conn.execute(
                    "SELECT body FROM messages WHERE session = ? ORDER BY id LIMIT ? OFFSET ?", (key, PAGE, n - PAGE))],
            }, {"floor": "floor: 64 KiB preads back from the end + loads of 50",
                "jsonl_sessions": "jsonl_sessions get_messages(offset=n-50, limit=50)",
                backend.ROW: "jsonl_sessions.sqlite get_messages(offset=n-50, limit=50) (seq range)",
                "sqlite": "sqlite3 ORDER BY id LIMIT 50 OFFSET n-50"}))
            per_op.setdefault("page", []).append((s, {
                "floor": tail_floor,
                "jsonl_sessions": lambda i, key=key: store.page(key, limit=PAGE),
                backend.ROW: lambda i, key=key: db.page(key, limit=PAGE),
                "sqlite": lambda i, key=key: [_loads(b) for (b,) in reversed(conn.execute(
                    "SELECT body FROM messages WHERE session = ? ORDER BY id DESC LIMIT ?", (key, PAGE)).fetchall())],
            }, {"floor": "floor: 64 KiB preads back from the end + loads of 50",
                "jsonl_sessions": "jsonl_sessions page(limit=50)",
                backend.ROW: "jsonl_sessions.sqlite page(limit=50)",
                "sqlite": "sqlite3 ORDER BY id DESC LIMIT 50"}))
            per_op.setdefault("page_before", []).append((s, {
                "floor": before_floor,
                "jsonl_sessions": lambda i, key=key, c=mid_id: store.page(key, limit=PAGE, before=c),
                backend.ROW: lambda i, key=key, c=mid_id: db.page(key, limit=PAGE, before=c),
                "sqlite": lambda i, key=key, c=mid_id: [_loads(b) for (b,) in reversed(conn.execute(
                    "SELECT body FROM messages WHERE session = ? AND id < ? ORDER BY id DESC LIMIT ?",
                    (key, c, PAGE)).fetchall())],
            }, {"floor": "floor: 64 KiB preads back from the known cursor offset + loads",
                "jsonl_sessions": "jsonl_sessions page(limit=50, before=middle id)",
                backend.ROW: "jsonl_sessions.sqlite page(limit=50, before=middle id)",
                "sqlite": "sqlite3 AND id < ? ORDER BY id DESC LIMIT 50"}))
        titles = {"count": ("get_message_count", "per call"),
                  "get_message": ("get_message(random id)", "per call"),
                  "window_end": ("get_messages window of 50 at the end", "per call"),
                  "page": ("page(limit=50), newest", "per call"),
                  "page_before": ("page(limit=50, before=cursor in the middle)", "per call")}
        for op, entries in per_op.items():
            for s, ops, labels in entries:
                self.progress(f"{op} on {label(s.n)} ...")
                # sqlite3's count(*) and OFFSET walk the index: O(n) per call, so fewer calls on big sessions
                count = calls if op not in ("count", "window_end") or s.n <= 100_000 else max(20, calls // 20)
                naive_count = max(5, min(count, 2_000_000 // max(1, s.n)))
                samples = interleaved({k: v for k, v in ops.items() if k != "naive"}, count=count,
                                      block=BLOCK_FAST, warmup=10)
                if "naive" in ops:
                    samples["naive"] = interleaved({"naive": ops["naive"]}, count=naive_count, block=BLOCK_FAST,
                                                   warmup=2)["naive"]
                title, unit = titles[op]
                rows = [Row(k, labels[k], samples[k]) for k in ops]
                groups.append(Group(f"{op}:{label(s.n)}", f"{title}, {label(s.n)} messages ({s.bytes / 1e6:.1f} MB)",
                                    f"{unit}, {count:,} calls", rows).finish())
        return groups

    # -- copy ---------------------------------------------------------------------------
    def copy(self, source: Session) -> list[Group]:
        groups = []
        reps = self.sizes.copy_reps
        conn = self.conn
        for mode in ("fsync", "flush"):
            durable = mode == "fsync"
            store = SessionStore(self.root, durability=mode)
            db = backend.open_backend(self.base, mode)  # type: ignore[arg-type]  # the same file as self.db
            self.conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            floor_dir = os.path.join(self.base, f"raw-{mode}")
            os.makedirs(floor_dir, exist_ok=True)

            def floor(durable: bool = durable, floor_dir: str = floor_dir) -> None:
                raw_copy(source.path, os.path.join(floor_dir, "copy.jsonl"), durable)

            def sqlite_copy() -> None:
                conn.execute("BEGIN")
                conn.execute("INSERT INTO messages SELECT 'copy', id, created_at, body FROM messages WHERE session = ?",
                             (source.key,))
                conn.execute("COMMIT")

            ops: dict[str, Callable[[], object]] = {
                "floor": floor,
                "jsonl_sessions": lambda store=store: store.copy_messages(source.key, "copy"),
                "sqlite": sqlite_copy,
                backend.ROW: lambda db=db: db.copy_messages(source.key, "copy"),
            }
            cleanup: dict[str, Callable[[], object]] = {
                "floor": lambda floor_dir=floor_dir: os.unlink(os.path.join(floor_dir, "copy.jsonl")),
                "jsonl_sessions": lambda store=store: store.delete_session("copy"),
                "sqlite": lambda: conn.execute("DELETE FROM messages WHERE session = 'copy'"),
                backend.ROW: lambda db=db: db.delete_session("copy"),
            }
            self.progress(f"copy_messages ({mode}) of {label(source.n)} ...")
            samples = timed_with_cleanup(ops, cleanup, reps)
            if store.session_exists("copy"):
                raise RuntimeError("copy benchmark: cleanup failed")
            sync = "FULL" if durable else "NORMAL"
            rows = [
                Row("floor", "floor: shutil.copyfile" + (" + fsync + rename + dir fsync" if durable else ""),
                    samples["floor"]),
                Row("jsonl_sessions", f'jsonl_sessions copy_messages, durability="{mode}"', samples["jsonl_sessions"]),
                Row("sqlite", f"sqlite3 INSERT ... SELECT, one transaction, sync={sync}", samples["sqlite"]),
                Row(backend.ROW, backend.label("copy_messages", mode), samples[backend.ROW]),
            ]
            db.close()
            groups.append(Group(f"copy_{mode}:{label(source.n)}",
                                f'copy_messages of {label(source.n)} messages ({source.bytes / 1e6:.1f} MB), '
                                f'durability="{mode}"', f"per copy, {reps} reps", rows).finish())
        return groups


def floor_lines_before(fd: int, end: int, n: int) -> list[Any]:
    """The least a reader of the ``n`` lines before byte ``end`` can do: 64 KiB preads
    backwards until ``n`` lines are complete, then orjson.loads of those lines."""
    buf = b""
    pos = end
    while buf.count(b"\n") <= n and pos > 0:
        read = min(65536, pos)
        pos -= read
        buf = os.pread(fd, read, pos) + buf
    return [_loads(line) for line in buf.split(b"\n")[-n - 1 : -1]]


def raw_copy(src: str, dst: str, durable: bool) -> None:
    if not durable:
        shutil.copyfile(src, dst)
        return
    tmp = os.path.join(os.path.dirname(dst), "." + os.path.basename(dst) + ".tmp")
    shutil.copyfile(src, tmp)
    fd = os.open(tmp, os.O_RDONLY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, dst)
    fsync_dir(os.path.dirname(dst))


def timed_with_cleanup(ops: Mapping[str, Callable[[], object]], cleanup: Mapping[str, Callable[[], object]],
                       reps: int) -> dict[str, list[int]]:
    """One untimed warm-up of each op, then ``reps`` rounds timing each once (order rotated);
    ``cleanup`` runs untimed after every call, and os.sync() before each timed call so that
    one implementation's write-back is never charged to the next."""
    names = list(ops)
    samples: dict[str, list[int]] = {name: [] for name in names}
    for name in names:
        ops[name]()
        cleanup[name]()
    for r in range(reps):
        for name in names[r % len(names):] + names[: r % len(names)]:
            settle()
            with gc_paused():
                t0 = _pc()
                ops[name]()
                t1 = _pc()
            samples[name].append(t1 - t0)
            cleanup[name]()
    return samples


def targets(groups: Sequence[Group], sizes: Sizes) -> list[Target]:
    by_id = {g.id: g for g in groups}
    small, large = label(sizes.sessions[0]), label(sizes.sessions[-1])
    page_small = by_id[f"page:{small}"].row("jsonl_sessions").median_ns
    page_large = by_id[f"page:{large}"].row("jsonl_sessions").median_ns
    count_small = by_id[f"count:{small}"].row("jsonl_sessions").median_ns
    count_large = by_id[f"count:{large}"].row("jsonl_sessions").median_ns
    copy = by_id[f"copy_fsync:{label(sizes.copy_messages)}"]
    return [
        Target("page_flat", f"page(50) at {large} within 3x of page(50) at {small}", f"{large} / {small}",
               page_large / page_small, "<= 3.0"),
        Target("count_flat", f"count flat: at {large} within 1.5x of at {small}", f"{large} / {small}",
               count_large / count_small, "<= 1.5"),
        Target("copy_vs_raw", "copy_messages (fsync) within 2x of a raw durable file copy", "ours / floor",
               copy.row("jsonl_sessions").median_ns / copy.row("floor").median_ns, "<= 2.0"),
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.history", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1k / 10k / 100k sessions, fewer calls (~30 s)")
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
        print(f"[benchmarks.history] {text}", file=sys.stderr, flush=True)

    base = tempfile.mkdtemp(prefix="jsonl-sessions-history-bench-", dir=args.dir)
    started = time.monotonic()
    bench = None
    try:
        env = environment(base)
        bench = HistoryBench(base, sizes, progress)
        sessions = []
        for i, n in enumerate(sizes.sessions):
            progress(f"building a {label(n)}-message session ...")
            sessions.append(bench.build(f"s{label(n)}", n, seed=i + 1))
        source = next((s for s in sessions if s.n == sizes.copy_messages), None)
        if source is None:
            progress(f"building a {label(sizes.copy_messages)}-message session to copy ...")
            source = bench.build(f"c{label(sizes.copy_messages)}", sizes.copy_messages, seed=99)
        groups = bench.reads(sessions) + bench.copy(source)
    finally:
        if bench is not None:
            bench.close()
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.monotonic() - started
    env["loadavg_end"] = load_average()
    goals = targets(groups, sizes)
    header = header_lines(env, mode)
    print(render_text(f"jsonl_sessions history benchmarks ({mode} run, {elapsed:.0f} s)", header, groups, goals))
    if args.markdown:
        print()
        print(render_markdown(header, groups, goals))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(to_json(env, mode, sizes, groups, goals, elapsed), f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
