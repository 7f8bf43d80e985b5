"""SIGKILL trials of the framework adapters: run a worker script that prints a number once
each write was acknowledged, kill it with SIGKILL at a random moment after a chosen
acknowledgement, and report the last acknowledgement it printed."""

from __future__ import annotations

import pathlib
import random
import signal
import subprocess
import sys
import time

from _child import CHECKOUT, child_env

ROOT = pathlib.Path(CHECKOUT)
#: Workers import this checkout's jsonl_sessions, installed or not (and the shared helpers).
ENV = child_env()


def kill_after(argv: list[str], want: int, rng: random.Random, *, jitter: float = 0.005) -> int:
    """Run ``python *argv``, SIGKILL it up to ``jitter`` seconds after it printed ``want``;
    the highest number it printed (the acknowledgements written before the kill included)."""
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None
    acked = -1
    try:
        for line in proc.stdout:
            acked = int(line)
            if acked >= want:
                break
        time.sleep(rng.uniform(0, jitter))
        proc.send_signal(signal.SIGKILL)
        acked = max([acked, *(int(x) for x in proc.stdout.read().split())])
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, f"the worker ended by itself ({proc.returncode})"
    assert acked >= want
    return acked


def run_workers(argvs: list[list[str]], timeout: float = 120) -> None:
    """Run ``python *argv`` for each argv at once; each must exit 0."""
    procs = [subprocess.Popen([sys.executable, *argv], env=ENV) for argv in argvs]
    assert [p.wait(timeout=timeout) for p in procs] == [0] * len(procs)
