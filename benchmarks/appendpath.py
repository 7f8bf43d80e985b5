"""One append, taken apart: the store next to bare Python making the same system calls, the
raw floor and stdlib sqlite3, all in one run, taking turns; then what each system call of
the append costs alone, and how many Python and C calls the store makes per append.

Run from the repository root::

    python -m benchmarks.appendpath                    # both modes, ~1 min
    python -m benchmarks.appendpath --quick            # smoke run
    python -m benchmarks.appendpath --baseline-rev REV # also the package at git revision REV
    python -m benchmarks.appendpath --loop ours flush 1200   # untimed appends, for an instruction counter

Rows of each mode (``"flush"``, ``"fsync"``), per message, realistic messages
(``MessageFactory``):

- **floor**: ``os.write`` of the encoded line (+ ``os.fsync``) on a descriptor kept open;
- **bare Python** (:class:`benchmarks.bare.BareAppend`): the store's warm append as one
  function, with exactly its system calls and guarantees;
- **jsonl_sessions**: ``store.append(key, dict)``;
- **sqlite3**: WAL, autocommit ``INSERT`` of the same record into an ``INTEGER PRIMARY KEY``
  table, ``synchronous=NORMAL`` (flush) / ``FULL`` (fsync).

The **system calls alone** group times each call of a warm flush append on its own (the
same descriptors and sizes), so that "what would removing this call buy" is read off the
same run. Call counts come from ``sys.setprofile`` ('call' and 'c_call' events) over
1,000 appends of a 200-byte message, bytecode counts from ``sys.settrace`` (opcode
events) over 500 appends of realistic messages. A measurement, never a gate: exit status 0.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import functools
import mmap
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/appendpath.py`: import from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import baseline as older
from benchmarks.appendops import append_ops, append_rows
from benchmarks.bare import BareAppend
from benchmarks.environ import environment, header_lines, load_average
from benchmarks.hotloop import MESSAGE
from benchmarks.measure import BLOCK_FAST, BLOCK_SLOW, Group, Row, Target, interleaved
from benchmarks.table import render_markdown, render_text
from benchmarks.workload import MessageFactory, open_append
from jsonl_sessions import SessionStore

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


#: Variants of the bare append (flush mode): the seam's cost, and what dropping a system call buys.
VARIANTS: dict[str, tuple[dict[str, bool], str]] = {
    "bare_seam": ({"seam": True}, "bare Python, every call through jsonl_sessions._platform"),
    "bare_fstat": ({"fstat": True}, "bare Python with an fstat after the write, as before (7 calls)"),
    "bare_no_count": ({"no_count": True}, "bare Python without the count cache's pwrite (5 calls)"),
    "bare_mapped": ({"mapped": True}, "bare Python, control file mapped: no pread, no pwrite (4 calls)"),
}


def append_group(base: str, mode: str, count: int, pool: list[dict[str, Any]], baseline: Any,
                 closers: list[Callable[[], object]]) -> Group:
    flush = mode == "flush"
    d = os.path.join(base, f"append-{mode}")
    os.makedirs(d)
    ops, _store = append_ops(d, mode, pool, closers, baseline)  # the appends benchmarks.run times too
    variants = VARIANTS if flush else {}
    for name, (options, _label) in variants.items():
        os.makedirs(os.path.join(d, name))
        variant = BareAppend(os.path.join(d, name), durable=not flush, **options)
        closers.append(variant.close)
        ops[name] = functools.partial(_append_nth, variant.append, pool)
    samples = interleaved(ops, count=count, block=BLOCK_FAST if flush else BLOCK_SLOW, warmup=100 if flush else 10)
    rows = append_rows(mode, samples, "jsonl_sessions at the baseline revision" if baseline is not None else None)
    rows += [Row(name, label, samples[name]) for name, (_options, label) in variants.items()]
    return Group(f"append_{mode}", f'append, durability="{mode}"', f"per message, {count:,} appends", rows).finish()


def _append_nth(append: Callable[[dict[str, Any]], object], pool: list[dict[str, Any]], i: int) -> object:
    return append(pool[i % len(pool)])


def syscall_group(base: str, count: int, closers: list[Callable[[], object]]) -> Group:
    """Each system call of a warm flush append, alone, on files like the store's."""
    d = os.path.join(base, "calls")
    os.makedirs(d)
    lock_path, path = os.path.join(d, "s.lock"), os.path.join(d, "s.jsonl")
    lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o600)
    os.pwrite(lock_fd, bytes(56), 0)
    fd = open_append(path)
    closers.append(functools.partial(os.close, fd))
    closers.append(functools.partial(os.close, lock_fd))
    line = b'{"id":"01JABCDEFGHJKMNPQRSTVWXYZ0","created_at":1733300000000,"role":"user"}'.ljust(599) + b"\n"
    count_bytes = bytes(40)
    mapped = mmap.mmap(lock_fd, 56)
    closers.append(mapped.close)
    pread, pwrite, lstat, fstat, flock = os.pread, os.pwrite, os.lstat, os.fstat, fcntl.flock
    ex, un = fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN

    def lock_pair(i: int) -> None:
        flock(lock_fd, ex)
        flock(lock_fd, un)

    def mapped_head(i: int) -> None:
        mapped[16:56] = mapped[0:40]

    ops: dict[str, Callable[[int], object]] = {
        "write": lambda i: os.write(fd, line),
        "flock": lock_pair,
        "pread": lambda i: pread(lock_fd, 4096, 0),
        "lstat": lambda i: lstat(path),
        "fstat": lambda i: fstat(fd),
        "pwrite": lambda i: pwrite(lock_fd, count_bytes, 16),
        "mmap": mapped_head,
    }
    samples = interleaved(ops, count=count, block=BLOCK_FAST, warmup=100)
    rows = [
        Row("write", "write(2) of a 600-byte line, O_APPEND (the floor)", samples["write"]),
        Row("flock", "flock(LOCK_EX|LOCK_NB) + flock(LOCK_UN)", samples["flock"]),
        Row("pread", "pread(2) of the 56-byte control file", samples["pread"]),
        Row("lstat", "lstat(2) of the transcript", samples["lstat"]),
        Row("fstat", "fstat(2) of the transcript (made after the write before)", samples["fstat"]),
        Row("pwrite", "pwrite(2) of the 40-byte count cache", samples["pwrite"]),
        Row("mmap", "the same 40 bytes read and stored through a mapping (no system call)", samples["mmap"]),
    ]
    return Group("syscalls", "system calls of a warm flush append, each alone", f"per call, {count:,} calls", rows,
                 floor="write", ours="write").finish()


