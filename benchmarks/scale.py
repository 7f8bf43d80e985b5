"""Costs that grow with the store, each next to its floor in the same run: the import of
the package, the peak memory of loading a large session, listing many sessions with their
metadata, and searching a large store.

Every measurement runs in a fresh child process (``python -c``), so imports, memory peaks
and caches of one measurement never leak into another; the implementations take turns
every round and the report gives medians. ``--baseline-rev REV`` (or ``--baseline DIR``)
runs the same children against another version of the package, in the same run,
interleaved, for before/after figures. The package is copied to the temp dir and compiled
to bytecode first (as an installed package is), for every version measured.

    python -m benchmarks.scale                        # 10k sessions, 200 MB search store
    python -m benchmarks.scale --quick                # small sizes, a smoke run
    python -m benchmarks.scale --big                  # a 1 GB search store
    python -m benchmarks.scale --baseline-rev HEAD~5  # also the package as it was at HEAD~5

Goals (ratios of medians measured in this run):

- ``import jsonl_sessions`` minus a bare ``python -c pass``: <= 60 ms;
- peak RSS of ``try_load`` / of the floor (a line-by-line read, ``orjson.loads`` of each
  line kept in a list), each the growth of the process's peak RSS (``VmHWM``, reset just
  before the call) over its size before the call: <= 1.5;
- ``list_sessions_with_metadata`` / a ``scandir`` of the root with an ``lstat`` of every
  transcript: <= 4, for a store object that listed before (what an app's sidebar or the
  viewer does), for the first listing of a new store object (what one ``ls`` does), and
  for the full listing sorted by name;
- ``search`` of a keyword found in one session / ``grep -ci`` of it over the same files: <= 5.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/scale.py`: import the package from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.environ import environment, header_lines, load_average
from benchmarks.workload import MessageFactory
from jsonl_sessions import ChatMessage, SessionStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: How long after the sessions are written the listing is measured: past the 2 s after which
#: a listing may reuse what it read of a session (jsonl/listcache.py, SETTLED_NS).
SETTLE_SECONDS = 2.2
#: A word the workload's corpus never holds: the search keyword, in one message only.
NEEDLE = "xylophonist"

# The child: one measurement, its result as JSON on stdout.
CHILD = r'''
import json, os, resource, sys, time
args = json.loads(sys.argv[1])
kind = args["kind"]
pc = time.perf_counter_ns
if kind == "rss":
    import orjson
    op = args["op"]
    if op != "floor":
        from jsonl_sessions import SessionStore
        store = SessionStore(args["root"], durability="flush")
    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    import gc; gc.collect()
    try:  # the peak so far becomes the current size ("5": reset the peak RSS, Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = status("VmRSS")
    except OSError:  # ru_maxrss: only meaningful when the peak is still ahead (it survives exec)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if op == "floor":
        with open(args["path"], "rb") as f:
            result = [orjson.loads(line) for line in f]
    elif op == "try_load":
        result = store.try_load(args["key"])
    else:
        result = store.load(args["key"])
    try:
        peak = status("VmHWM")
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert len(result) == args["expect"], len(result)
    print(json.dumps({"kib": peak - before}))
elif kind == "list":
    root = args["root"]
    if args["impl"] == "floor":
        def op():
            out = []
            with os.scandir(root) as entries:
                for entry in entries:
                    if entry.name.endswith(".jsonl"):
                        out.append((entry.name, entry.stat(follow_symlinks=False)))
            return out
    elif args["impl"] == "first":  # the first listing of a new store object, as a CLI's ls makes
        from jsonl_sessions import SessionStore
        samples = []
        for _ in range(args["reps"]):
            store = SessionStore(root, durability="flush")
            t0 = pc(); found = store.list_sessions_with_metadata(); samples.append(pc() - t0)
            assert len(found) == args["expect"]
        print(json.dumps({"ns": samples}))
        sys.exit(0)
    else:
        from jsonl_sessions import SessionStore
        store = SessionStore(root, durability="flush")
        op = store.list_sessions_with_metadata
        if args["impl"] == "name":
            op = lambda: store.list_sessions_with_metadata(sort="name")
        if args["impl"] == "sidebar":  # the 50 newest; a version without sort= sorts the whole listing itself
            try:
                store.list_sessions_with_metadata(sort="updated_at", descending=True, limit=50)
                op = lambda: store.list_sessions_with_metadata(sort="updated_at", descending=True, limit=50)
            except TypeError:
                op = lambda: sorted(store.list_sessions_with_metadata(), key=lambda m: (m.updated_at, m.key),
                                    reverse=True)[:50]
    assert len(op()) == args["expect"]
    op()  # the second listing of a store object keeps what it read (jsonl/listcache.py); measured: the ones after
    samples = []
    for _ in range(args["reps"]):
        t0 = pc(); op(); samples.append(pc() - t0)
    print(json.dumps({"ns": samples}))
elif kind == "search":
    from jsonl_sessions import SessionQuery, SessionStore
    store = SessionStore(args["root"], durability="flush")
    t0 = pc()
    found = store.search(SessionQuery(args["needle"]))
    t1 = pc()
    assert [m.key for m in found] == [args["expect"]], found
    print(json.dumps({"ns": [t1 - t0]}))
'''


@dataclass
class Line:
    """One implementation's samples (``unit``: "ns" or "KiB") and their median."""

    group: str
    impl: str
    label: str
    unit: str
    samples: list[float]

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples))


