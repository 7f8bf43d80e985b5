"""Message search on a large JSONL store: the scan next to ``grep -ci`` (its floor), and the
full-text index (build time, size, query latency) next to the scan, all in one run.

Two stores of realistic coding-agent text are generated once and kept in a cache
directory (``--cache``; each is reused while its size and generator version match):

- ``ascii``: pure ASCII (prompts, answers, tool output: shell logs, code, test runs);
- ``mixed``: the same kinds of text where tool output carries ANSI colour codes (stored as
  ``\\u001b`` escapes) in about 10% of the messages, and about 3% of the messages hold
  German (ß), accented, CJK and emoji text: well over 1% of the lines of each kind.

Measured (medians and p95 of per-call times, warm page cache, implementations taking turns):

- the scan, ``search_messages(KEYWORD)`` without an index, / ``grep -ci KEYWORD`` over the
  same transcripts, on each store (goal <= 5x); KEYWORD is a word planted in a few messages;
- the index build on the mixed store (``build_index`` from nothing) / one scan (goal <= 2x)
  and the index size;
- indexed ``search_messages`` of ``--queries`` queries (words of the store's vocabulary,
  from its rarer half, some two-word queries and phrases): p95 (goal <= 50 ms), and the
  scan's median / the indexed median (goal >= 50x).

    python -m benchmarks.search                 # 1 GB stores (generated once, about 2 GB of cache)
    python -m benchmarks.search --size 200      # 200 MB stores
    python -m benchmarks.search --size 20 --queries 30 --rounds 2   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/search.py`: import the package from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.environ import environment, header_lines, load_average
from benchmarks.measure import percentile
from jsonl_sessions import SessionStore, fts
from jsonl_sessions.jsonl import ftsindex
from jsonl_sessions.searchindex import build_index, index_status

#: The generator's version: a cached store made by another version is made again.
GENERATOR = 1
#: The scan's keyword: a word the vocabulary never holds, planted in PLANTED messages.
NEEDLE = "xylophonist"
PLANTED = 3
MESSAGES_PER_SESSION = 1500

_BASE = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "by", "this",
    "are", "or", "from", "at", "an", "not", "file", "function", "return", "value", "error", "test", "agent",
    "tool", "call", "result", "read", "write", "path", "line", "session", "message", "user", "assistant",
    "system", "context", "token", "model", "python", "json", "stream", "buffer", "lock", "commit", "rollback",
    "append", "load", "replace", "import", "class", "def", "self", "None", "True", "False", "list", "dict",
    "str", "int", "print", "open", "close", "retry", "timeout", "request", "response", "status", "README",
    "main", "src", "build", "deploy", "config", "server", "client", "cache", "index", "query", "table",
    "column", "row", "update", "delete", "insert", "select", "where", "join", "order", "group", "limit",
    "offset", "parse", "format", "render", "template", "route", "handler",
]
_SYLLABLES = [
    "ka", "lo", "mi", "ne", "ru", "ta", "vo", "xi", "ze", "pa", "do", "fe", "gi", "hu", "ja", "ko", "lu",
    "ma", "no", "pi", "qu", "re", "si", "tu", "va", "we", "ya", "zo",
]
_ANSI = ["\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[33m", "\x1b[36m", "\x1b[0m"]
_INTL = ["Straße", "Grüße", "naïve", "café", "über", "déjà vu", "日本語のテキスト", "数据库", "テスト", "данные",
         "🙂", "🚀", "✓", "Ελληνικά", "façade", "smörgåsbord"]


class Corpus:
    """Deterministic agent text: a Zipf-distributed vocabulary of common words and made-up
    identifiers; each message a prompt, an answer or a tool's output."""

    def __init__(self, mixed: bool, seed: int = 20261204) -> None:
        rng = random.Random(seed)
        made = sorted({"".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))) for _ in range(40_000)})
        rng.shuffle(made)
        self.vocabulary = _BASE + [f"{w}_{rng.randrange(100)}" if i % 3 == 0 else w for i, w in enumerate(made)]
        weights = [1 / (rank + 1) ** 1.05 for rank in range(len(self.vocabulary))]
        # a long stream of words to slice messages from (fast to generate)
        self._stream = rng.choices(self.vocabulary, weights=weights, k=400_000)
        self.mixed = mixed

    def words(self, rng: random.Random, n: int) -> str:
        start = rng.randrange(len(self._stream) - n)
        return " ".join(self._stream[start : start + n])

    def message(self, rng: random.Random) -> dict[str, Any]:
        r = rng.random()
        if r < 0.3:
            role, text = "user", self.words(rng, rng.randint(5, 40))
        elif r < 0.65:
            role, text = "assistant", self.words(rng, rng.randint(20, 150))
        else:
            role = "tool"
            lines = []
            for _ in range(rng.randint(3, 25)):
                line = self.words(rng, rng.randint(3, 12))
                if self.mixed and rng.random() < 0.04:
                    line = f"{rng.choice(_ANSI)}{line}\x1b[0m"
                lines.append(line)
            text = "\n".join(lines)
        if self.mixed and rng.random() < 0.03:
            text += " " + " ".join(rng.choices(_INTL, k=rng.randint(1, 3)))
        return {"role": role, "content": text if role != "assistant" or rng.random() < 0.5
                else [{"type": "text", "text": text}]}


