"""The system calls of one warm append, listed: what the store asks the operating system for
when a session is already open in this process (three appends made before).

Run from the repository root::

    python -m benchmarks.syscalls                  # both durability modes, seam probe + strace
    python -m benchmarks.syscalls --durability fsync --no-strace

Two views of the same append of a 200-byte user message:

- **seam**: the calls through ``jsonl_sessions._platform`` and the ``os`` / ``fcntl`` /
  ``mmap`` calls under them, in order, counted in process by the probe of
  ``tests/helpers/syscalls.py`` (the one tests use to pin counts);
- **strace** (when ``strace`` is installed): the same append in a child process under
  ``strace -f``, every system call between two marker ``stat`` calls, as the kernel saw it
  (this includes anything the interpreter itself does, such as memory allocation).

A measurement, never a gate: the exit status is 0 whatever the counts are.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from types import ModuleType

if __package__ in (None, ""):  # `python benchmarks/syscalls.py`: import from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.hotloop import MESSAGE
from jsonl_sessions import SessionStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "warm"
WARMUP = 3
BEGIN = "/jsonl-sessions-syscalls-begin"
END = "/jsonl-sessions-syscalls-end"
_STRACE_LINE = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+(.*)$")


def load_probe() -> ModuleType:
    """tests/helpers/syscalls.py, loaded by path (the tests directory is not a package)."""
    spec = importlib.util.spec_from_file_location("_jsonl_sessions_syscall_probe",
                                                  os.path.join(ROOT, "tests", "helpers", "syscalls.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def warm_store(directory: str, durability: str) -> SessionStore:
    store = SessionStore(directory, durability=durability)  # type: ignore[arg-type]
    for _ in range(WARMUP):
        store.append(KEY, MESSAGE)
    return store


def marker(path: str) -> None:
    try:
        os.stat(path)
    except OSError:
        pass


# -- the seam view ------------------------------------------------------------------------
def seam_report(directory: str, durability: str) -> list[str]:
    probe_module = load_probe()
    store = warm_store(directory, durability)
    with probe_module.SyscallProbe() as p:
        store.append(KEY, MESSAGE)
    seam, calls = p.sequence("seam"), p.sequence("os")
    return [
        f"seam: {len(seam)} calls through jsonl_sessions._platform: {' '.join(seam)}",
        f"os:   {len(calls)} system calls from Python: {' '.join(calls)}",
    ]


# -- the strace view ----------------------------------------------------------------------
def child(directory: str, durability: str) -> int:
    """Under strace: warm the session, then one append between the two markers."""
    store = warm_store(directory, durability)
    marker(BEGIN)
    store.append(KEY, MESSAGE)
    marker(END)
    return 0


def between_markers(trace: str) -> list[str]:
    """The calls strace logged after the BEGIN marker and before the END one (pid removed)."""
    out: list[str] = []
    inside = False
    for raw in trace.splitlines():
        m = _STRACE_LINE.match(raw)
        line = m.group(2) if m else raw
        if BEGIN in line:
            inside = True
            continue
        if END in line:
            break
        if inside and not line.startswith(("+++", "---")):
            out.append(line)
    return out


def strace_report(directory: str, durability: str) -> list[str]:
    strace = shutil.which("strace")
    if strace is None:
        return ["strace: not installed (apt-get install strace); seam view only"]
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        cmd = [strace, "-f", "-qq", "-s", "40", "-o", out.name, sys.executable, "-m", "benchmarks.syscalls",
               "--child", directory, durability]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return [f"strace: failed ({done.returncode}): {done.stderr.strip()[-300:]}"]
        calls = between_markers(out.read())
    names = collections.Counter(c.split("(", 1)[0] for c in calls)
    lines = [f"strace: {len(calls)} system calls ({', '.join(f'{n} {k}' for k, n in names.most_common())})"]
    lines += [f"  {c if len(c) <= 140 else c[:137] + '...'}" for c in calls]
    return lines


# -- main ---------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.syscalls", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--durability", choices=("fsync", "flush", "both"), default="both")
    p.add_argument("--no-strace", action="store_true", help="only the in-process seam view")
    p.add_argument("--dir", metavar="DIR", default=None, help="make the temp dir inside DIR")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["--child"]:  # the process strace watches (not for users)
        return child(raw[1], raw[2])
    args = parse_args(raw)
    modes = ("fsync", "flush") if args.durability == "both" else (args.durability,)
    base = tempfile.mkdtemp(prefix="jsonl-sessions-syscalls-", dir=args.dir)
    try:
        for mode in modes:
            print(f'one warm append of a {len(MESSAGE["content"])}-character user message, durability="{mode}" '
                  f"({WARMUP} appends to the session before, same store instance)")
            for line in seam_report(os.path.join(base, f"seam-{mode}"), mode):
                print(f"  {line}")
            if not args.no_strace:
                for line in strace_report(os.path.join(base, f"strace-{mode}"), mode):
                    print(f"  {line}")
            print()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