def call_counts(base: str, mode: str, n: int = 1000) -> tuple[float, float, list[tuple[str, float]]]:
    """Python calls and C calls per warm append (sys.setprofile over ``n`` appends), and the
    Python functions called, per append."""
    store = SessionStore(os.path.join(base, f"calls-{mode}"), durability=mode)  # type: ignore[arg-type]
    for _ in range(5):
        store.append("warm", MESSAGE)
    py: collections.Counter[str] = collections.Counter()
    c = [0]

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            py[getattr(frame.f_code, "co_qualname", frame.f_code.co_name)] += 1
        elif event == "c_call":
            c[0] += 1

    sys.setprofile(profile)
    try:
        for _ in range(n):
            store.append("warm", MESSAGE)
    finally:
        sys.setprofile(None)
    c[0] -= 1  # the setprofile(None) call itself
    return sum(py.values()) / n, c[0] / n, [(name, k / n) for name, k in py.most_common()]


def bytecode_counts(base: str, mode: str, n: int = 500) -> dict[str, float]:
    """Bytecodes executed per warm append (``sys.settrace`` with opcode events over ``n``
    appends of realistic messages) by the store and by the bare function. Under tracing an
    append takes more than a millisecond, so the ULID's first 16 characters are made
    afresh nearly every time (in both), which a timed run seldom does."""
    pool = MessageFactory().make(1000, salt=1)
    durable = mode == "fsync"
    d = os.path.join(base, f"bytecodes-{mode}")
    os.makedirs(os.path.join(d, "bare"))
    bare = BareAppend(os.path.join(d, "bare"), durable=durable)
    store = SessionStore(os.path.join(d, "store"), durability=mode)  # type: ignore[arg-type]
    appends: dict[str, Callable[[dict[str, Any]], object]] = {
        "jsonl_sessions": functools.partial(store.append, "k"), "bare": bare.append}
    out: dict[str, float] = {}
    try:
        for name, append in appends.items():
            for i in range(50):
                append(pool[i])
            out[name] = _bytecodes(append, pool, n)
    finally:
        bare.close()
    return out


