"""The web viewer (``jsonl-sessions serve``) on a 1M-message session: the time to its first
page and to each older page, through HTTP to a running server, next to the floor (the store
call alone, in this process).

A real server process (``python -m jsonl_sessions serve STORE --port 0``) on a JSONL store
holding one session of ``--messages`` messages (default one million, agent-like text from
``benchmarks.workload``); a keep-alive HTTP client (``http.client``) with the token's
cookie. Groups, each per call, median and p95, calls interleaved (the implementations
take turns every 5 calls):

- **first page**: ``GET /session?key=K`` (the whole HTML page of the newest 50 messages,
  rendered) and ``GET /messages.part?key=K&after=ID`` (the live tail's poll when nothing
  is new), next to ``store.page(K, limit=50, whole_turns=True)``;
- **older page**: ``GET /messages.part?key=K&before=ID`` at random messages of the session
  (scrolling back), next to ``store.page(K, limit=50, before=ID, whole_turns=True)``.

Also printed: the very first request after the server started (one sample, cold caches of
the server process). The ratios to the floor are reported without a goal: what they show
is the cost of rendering and HTTP on top of an O(page) read. Run it with ``--messages
10000`` next to the default to see that the page costs the same at any session length.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from urllib.parse import quote

from benchmarks.environ import environment, header_lines, load_average
from benchmarks.measure import BLOCK_SLOW, Group, Row, Target, interleaved
from benchmarks.table import fmt_ns, render_markdown, render_text, to_json
from benchmarks.workload import MessageFactory
from jsonl_sessions import SessionStore

KEY = "agent/long-run"
PAGE = 50


def build(root: str, n: int, progress: object) -> SessionStore:
    store = SessionStore(root, durability="flush")
    factory = MessageFactory()
    batch = 10_000
    for lo in range(0, n, batch):
        store.append_many(KEY, factory.make(min(batch, n - lo), salt=lo // batch))
        if lo and lo % 200_000 == 0:
            print(f"[benchmarks.viewer] {lo:,} messages ...", file=sys.stderr, flush=True)
    return store


class Client:
    """A keep-alive HTTP client of the running viewer, signed in with its token."""

    def __init__(self, url: str) -> None:
        rest = url.removeprefix("http://")
        hostport, query = rest.split("/?token=", 1)
        host, port = hostport.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.headers = {"Cookie": f"jsonl_sessions_token_{port}={query}", "Host": hostport}

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path, headers=self.headers)
        response = self.conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:200]!r}")
        return body


def start_server(root: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "jsonl_sessions", "serve", root, "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "?token=" in line:
            return proc, line.strip()
    raise RuntimeError("the server printed no address")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.viewer", description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="messages in the session (default 1M)")
    p.add_argument("--calls", type=int, default=300, help="timed calls of each implementation per group")
    p.add_argument("--quick", action="store_true", help="10k messages, 60 calls")
    p.add_argument("--dir", default=None, help="make the temp dir inside DIR (it decides the file system)")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the results as JSON")
    p.add_argument("--markdown", action="store_true", help="also print a README-ready Markdown table")
    args = p.parse_args(argv)
    if args.quick:
        args.messages, args.calls = min(args.messages, 10_000), min(args.calls, 60)
    mode = f"{args.messages:,} messages, {args.calls} calls"
    base = tempfile.mkdtemp(prefix="jsonl-sessions-viewer-bench-", dir=args.dir)
    started = time.monotonic()
    proc = None
    try:
        env = environment(base)
        root = os.path.join(base, "store")
        store = build(root, args.messages, None)
        ids = [m.id for m in store.page(KEY, limit=1).messages]
        rng = random.Random(7)
        # cursors spread over the session: every message's id is not known without a load,
        # so take the ids of pages at random offsets (get_messages counts from the nearer end)
        cursors = [store.get_messages(KEY, limit=1, offset=rng.randrange(PAGE, args.messages))[0].id
                   for _ in range(64)]
        proc, url = start_server(root)
        client = Client(url)
        key = quote(KEY, safe="")
        t0 = time.perf_counter_ns()
        client.get(f"/session?key={key}")
        cold = time.perf_counter_ns() - t0
        last = ids[-1]
        first = interleaved({
            "floor": lambda i: store.page(KEY, limit=PAGE, whole_turns=True),
            "jsonl_sessions": lambda i: client.get(f"/session?key={key}"),
            "tail_poll": lambda i: client.get(f"/messages.part?key={key}&after={quote(last)}"),
        }, count=args.calls, block=BLOCK_SLOW, warmup=5)
        older = interleaved({
            "floor": lambda i: store.page(KEY, limit=PAGE, before=cursors[i % len(cursors)], whole_turns=True),
            "jsonl_sessions": lambda i: client.get(f"/messages.part?key={key}&before={quote(cursors[i % len(cursors)])}"),
        }, count=args.calls, block=BLOCK_SLOW, warmup=5)
        store.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.monotonic() - started
    env["loadavg_end"] = load_average()
    groups = [
        Group("first_page", f"newest page of a {args.messages:,}-message session", "request", [
            Row("floor", "floor: store.page(limit=50, whole_turns=True), in process", first["floor"]),
            Row("jsonl_sessions", "GET /session (whole HTML page, rendered)", first["jsonl_sessions"]),
            Row("tail_poll", "GET /messages.part?after=newest (live-tail poll)", first["tail_poll"]),
        ]).finish(),
        Group("older_page", "an older page by cursor, at random points", "request", [
            Row("floor", "floor: store.page(limit=50, before=ID, whole_turns=True)", older["floor"]),
            Row("jsonl_sessions", "GET /messages.part?before=ID (50 messages, rendered)", older["jsonl_sessions"]),
        ]).finish(),
    ]
    goals = [Target(g.id, f"{g.title}: through HTTP / the store call", "ours / floor",
                    g.row("jsonl_sessions").median_ns / g.row("floor").median_ns, None) for g in groups]
    header = header_lines(env, mode, timing=(
        f"perf_counter_ns per call; HTTP/1.1 keep-alive to a server process; turns every {BLOCK_SLOW} calls; "
        f"first request after start: {fmt_ns(cold)} (cold)"))
    print(render_text(f"jsonl_sessions viewer benchmarks ({mode}, {elapsed:.0f} s)", header, groups, goals))
    if args.markdown:
        print()
        print(render_markdown(header, groups, goals))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(to_json(env, mode, {"messages": args.messages, "calls": args.calls}, groups, goals, elapsed),
                      f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
