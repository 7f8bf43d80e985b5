"""A hot loop of appends for a sampling profiler (py-spy) to watch; it prints nothing timed.

    py-spy record --native --rate 1000 --format raw -o append.txt -- \\
        python -m benchmarks.hotloop --durability flush --seconds 20
    py-spy top -- python -m benchmarks.hotloop --durability fsync

Each append is of a 200-byte user message to one session of one store, already open
(warm), in a fresh temp dir that is removed at the end. ``--seconds`` bounds the loop;
the session is restarted every ``--per-session`` appends so it stays small.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

if __package__ in (None, ""):  # `python benchmarks/hotloop.py`: import from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jsonl_sessions import SessionStore

MESSAGE = {"role": "user", "content": ("Please read src/app/main.py and tell me why the retry loop never stops "
                                       "after a timeout; the log shows status 500 twice, then nothing. " * 2)[:200]}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.hotloop", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--durability", choices=("flush", "fsync"), default="flush")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--per-session", type=int, default=50_000, metavar="N")
    p.add_argument("--dir", metavar="DIR", default=None, help="make the temp dir inside DIR")
    args = p.parse_args(argv)
    base = tempfile.mkdtemp(prefix="jsonl-sessions-hotloop-", dir=args.dir)
    try:
        store = SessionStore(base, durability=args.durability)
        started = time.monotonic()
        deadline = started + args.seconds
        done = 0
        while time.monotonic() < deadline:
            key = f"s{done // args.per_session}"
            append = store.append
            for _ in range(1000):
                append(key, MESSAGE)
            done += 1000
        elapsed = time.monotonic() - started
        print(f"{done:,} appends in {elapsed:.1f} s: {elapsed / done * 1e6:.2f} us per append (mean of the loop, "
              f"durability={args.durability!r})", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
