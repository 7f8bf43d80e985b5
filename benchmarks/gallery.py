"""Time how long the harness takes to catch each planted bug of the gallery
(tests/helpers/gallery.py) under the ``ci`` profile, each bug alone; print the table of
docs/testing.md. Run from the repository root: ``python benchmarks/gallery.py``.

Each row: the bug, the contract test that fails first for it (tests/harness/test_gallery.py
asserts it), the operation the state machine names, and the seconds check_backend took
to find and shrink the failure: wall clock, and this process's CPU time (which other jobs
on a loaded machine do not inflate).
"""

from __future__ import annotations

import os
import pathlib
import platform
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "helpers"))

from gallery import GALLERY, JSONL_BUGS, machine_catch


def main() -> None:
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
    print()
    print("| bug | contract test that fails first | state machine: failing check | wall s | cpu s |")
    print("| --- | --- | --- | --- | --- |")
    for bug in GALLERY:
        wall, cpu = time.perf_counter(), time.process_time()
        operation, _ = machine_catch(bug)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"| {bug.name} | {bug.contract and '`' + bug.contract + '`' or '(none)'} | "
              f"`{operation[:100]}` | {wall:.1f} | {cpu:.1f} |", flush=True)
    for name, (_, tool) in JSONL_BUGS.items():
        print(f"| JSONL store: {name} | (none) | {tool} (tests/harness/test_harness_teeth.py) | < 2 | < 2 |")


if __name__ == "__main__":
    main()
