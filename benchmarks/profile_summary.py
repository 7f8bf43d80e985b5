"""Where a hot loop's calls spend their time, from a py-spy raw profile (collapsed stacks).

    py-spy record --native --rate 1000 --format raw -o append.txt -- \\
        python -m benchmarks.hotloop --durability flush --seconds 20
    python -m benchmarks.profile_summary append.txt --us-per-call 14.2

Takes the samples under the outermost frame matching ``--entry`` (default: the store's
``append``), follows the call chain while every sample goes through the same function
(``append`` -> ``append_many``), and there splits the samples by step: the line of that
function (named by the functions it called there). Also lists the
native leaf of each sample (``write``, ``flock``, ``open64``: the system calls) and the
jsonl_sessions functions by inclusive share. With ``--us-per-call`` (printed by
``benchmarks.hotloop``), shares are also given in microseconds per call.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from collections.abc import Sequence

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

Frame = tuple[str, str, str]  # function, file, line


def parse(line: str) -> tuple[list[Frame], int] | None:
    stack, _, count = line.rstrip("\n").rpartition(" ")
    if not stack or not count.isdigit():
        return None
    frames: list[Frame] = []
    for text in stack.split(";"):
        m = _FRAME.match(text)
        frames.append((m["func"], m["file"], m["line"] or "") if m else (text, "", ""))
    return frames, int(count)


def is_python(frame: Frame) -> bool:
    return frame[1].endswith(".py")


def follow_chain(samples: Sequence[tuple[list[Frame], int]], share: float = 0.9) -> list[tuple[str, str]]:
    """The entry and the Python functions below it through which at least ``share`` of all
    samples go (``append`` -> ``append_many``): the steps are split at its last one."""
    total = sum(n for _, n in samples)
    chain: list[tuple[str, str]] = []
    alive = list(samples)
    depth = 0
    while alive:
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        for fr, n in alive:
            if len(fr) > depth and is_python(fr[depth]):
                counts[fr[depth][:2]] += n
        if not counts:
            break
        best, n_best = counts.most_common(1)[0]
        if n_best < share * total:
            break
        chain.append(best)
        alive = [(fr, n) for fr, n in alive if len(fr) > depth and fr[depth][:2] == best]
        depth += 1
    return chain


def summarize(lines: Sequence[str], entry: str, top: int) -> tuple[int, list[tuple[str, int]], ...]:  # type: ignore[misc]
    pattern = re.compile(entry)
    samples: list[tuple[list[Frame], int]] = []
    for line in lines:
        parsed = parse(line)
        if parsed is None:
            continue
        frames, n = parsed
        i = next((i for i, f in enumerate(frames) if pattern.search(f"{f[0]} ({f[1]})")), None)
        if i is not None:
            samples.append((frames[i:], n))
    total = sum(n for _, n in samples)
    chain = follow_chain(samples)
    steps: collections.Counter[str] = collections.Counter()
    callees: collections.defaultdict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaves: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for fr, n in samples:
        d = 0  # where this sample leaves the chain
        while d + 1 < len(chain) and len(fr) > d + 1 and fr[d + 1][:2] == chain[d + 1]:
            d += 1
        child = fr[d + 1][0] if len(fr) > d + 1 else ""
        steps[f"{fr[d][0]}:{fr[d][2]}"] += n
        if child and is_python(fr[d + 1]):
            callees[f"{fr[d][0]}:{fr[d][2]}"][child] += n
        leaf = fr[-1]
        leaves[leaf[0] if not is_python(leaf) else f"<python> {leaf[0]}"] += n
        for name in {f"{f[0]} ({f[1]})" for f in fr if "jsonl_sessions" in f[1]}:
            inclusive[name] += n
    named = [(f"{step} -> {'/'.join(c for c, _ in callees[step].most_common(2)) or '(own bytecode)'}", n)
             for step, n in steps.most_common(top)]
    return total, " -> ".join(f[0] for f in chain) or "-", named, leaves.most_common(top), inclusive.most_common(top)  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_summary",
                                description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("raw", help="py-spy --format raw output")
    p.add_argument("--entry", default=r"\.append \(.*jsonl_sessions/", help="regex of the entry frame")
    p.add_argument("--us-per-call", type=float, default=None, help="time of one call, to print microseconds")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    with open(args.raw, encoding="utf-8", errors="replace") as f:
        total, chain, steps, leaves, inclusive = summarize(f.readlines(), args.entry, args.top)
    if not total:
        print("no samples under the entry frame", file=sys.stderr)
        return 1

    def share(n: int) -> str:
        pct = 100 * n / total
        us = f" {args.us_per_call * n / total:7.2f} us" if args.us_per_call else ""
        return f"{pct:5.1f}%{us}"

    print(f"{total:,} samples under {chain}")
    for title, rows in (("steps (line of the split frame -> the functions it called there)", steps),
                        ("native leaf (system calls and C code)", leaves),
                        ("jsonl_sessions functions, inclusive", inclusive)):
        print(f"\n{title}")
        for name, n in rows:
            print(f"  {share(n)}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
