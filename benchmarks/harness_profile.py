"""How long ``check_backend`` takes on the in-memory store under each profile (wall clock and
this process's CPU time, which a loaded machine does not inflate). From the repository root:
``python benchmarks/harness_profile.py [quick|ci|soak ...]`` (default: quick and ci)."""

from __future__ import annotations

import os
import platform
import sys
import time

from jsonl_sessions.testing import MemorySessionStore, check_backend


def main(profiles: list[str]) -> None:
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
    for profile in profiles:
        wall, cpu = time.perf_counter(), time.process_time()
        stats = check_backend(lambda path: MemorySessionStore(path), profile=profile, database=None)
        print(f"{profile}: wall {time.perf_counter() - wall:.1f} s, cpu {time.process_time() - cpu:.1f} s, "
              f"{stats['examples']} programs, {stats['steps']} steps, removals {stats['removals']}, "
              f"pages before {stats['pages before']}, extra rounds {stats['extra rounds']}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["quick", "ci"])