def _bytecodes(append: Callable[[dict[str, Any]], object], pool: list[dict[str, Any]], n: int) -> float:
    ops = [0]

    def trace(frame: FrameType, event: str, _arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            ops[0] += 1
        return trace

    sys.settrace(trace)
    try:
        for i in range(n):
            append(pool[i % len(pool)])
    finally:
        sys.settrace(None)
    return ops[0] / n


def goals(groups: Sequence[Group]) -> list[Target]:
    by = {g.id: g for g in groups}

    def ratio(gid: str, num: str, den: str) -> float:
        return by[gid].row(num).median_ns / by[gid].row(den).median_ns

    out = [
        Target("bare_flush", 'append "flush" / bare Python with the same system calls', "ours / bare",
               ratio("append_flush", "jsonl_sessions", "bare"), "<= 1.15"),
        Target("bare_fsync", 'append "fsync" / bare Python with the same system calls', "ours / bare",
               ratio("append_fsync", "jsonl_sessions", "bare"), "<= 1.15"),
        Target("durable_append", "durable append rate / raw os.write+os.fsync loop", "floor / ours",
               ratio("append_fsync", "floor", "jsonl_sessions"), ">= 0.85"),
        Target("flush_append", "flush append rate / sqlite3 WAL NORMAL INSERT, INTEGER PRIMARY KEY",
               "sqlite3 / ours", ratio("append_flush", "sqlite_intpk", "jsonl_sessions"), ">= 1.0"),
        Target("bare_seam", 'append "flush" / bare Python through the platform seam', "ours / bare seam",
               ratio("append_flush", "jsonl_sessions", "bare_seam"), None),
        Target("flush_bare_sqlite", "bare Python flush append rate / the same sqlite3", "sqlite3 / bare",
               ratio("append_flush", "sqlite_intpk", "bare"), None),
    ]
    for name in ("bare_fstat", "bare_no_count", "bare_mapped"):
        out.append(Target(f"flush_{name}", f"{VARIANTS[name][1]}: rate / sqlite3", "sqlite3 / variant",
                          ratio("append_flush", "sqlite_intpk", name), None))
    if any(r.impl == "baseline" for r in by["append_flush"].rows):
        out += [
            Target("bare_flush_baseline", '[baseline] append "flush" / bare Python', "baseline / bare",
                   ratio("append_flush", "baseline", "bare"), "<= 1.15"),
            Target("bare_fsync_baseline", '[baseline] append "fsync" / bare Python', "baseline / bare",
                   ratio("append_fsync", "baseline", "bare"), "<= 1.15"),
            Target("durable_baseline", "[baseline] durable append rate / raw loop", "floor / baseline",
                   ratio("append_fsync", "floor", "baseline"), ">= 0.85"),
            Target("flush_baseline", "[baseline] flush append rate / sqlite3", "sqlite3 / baseline",
                   ratio("append_flush", "sqlite_intpk", "baseline"), ">= 1.0"),
        ]
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.appendpath", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer appends, for a smoke run")
    p.add_argument("--flush", type=int, default=20_000, metavar="N", help="flush appends per implementation")
    p.add_argument("--fsync", type=int, default=1_500, metavar="N", help="fsync appends per implementation")
    p.add_argument("--calls", type=int, default=1000, metavar="N", help="appends the call counts are taken over")
    p.add_argument("--dir", metavar="DIR", default=None, help="make the temp dir inside DIR")
    p.add_argument("--baseline-rev", metavar="REV", default=None,
                   help="also time the package as it was at git revision REV, taking turns")
    p.add_argument("--markdown", action="store_true", help="also print the tables as Markdown")
    p.add_argument("--label", metavar="TEXT", default=None, help="a note printed first in the header")
    return p.parse_args(argv)


def loop(impl: str, durability: str, count: int) -> int:
    """``count`` warm appends of realistic messages by the store (``ours``) or the bare
    function (``bare``), untimed: the body an instruction counter measures (see
    benchmarks/README.md, "One append, taken apart")."""
    pool = MessageFactory().make(1000, salt=1)
    base = tempfile.mkdtemp(prefix="jsonl-sessions-appendloop-")
    try:
        if impl == "bare":
            bare = BareAppend(base, durable=durability == "fsync")
            append: Callable[[dict[str, Any]], object] = bare.append
        else:
            store = SessionStore(base, durability=durability)  # type: ignore[arg-type]
            append = functools.partial(store.append, "k")
        for i in range(50):
            append(pool[i])
        for i in range(count):
            append(pool[i % 1000])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["--loop"]:  # python -m benchmarks.appendpath --loop ours|bare flush|fsync COUNT
        return loop(raw[1], raw[2], int(raw[3]))
    args = parse_args(raw)
    n_flush, n_fsync = (600, 60) if args.quick else (args.flush, args.fsync)
    base = tempfile.mkdtemp(prefix="jsonl-sessions-appendpath-", dir=args.dir)
    closers: list[Callable[[], object]] = []
    started = time.monotonic()
    try:
        env = environment(base, args.label)
        old = older.load(args.baseline_rev, base) if args.baseline_rev else None
        pool = MessageFactory().make(1000, salt=1)
        groups = [append_group(base, "flush", n_flush, pool, old, closers),
                  append_group(base, "fsync", n_fsync, pool, old, closers),
                  syscall_group(base, n_flush, closers)]
        counts = {mode: call_counts(base, mode, max(args.calls, 1)) for mode in ("flush", "fsync")}
        opcodes = {mode: bytecode_counts(base, mode, max(args.calls // 2, 1)) for mode in ("flush", "fsync")}
    finally:
        for close in reversed(closers):
            try:
                close()
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)
    env["loadavg_end"] = load_average()
    header = header_lines(env, "quick" if args.quick else "full")
    measured = goals(groups)
    print(render_text(f"one append, taken apart ({time.monotonic() - started:.0f} s)", header, groups, measured))
    print()
    for mode, (py, c, names) in counts.items():
        print(f'calls per warm append, durability="{mode}": {py:.0f} Python, {c:.0f} C '
              f"(sys.setprofile, {args.calls:,} appends of a {len(MESSAGE['content'])}-character message)")
        print("  " + ", ".join(f"{name}" + (f" x{k:g}" if k != 1 else "") for name, k in names))
    for mode, found in opcodes.items():
        print(f'bytecodes per warm append, durability="{mode}": {found["jsonl_sessions"]:,.0f} jsonl_sessions, '
              f'{found["bare"]:,.0f} bare Python (sys.settrace opcode events, {max(args.calls // 2, 1):,} appends)')
    if args.markdown:
        print()
        print(render_markdown(header, groups, measured))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