_PROSE = re.compile(r"^[A-Za-z][A-Za-z ,.;:'()-]{20,}$")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")


class NaturalCorpus:
    """Deterministic agent text that reads like the real thing: English prose and Python
    code taken from this Python's standard library sources (comments and docstrings, code
    lines), tool output as file listings, test runs and logs with ANSI colour codes (in
    about a third of the tool messages), and about 1% of the messages with non-ASCII text
    (ß, accents, CJK, emoji). Its vocabulary is that of the text, most frequent first."""

    mixed = True

    def __init__(self, seed: int = 20261204) -> None:
        rng = random.Random(seed)
        prose: list[str] = []
        code: list[str] = []
        libdir = os.path.dirname(os.__file__)
        for name in sorted(os.listdir(libdir)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(libdir, name), encoding="utf-8", errors="replace") as f:
                for raw in f:
                    line = raw.rstrip()
                    text = line.strip().lstrip("#").strip().strip('"')
                    if _PROSE.match(text):
                        prose.append(text)
                    elif line.strip() and len(line) < 120:
                        code.append(line)
        self.prose, self.code = prose, code
        counts: dict[str, int] = {}
        for line in prose:
            for w in _WORD.findall(line.lower()):
                counts[w] = counts.get(w, 0) + 1
        self.vocabulary = sorted(counts, key=lambda w: (-counts[w], w))
        self._words = " ".join(prose[: 20_000]).split()
        self._names = sorted({m for line in code for m in _WORD.findall(line)})
        rng.shuffle(self._names)

    def words(self, rng: random.Random, n: int) -> str:
        start = rng.randrange(len(self._words) - n)
        return " ".join(self._words[start : start + n])

    def _run(self, rng: random.Random, lines: list[str], lo: int, hi: int) -> list[str]:
        start = rng.randrange(len(lines) - hi)
        return lines[start : start + rng.randint(lo, hi)]

    def _tool(self, rng: random.Random) -> str:
        kind = rng.random()
        colour = rng.random() < 0.35
        green, red, reset = ("\x1b[32m", "\x1b[31m", "\x1b[0m") if colour else ("", "", "")
        if kind < 0.4:  # a file read: numbered code lines
            start = rng.randrange(1, 900)
            return "\n".join(f"{start + i:>5}\t{line}" for i, line in enumerate(self._run(rng, self.code, 5, 40)))
        if kind < 0.7:  # a test run
            out = []
            for _ in range(rng.randint(3, 25)):
                name = rng.choice(self._names)
                ok = rng.random() < 0.9
                out.append(f"tests/test_{name.lower()}.py::test_{rng.choice(self._names).lower()} "
                           f"{green + 'PASSED' + reset if ok else red + 'FAILED' + reset}")
            out.append(f"{green}{len(out)} passed{reset} in {rng.uniform(0.1, 30):.2f}s")
            return "\n".join(out)
        out = []  # a log
        for _ in range(rng.randint(3, 20)):
            level = rng.choice(["INFO", "INFO", "DEBUG", "WARNING", "ERROR"])
            shown = f"{red}{level}{reset}" if level == "ERROR" else level
            out.append(f"2026-12-04 {rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d} "
                       f"{shown} {rng.choice(self._names)}: {rng.choice(self.prose)}")
        return "\n".join(out)

    def message(self, rng: random.Random) -> dict[str, Any]:
        r = rng.random()
        if r < 0.3:
            role, text = "user", " ".join(self._run(rng, self.prose, 1, 3))
        elif r < 0.65:
            role = "assistant"
            text = " ".join(self._run(rng, self.prose, 2, 10))
            if rng.random() < 0.4:
                text += "\n\n```python\n" + "\n".join(self._run(rng, self.code, 3, 15)) + "\n```"
        else:
            role, text = "tool", self._tool(rng)
        if rng.random() < 0.01:
            text += " " + " ".join(rng.choices(_INTL, k=rng.randint(1, 3)))
        return {"role": role, "content": text if role != "assistant" or rng.random() < 0.5
                else [{"type": "text", "text": text}]}


