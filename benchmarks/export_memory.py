"""The memory an ``export`` needs: the peak resident set of ``jsonl-sessions export KEY
--format jsonl|markdown|html`` on a long session, each run as its own process with its
output thrown away (``/dev/null``), next to the session's size on disk.

The session: ``--messages`` messages (default one million) of agent-like text from
``benchmarks.workload`` (tool calls and their results, non-ASCII), in a JSONL store.
Each format runs ``--runs`` times (default 1); printed per format: the peak RSS (the
largest of the runs, from ``wait4``), the median wall time, and the output's size. Run
it with ``--messages 100000`` next to the default: an export that streams needs the same
memory at any length; one that loads the session grows with it. Set ``PYTHONPATH`` to
another checkout to measure that version's command (the session is built by this one).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from benchmarks.environ import environment, header_lines, load_average
from benchmarks.workload import MessageFactory
from jsonl_sessions import SessionStore

KEY = "agent/long-run"
FORMATS = ("jsonl", "markdown", "html")


def build(root: str, n: int) -> int:
    """A store at ``root`` holding session :data:`KEY` of ``n`` messages; its transcript's size."""
    store = SessionStore(root, durability="flush")
    factory = MessageFactory()
    batch = 10_000
    for lo in range(0, n, batch):
        store.append_many(KEY, factory.make(min(batch, n - lo), salt=lo // batch))
    meta = store.get_session_metadata(KEY)
    assert meta is not None
    return meta.size_bytes


#: The export in a child process that then reports its own peak RSS: ``VmHWM`` of
#: /proc/self/status belongs to the program's own address space, while ``ru_maxrss`` keeps
#: the parent's at the fork (this process, which built the session, is the larger).
_CHILD = """
import sys
from jsonl_sessions.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
with open("/proc/self/status") as status:
    peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
sys.stderr.write(f"VmHWM {peak}\\n")
sys.exit(code)
"""


def run_export(root: str, fmt: str) -> tuple[int, float, int]:
    """(peak RSS in bytes, wall seconds, output bytes) of one ``export`` process."""
    with tempfile.TemporaryFile() as sink:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _CHILD, "--root", root, "export", KEY, "--format", fmt],
                              stdout=sink, stderr=subprocess.PIPE, check=False)
        elapsed = time.perf_counter() - started
        stderr = done.stderr.decode("utf-8", "replace")
        if done.returncode:
            raise RuntimeError(f"export --format {fmt} failed ({done.returncode}): {stderr.strip()}")
        size = sink.seek(0, os.SEEK_END)
    peak = int(stderr.rsplit("VmHWM ", 1)[1].split()[0])  # kB
    return peak * 1024, elapsed, size


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.export_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="messages in the session (default 1M)")
    p.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    p.add_argument("--runs", type=int, default=1, help="runs of each format (default 1)")
    p.add_argument("--dir", default=None, help="make the temp dir inside DIR (it decides the file system)")
    args = p.parse_args(argv)
    base = tempfile.mkdtemp(prefix="jsonl-sessions-export-bench-", dir=args.dir)
    try:
        env = environment(base)
        root = os.path.join(base, "store")
        size = build(root, args.messages)
        rows = []
        for fmt in args.formats:
            runs = [run_export(root, fmt) for _ in range(args.runs)]
            rows.append((fmt, max(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[0][2]))
        env["loadavg_end"] = load_average()
        mode = f"{args.messages:,} messages ({_mib(size)} transcript), {args.runs} run(s) a format"
        timing = "one process per export, output to a temp file; peak RSS: its VmHWM at exit; wall time"
        for name, text in [*header_lines(env, mode, timing), ("session", mode)]:
            print(f"{name}: {text}")
        command = os.environ.get("PYTHONPATH")
        if command:
            print(f"PYTHONPATH: {command}")
        print()
        print(f"{'format':<10} {'peak RSS':>12} {'time':>9} {'output':>13}")
        for fmt, rss, seconds, out in rows:
            print(f"{fmt:<10} {_mib(rss):>12} {seconds:>8.1f}s {_mib(out):>13}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