@dataclass
class Goal:
    id: str
    text: str
    value: float
    need: float
    unit: str  # "ms" or "x"

    @property
    def met(self) -> bool:
        return self.value <= self.need


class Versions:
    """The package versions measured: ``ours`` (this checkout) and an optional baseline,
    each a compiled copy in the temp dir; ``env(v)`` is the environment a child runs in."""

    def __init__(self, base: str, baseline_dir: str | None, baseline_rev: str | None) -> None:
        self.paths: dict[str, str] = {"ours": self._copy(base, "ours", os.path.join(ROOT, "jsonl_sessions"))}
        if baseline_rev is not None:
            target = os.path.join(base, "baseline-src")
            os.makedirs(target)
            archive = subprocess.run(["git", "-C", ROOT, "archive", baseline_rev, "jsonl_sessions"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
            baseline_dir = target
        if baseline_dir is not None:
            self.paths["baseline"] = self._copy(base, "baseline", os.path.join(baseline_dir, "jsonl_sessions"))

    @staticmethod
    def _copy(base: str, name: str, package: str) -> str:
        root = os.path.join(base, f"pkg-{name}")
        shutil.copytree(package, os.path.join(root, "jsonl_sessions"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        compileall.compile_dir(root, quiet=1)
        return root

    def env(self, version: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
        env["PYTHONPATH"] = self.paths[version]
        return env


def child(versions: Versions, version: str, args: dict[str, Any], cwd: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], env=versions.env(version), cwd=cwd,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child {args['kind']} ({version}) failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def rotated(names: list[str], turn: int) -> list[str]:
    r = turn % len(names)
    return names[r:] + names[:r]


# -- the four measurements ------------------------------------------------------------------
def measure_import(versions: Versions, rounds: int, cwd: str) -> list[Line]:
    runs = {"floor": ("pass", "ours")} | {v: ("import jsonl_sessions", v) for v in versions.paths}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for name, (code, version) in runs.items():  # warm the page cache, untimed
        subprocess.run([sys.executable, "-c", code], env=versions.env(version), cwd=cwd, check=True)
    for turn in range(rounds):
        for name in rotated(list(runs), turn):
            code, version = runs[name]
            t0 = time.perf_counter_ns()
            subprocess.run([sys.executable, "-c", code], env=versions.env(version), cwd=cwd, check=True)
            samples[name].append(time.perf_counter_ns() - t0)
    labels = {"floor": "floor: python -c pass", "ours": "python -c 'import jsonl_sessions'",
              "baseline": "the same, baseline version"}
    return [Line("import", name, labels[name], "ns", samples[name]) for name in runs]


def measure_rss(versions: Versions, base: str, messages: int, rounds: int, progress: Any) -> tuple[list[Line], int]:
    root = os.path.join(base, "rss")
    store = SessionStore(root, durability="flush")
    factory = MessageFactory()
    progress(f"rss: writing a {messages:,}-message session")
    store.rewrite_messages("big", factory.make(messages, salt=7))
    path = os.path.join(root, "big.jsonl")
    size = os.path.getsize(path)
    common = {"kind": "rss", "root": root, "key": "big", "path": path, "expect": messages}
    runs: dict[str, tuple[str, str]] = {"floor": ("floor", "ours"), "ours": ("try_load", "ours"),
                                        "ours_load": ("load", "ours")}
    if "baseline" in versions.paths:
        runs["baseline"] = ("try_load", "baseline")
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for turn in range(rounds):
        for name in rotated(list(runs), turn):
            op, version = runs[name]
            samples[name].append(child(versions, version, common | {"op": op}, base)["kib"])
    labels = {"floor": "floor: [orjson.loads(line) for line in f]", "ours": "try_load (strict)",
              "ours_load": "load (lenient)", "baseline": "try_load, baseline version"}
    return [Line("rss", name, labels[name], "KiB", samples[name]) for name in runs], size


def measure_list(versions: Versions, base: str, sessions: int, rounds: int, reps: int, progress: Any,
                 settle: float = 0.0) -> list[Line]:
    root = os.path.join(base, "list")
    store = SessionStore(root, durability="flush")
    progress(f"list: making {sessions:,} sessions")
    for i in range(sessions):
        key = f"session-{i:06d}"
        store.append(key, ChatMessage("user", f"hello {i}"))
        store.set_session_name(key, f"session number {i}")
        store.get_message_count(key)  # as any read leaves it: the count cached
    store.close()
    # A store object that lists again reuses what it read of sessions whose files have not
    # changed for 2 s (jsonl/listcache.py); a session written in the last 2 s is read in full
    # every time. Measured as an app's sidebar sees its sessions: written before that.
    time.sleep(settle)
    runs = {"floor": ("ours", "floor")} | {v: (v, "store") for v in versions.paths} | {
        f"{v}_first": (v, "first") for v in versions.paths} | {f"{v}_name": (v, "name") for v in versions.paths} | {
        f"{v}_sidebar": (v, "sidebar") for v in versions.paths}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for turn in range(rounds):
        for name in rotated(list(runs), turn):
            version, impl = runs[name]
            args = {"kind": "list", "root": root, "impl": impl, "reps": reps,
                    "expect": min(sessions, 50) if impl == "sidebar" else sessions}
            samples[name] += child(versions, version, args, base)["ns"]
    labels = {"floor": "floor: scandir + lstat of each transcript", "ours": "list_sessions_with_metadata()",
              "baseline": "the same, baseline version",
              "ours_first": "the first listing of a new store object (a CLI's ls)",
              "baseline_first": "the same, baseline version",
              "ours_name": "list_sessions_with_metadata(sort='name')",
              "baseline_name": "the same, baseline version",
              "ours_sidebar": "sidebar: sort=updated_at, descending, limit=50",
              "baseline_sidebar": "the same, baseline version (sorts the full listing)"}
    return [Line("list", name, labels[name], "ns", samples[name]) for name in runs]


def measure_search(versions: Versions, base: str, megabytes: int, rounds: int, progress: Any) -> tuple[list[Line], int]:
    root = os.path.join(base, "search")
    store = SessionStore(root, durability="flush")
    factory = MessageFactory()
    per_session = 2000
    total = 0
    i = 0
    progress(f"search: writing a {megabytes} MB store")
    while total < megabytes * 1_000_000:
        key = f"chat-{i:05d}"
        msgs = factory.make(per_session, salt=i % 16)  # 16 distinct sessions' worth of text, repeated
        if i == 0:  # the only mention, in the oldest session: every other one is read first
            msgs[per_session // 2] = {"role": "user", "content": f"who was the {NEEDLE.upper()} again?"}
        store.rewrite_messages(key, msgs)
        total += os.path.getsize(os.path.join(root, key + ".jsonl"))
        i += 1
    old = time.time() - 3600
    os.utime(os.path.join(root, "chat-00000.jsonl"), (old, old))
    os.utime(os.path.join(root, "chat-00000.meta.json"), (old, old))
    files = sorted(os.path.join(root, n) for n in os.listdir(root) if n.endswith(".jsonl"))
    runs = ["grep"] + list(versions.paths)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for turn in range(rounds):
        for name in rotated(runs, turn):
            if name == "grep":
                t0 = time.perf_counter_ns()
                out = subprocess.run(["grep", "-ciH", "--", NEEDLE, *files], capture_output=True, text=True,
                                     check=False).stdout
                samples[name].append(time.perf_counter_ns() - t0)
                assert sum(int(line.rsplit(":", 1)[1]) for line in out.splitlines()) == 1, out[:200]
            else:
                args = {"kind": "search", "root": root, "needle": NEEDLE, "expect": "chat-00000"}
                samples[name] += child(versions, name, args, base)["ns"]
    labels = {"grep": f"floor: grep -ci {NEEDLE} over the {len(files)} transcripts",
              "ours": f"search(SessionQuery({NEEDLE!r}))", "baseline": "the same, baseline version"}
    return [Line("search", name, labels[name], "ns", samples[name]) for name in runs], total


# -- report ---------------------------------------------------------------------------------
def fmt(value: float, unit: str) -> str:
    if unit == "KiB":
        return f"{value / 1024:.1f} MiB"
    for div, name in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value >= div:
            return f"{value / div:.2f} {name}" if value < 100 * div else f"{value / div:.0f} {name}"
    return f"{value:.0f} ns"


def goals_of(lines: Sequence[Line]) -> list[Goal]:
    by = {(ln.group, ln.impl): max(ln.median, 1.0) for ln in lines}  # (a tiny run's RSS may not grow)
    out = []
    for version in ("ours", "baseline"):
        tag = "" if version == "ours" else " (baseline)"
        if ("import", version) in by:
            out.append(Goal(f"import{tag}", f"import jsonl_sessions - python -c pass{tag}",
                            (by["import", version] - by["import", "floor"]) / 1e6, 60, "ms"))
        if ("rss", version) in by:
            out.append(Goal(f"rss{tag}", f"try_load peak RSS / the floor's{tag}",
                            by["rss", version] / by["rss", "floor"], 1.5, "x"))
        if ("list", version) in by:
            out += [Goal(f"list{tag}", f"list_sessions_with_metadata / scandir + lstat{tag}",
                         by["list", version] / by["list", "floor"], 4, "x"),
                    Goal(f"list-first{tag}", f"the first listing of a store object / scandir + lstat{tag}",
                         by["list", f"{version}_first"] / by["list", "floor"], 4, "x"),
                    Goal(f"list-name{tag}", f"the listing by name / scandir + lstat{tag}",
                         by["list", f"{version}_name"] / by["list", "floor"], 4, "x"),
                    Goal(f"sidebar{tag}", f"the 50 newest sessions / scandir + lstat{tag}",
                         by["list", f"{version}_sidebar"] / by["list", "floor"], 4, "x")]
        if ("search", version) in by:
            out.append(Goal(f"search{tag}", f"search / grep -ci{tag}", by["search", version] / by["search", "grep"],
                            5, "x"))
    return out


def report(title: str, header: Sequence[tuple[str, str]], lines: Sequence[Line], goals: Sequence[Goal],
           titles: dict[str, str]) -> str:
    out = [title] + [f"  {k:<12} {v}" for k, v in header] + [""]
    floors = {ln.group: max(ln.median, 1.0) for ln in lines if ln.impl in ("floor", "grep")}
    for group, heading in titles.items():
        if not any(x.group == group for x in lines):
            continue
        out.append(heading)
        for ln in (x for x in lines if x.group == group):
            out.append(f"  {ln.label:<62} {fmt(ln.median, ln.unit):>10}  {ln.median / floors[group]:6.2f}x floor"
                       f"  (median of {len(ln.samples)})")
    out += ["", "goals (medians of this run):"]
    for g in goals:
        value = f"{g.value:.1f} ms" if g.unit == "ms" else f"{g.value:.2f}x"
        need = f"<= {g.need:g} ms" if g.unit == "ms" else f"<= {g.need:g}x"
        out.append(f"  {'met' if g.met else 'MISSED':<6}  {g.text:<60} {value:>9}   goal {need}")
    return "\n".join(out)


@dataclass
class Sizes:
    import_rounds: int = 21
    rss_messages: int = 100_000
    rss_rounds: int = 3
    sessions: int = 10_000
    list_rounds: int = 3
    list_reps: int = 3
    list_settle: float = SETTLE_SECONDS
    search_mb: int = 200
    search_rounds: int = 3


QUICK = Sizes(import_rounds=7, rss_messages=10_000, rss_rounds=2, sessions=1_000, list_rounds=2, list_reps=2,
              search_mb=20, search_rounds=2)
TINY = Sizes(import_rounds=2, rss_messages=500, rss_rounds=1, sessions=20, list_rounds=1, list_reps=1, list_settle=0,
             search_mb=1, search_rounds=1)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (1k sessions, a 20 MB search store)")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # the test suite's smoke run
    p.add_argument("--big", action="store_true", help="a 1 GB search store (default 200 MB)")
    p.add_argument("--baseline-rev", metavar="REV", default=None,
                   help="also measure the package as it is at git revision REV of this checkout")
    p.add_argument("--baseline", metavar="DIR", default=None,
                   help="also measure the jsonl_sessions package found in DIR")
    p.add_argument("--dir", metavar="DIR", default=None, help="make the temp dir inside DIR")
    p.add_argument("--json", metavar="PATH", default=None, help="also write every line and goal as JSON")
    p.add_argument("--label", metavar="TEXT", default=None, help="a note printed first in the header")
    p.add_argument("--only", action="append", choices=("import", "rss", "list", "search"), default=None,
                   help="run only this measurement (repeat for several; default: all)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = TINY if args.tiny else QUICK if args.quick else Sizes()
    if args.big:
        sizes.search_mb = 1000

    def progress(text: str) -> None:
        print(f"[benchmarks.scale] {text}", file=sys.stderr, flush=True)

    base = tempfile.mkdtemp(prefix="jsonl-sessions-scale-", dir=args.dir)
    started = time.monotonic()
    try:
        env = environment(base, args.label)
        versions = Versions(base, args.baseline, args.baseline_rev)
        only = set(args.only or ("import", "rss", "list", "search"))
        lines: list[Line] = []
        rss_bytes = search_bytes = 0
        if "import" in only:
            progress("import ...")
            lines += measure_import(versions, sizes.import_rounds, base)
        if "rss" in only:
            rss, rss_bytes = measure_rss(versions, base, sizes.rss_messages, sizes.rss_rounds, progress)
            lines += rss
        if "list" in only:
            lines += measure_list(versions, base, sizes.sessions, sizes.list_rounds, sizes.list_reps, progress,
                                  sizes.list_settle)
        if "search" in only:
            found, search_bytes = measure_search(versions, base, sizes.search_mb, sizes.search_rounds, progress)
            lines += found
    finally:
        shutil.rmtree(base, ignore_errors=True)
    env["loadavg_end"] = load_average()
    goals = goals_of(lines)
    titles = {
        "import": f"import  [wall time of a fresh process, {sizes.import_rounds} rounds; bytecode compiled]",
        "rss": f"peak RSS of loading {sizes.rss_messages:,} messages ({rss_bytes / 1e6:.1f} MB)  "
               "[growth of the peak RSS (VmHWM) over the size before the call, fresh process]",
        "list": f"list {sizes.sessions:,} sessions with metadata  [per call, warm page cache]",
        "search": f"search a {search_bytes / 1e6:.0f} MB store (one match, in the session read last)  "
                  "[per call, warm page cache]",
    }
    header = header_lines(env, "scale", timing="medians; fresh child process per measurement; turns rotated")
    if "baseline" in versions.paths:
        header.append(("baseline", args.baseline_rev or args.baseline))
    elapsed = time.monotonic() - started
    print(report(f"jsonl_sessions scale benchmarks ({elapsed:.0f} s)", header, lines, goals, titles))
    if args.json:
        data = {"environment": env, "lines": [asdict(ln) | {"median": ln.median} for ln in lines],
                "goals": [asdict(g) | {"met": g.met} for g in goals]}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