def make_store(path: str, corpus: Corpus | NaturalCorpus, megabytes: float, progress: Callable[[str], None],
               per_session: int = MESSAGES_PER_SESSION) -> None:
    """Write a store of about ``megabytes`` MB at ``path`` (kept; ``.complete`` marks it done)."""
    marker = os.path.join(path, ".complete")
    want = f"{GENERATOR} {megabytes} {per_session}"
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as f:
            if f.read() == want:
                return
    shutil.rmtree(path, ignore_errors=True)
    store = SessionStore(path, durability="flush")
    rng = random.Random(int(megabytes * 1000))
    total = i = 0
    planted = 0
    progress(f"writing a {megabytes} MB store at {path}")
    base_ms = 1_700_000_000_000
    while total < megabytes * 1_000_000 or planted < PLANTED:
        key = f"chat-{i:05d}"
        msgs = [corpus.message(rng) for _ in range(per_session)]
        for j, m in enumerate(msgs):
            m["created_at"] = base_ms + i * 10_000_000 + j * 1000
        if planted < PLANTED and (i % 7 == 3 or total >= megabytes * 1_000_000):
            msgs[rng.randrange(len(msgs))]["content"] = f"who was the {NEEDLE.upper()} in that talk?"
            planted += 1
        store.rewrite_messages(key, msgs)
        total += os.path.getsize(os.path.join(path, key + ".jsonl"))
        i += 1
        if i % 50 == 0:
            progress(f"  {total / 1e6:.0f} MB")
    store.close()
    with open(marker, "w", encoding="utf-8") as f:
        f.write(want)


def transcripts(path: str) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".jsonl") and not n.startswith("."))


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter_ns()
    result = fn()
    return time.perf_counter_ns() - t0, result


def grep_count(files: Sequence[str], word: str) -> int:
    out = subprocess.run(["grep", "-ci", "--", word, *files], capture_output=True, text=True, check=False).stdout
    return sum(int(line.rsplit(":", 1)[1]) for line in out.splitlines()) if len(files) > 1 else int(out or 0)


def scan_vs_grep(path: str, rounds: int) -> dict[str, list[float]]:
    """Per-call times of grep -ci and of the scan, taking turns."""
    store = SessionStore(path, durability="flush")
    files = transcripts(path)
    samples: dict[str, list[float]] = {"grep": [], "scan": []}
    for turn in range(rounds):
        for name in (("grep", "scan") if turn % 2 == 0 else ("scan", "grep")):
            if name == "grep":
                ns, found = timed(lambda: grep_count(files, NEEDLE))
            else:
                ns, page = timed(lambda: store.search_messages(NEEDLE, limit=50))
                found = len(page.hits)  # type: ignore[attr-defined]
            assert found == PLANTED, (name, found)
            samples[name].append(ns)
    store.close()
    return samples


def queries_of(corpus: Corpus | NaturalCorpus, n: int, seed: int = 5) -> list[str]:
    """Words from the rarer half of the vocabulary; every fifth query two words, every
    seventh a phrase of two neighbouring words of the text."""
    rng = random.Random(seed)
    rare = corpus.vocabulary[len(corpus.vocabulary) // 20 :]
    out = []
    for i in range(n):
        if i % 7 == 6:
            out.append(f'"{corpus.words(rng, 2)}"')
        elif i % 5 == 4:
            out.append(f"{rng.choice(rare)} {rng.choice(corpus.vocabulary[:400])}")
        else:
            out.append(rng.choice(rare))
    return out


def build_floor(path: str, tmpdir: str) -> tuple[float, float]:
    """The floor of an index build, in two parts measured apart: ``(fold_ns, insert_ns)``:
    reading the transcripts and folding each message's text in Python (``fts.indexed``),
    then a bare FTS5 insert of those texts, with the index's table options and the
    settings of its build (page size, page cache, automatic merges off), into a fresh
    file: one transaction, no journal, no sync, no other table, consecutive row ids, one
    ``optimize``."""
    t0 = time.perf_counter_ns()
    texts = []
    for name in transcripts(path):
        with open(name, "rb") as f:
            for line in f.read().split(b"\n"):
                found = fts.indexed(line) if line else None
                if found is not None:
                    texts.append(found[1])
    fold_ns = time.perf_counter_ns() - t0
    db = os.path.join(tmpdir, "floor.sqlite3")
    if os.path.exists(db):
        os.unlink(db)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(f"PRAGMA page_size = {ftsindex.PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute(f"PRAGMA cache_size = -{ftsindex.CACHE_KIB}")
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, {fts.TABLE_OPTIONS}, content='')")
        conn.execute("INSERT INTO t (t, rank) VALUES ('automerge', 0)")
        t0 = time.perf_counter_ns()
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", enumerate(texts, 1))
        conn.execute("COMMIT")
        conn.execute("INSERT INTO t (t) VALUES ('optimize')")
        insert_ns = time.perf_counter_ns() - t0
    finally:
        conn.close()
        os.unlink(db)
    return fold_ns, insert_ns


def summary(samples: Sequence[float]) -> tuple[float, float]:
    values = sorted(samples)
    return float(statistics.median(values)), percentile(values, 0.95)


def fmt(ns: float) -> str:
    for div, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if ns >= div:
            return f"{ns / div:.2f} {unit}" if ns < 100 * div else f"{ns / div:.0f} {unit}"
    return f"{ns:.0f} ns"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.search", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--size", type=float, default=1000, metavar="MB", help="size of each store (default 1000)")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # the test suite's smoke run
    p.add_argument("--cache", metavar="DIR", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jsonl-sessions-bench"),
        help="where the generated stores are kept between runs")
    p.add_argument("--queries", type=int, default=100, help="indexed queries timed (default 100)")
    p.add_argument("--rounds", type=int, default=5, help="scan and grep calls per store (default 5)")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the figures as JSON")
    p.add_argument("--label", metavar="TEXT", default=None, help="a note printed first in the header")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def progress(text: str) -> None:
        print(f"[benchmarks.search] {text}", file=sys.stderr, flush=True)

    started = time.monotonic()
    os.makedirs(args.cache, exist_ok=True)
    env = environment(args.cache, args.label)
    rows: list[tuple[str, str, float, float, int]] = []  # group, label, median, p95, samples
    goals: list[tuple[str, float, str, bool]] = []
    figures: dict[str, Any] = {}
    corpora: dict[str, Corpus | NaturalCorpus] = {"ascii": Corpus(mixed=False), "mixed": Corpus(mixed=True),
                                                  "natural": NaturalCorpus()}
    per_session = 100 if args.tiny else MESSAGES_PER_SESSION
    paths = {name: os.path.join(args.cache, f"search-{name}-{args.size:g}mb") for name in corpora}
    for name, corpus in corpora.items():
        make_store(paths[name], corpus, args.size, progress, per_session)
    sizes = {name: sum(os.path.getsize(f) for f in transcripts(p)) for name, p in paths.items()}
    for name, path in paths.items():
        ftsindex.drop(SessionStore(path)._root)  # the scan: no index
        progress(f"scan vs grep -ci on the {name} store")
        got = scan_vs_grep(path, args.rounds)
        for impl, label in (("grep", f"floor: grep -ci {NEEDLE}"), ("scan", f"search_messages({NEEDLE!r}), no index")):
            med, p95 = summary(got[impl])
            rows.append((name, label, med, p95, len(got[impl])))
            figures[f"{name}_{impl}_ns"] = med
        ratio = figures[f"{name}_scan_ns"] / figures[f"{name}_grep_ns"]
        goals.append((f"scan / grep -ci, {name} store", ratio, "<= 5x", ratio <= 5))

    # the index, on the mixed store (synthetic vocabulary) and on the natural-text store
    statuses, hits_of = {}, {}
    for name in ("mixed", "natural"):
        path = paths[name]
        group = f"index-{name}"
        progress(f"building the index of the {name} store")
        store = SessionStore(path, durability="flush")
        build_ns, _ = timed(lambda: build_index(store))  # noqa: B023 - called at once
        statuses[name] = status = index_status(store)
        figures.update({f"{name}_build_ns": build_ns, f"{name}_index_bytes": status.bytes,
                        f"{name}_indexed_messages": status.entries})
        rows.append((group, "build_index (from nothing)", build_ns, build_ns, 1))
        progress(f"the floor of a build on the {name} store")
        fold_ns, insert_ns = build_floor(path, args.cache)
        rows.append((group, "floor: read + fold the texts in Python (fts.indexed)", fold_ns, fold_ns, 1))
        rows.append((group, "floor: bare FTS5 insert of the folded texts + optimize", insert_ns, insert_ns, 1))
        figures.update({f"{name}_floor_fold_ns": fold_ns, f"{name}_floor_insert_ns": insert_ns})
        ratio = build_ns / figures[f"{name}_scan_ns"]
        goals.append((f"index build / one scan, {name} store", ratio, "<= 2x", ratio <= 2))
        floor_ratio = (fold_ns + insert_ns) / figures[f"{name}_scan_ns"]
        goals.append(("  its floor (fold + bare insert) / one scan", floor_ratio, "-", True))
        goals.append((f"  index build / its floor, {name} store", build_ns / (fold_ns + insert_ns), "-", True))
        goals.append((f"index size / store size, {name} store", status.bytes / sizes[name], "-", True))
        queries = queries_of(corpora[name], args.queries)
        for q in queries[:5]:  # warm: the index pages in the page cache, as the scan's transcripts are
            store.search_messages(q)
        samples, hits = [], []
        for q in queries:
            ns, page = timed(lambda q=q: store.search_messages(q, limit=50))  # type: ignore[misc]  # noqa: B023
            samples.append(ns)
            hits.append(len(page.hits))  # type: ignore[attr-defined]
        hits_of[name] = hits
        med, p95 = summary(samples)
        rows.append((group, f"indexed search_messages, {len(queries)} queries (limit 50)", med, p95, len(samples)))
        ns, page = timed(lambda: store.search_messages(NEEDLE, limit=50))  # noqa: B023
        assert len(page.hits) == PLANTED  # type: ignore[attr-defined]
        rows.append((group, f"indexed search_messages({NEEDLE!r})", ns, ns, 1))
        figures.update({f"{name}_query_median_ns": med, f"{name}_query_p95_ns": p95,
                        f"{name}_hits_median": statistics.median(hits)})
        goals.append((f"indexed query p95, {name} store", p95 / 1e6, "<= 50 ms", p95 <= 50e6))
        speedup = figures[f"{name}_scan_ns"] / med
        goals.append((f"scan median / indexed median, {name} store", speedup, ">= 50x", speedup >= 50))
        store.close()

    env["loadavg_end"] = load_average()
    header = header_lines(env, "search", timing="perf_counter_ns per call; scan and grep take turns; warm page cache")
    out = [f"jsonl_sessions search benchmarks ({time.monotonic() - started:.0f} s)"]
    out += [f"  {k:<12} {v}" for k, v in header]
    out += [(f"  {'stores':<12} {sizes['ascii'] / 1e6:.0f} MB ascii, {sizes['mixed'] / 1e6:.0f} MB mixed, "
             f"{sizes['natural'] / 1e6:.0f} MB natural ({per_session} messages a session) in {args.cache}"), ""]
    titles = {"ascii": "scan, pure-ASCII store (synthetic vocabulary)",
              "mixed": "scan, mixed store (synthetic vocabulary; ANSI escapes, ß, accents, CJK, emoji)",
              "natural": "scan, natural-text store (English prose, code, ANSI tool output, 1% non-ASCII)"}
    for name in ("mixed", "natural"):
        st = statuses[name]
        titles[f"index-{name}"] = (f"full-text index of the {name} store ({st.bytes / 1e6:.0f} MB = "
                                   f"{st.bytes / sizes[name]:.2f}x the store, {st.entries:,} messages; "
                                   f"median hits a query {statistics.median(hits_of[name]):.0f})")
    for group, title in titles.items():
        out.append(title)
        for g, label, median, p95, n in rows:
            if g == group:
                out.append(f"  {label:<58} median {fmt(median):>9}  p95 {fmt(p95):>9}  ({n} calls)")
    out += ["", "goals (from this run; a measurement, never a gate):"]
    for text, value, need, met in goals:
        shown = f"{value:.1f} ms" if need.endswith("ms") else f"{value:.2f}x"
        verdict = "-" if need == "-" else "met" if met else "MISSED"
        out.append(f"  {verdict:<6}  {text:<44} {shown:>10}   {'goal ' + need if need != '-' else 'reported'}")
    print("\n".join(out))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"environment": env, "figures": figures,
                       "rows": [dict(zip(("group", "label", "median_ns", "p95_ns", "calls"), r)) for r in rows],
                       "goals": [dict(zip(("goal", "value", "need", "met"), g)) for g in goals]}, f, indent=2,
                      default=str)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
