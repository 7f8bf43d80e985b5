"""The PostgreSQL backend against psycopg doing the bare statements, in the same run.

``python -m benchmarks.postgres [--dsn DSN] [--quick | --smoke] [--json FILE]``: without ``--dsn`` a
throwaway local cluster is started (``jsonl_sessions.testing.pgserver``, fsync on, Unix
socket) and removed afterwards. Groups (medians and p95 per call, ratios to the floor):

- ``append_fsync`` / ``append_flush``: ``store.append`` (a transaction: advisory lock,
  session row, INSERT, counters, COMMIT) vs the floor, one bare autocommit ``INSERT`` of
  the same line with ``synchronous_commit`` on / off;
- ``page``: the newest 50 of a 10,000-message session, ``store.page`` vs a bare ``SELECT
  ... ORDER BY seq DESC LIMIT 50`` plus decoding the lines;
- ``count``: ``store.get_message_count`` (the counter column) vs a bare ``count(*)``;
- ``load``: ``store.load`` of 1,000 messages vs a bare ``SELECT`` plus decoding;
- ``scale``: appends per second of 8 threads on 8 sessions vs 1 thread (per-session
  advisory locks: the threads should not wait on each other, only on the server).

Timings are never a gate; ``tests/project/test_postgres_bench_smoke.py`` runs it with ``--smoke``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

from benchmarks.environ import environment, header_lines
from benchmarks.measure import BLOCK_SLOW, Group, Row, Target, interleaved, repeated
from benchmarks.table import render_text
from jsonl_sessions import ChatMessage
from jsonl_sessions.postgres import PostgresSessionStore

#: The schemas of one run: the store's, and the bare table's (new names each run, dropped at the end).
RUN = uuid.uuid4().hex[:12]
OURS, BARE = f"jsonl_bench_{RUN}", f"jsonl_bench_bare_{RUN}"


@contextlib.contextmanager
def server(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    from jsonl_sessions.testing.pgserver import temp_cluster

    with temp_cluster(fsync=True) as cluster:
        yield cluster.dsn


def message(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i}: " + "lorem ipsum " * 8}


def run(dsn: str, *, quick: bool, smoke: bool = False) -> tuple[list[Group], list[Target], dict[str, Any]]:
    import psycopg

    appends = 10 if smoke else 60 if quick else 600
    big = 1_000 if smoke else 2_000 if quick else 10_000
    reps = 3 if smoke else 10 if quick else 60
    groups: list[Group] = []
    goals: list[Target] = []
    bare = psycopg.connect(dsn, autocommit=True)
    bare.execute(f"CREATE SCHEMA {BARE}; CREATE TABLE {BARE}.lines (session bigint NOT NULL, seq bigint NOT NULL, "
                 "line text NOT NULL, PRIMARY KEY (session, seq))")
    line = orjson.dumps({"id": "01JBENCHBENCHBENCHBENCHBEN", "created_at": 0, **message(1)}).decode()
    seq = [0]

    def bare_insert(_i: int) -> None:
        seq[0] += 1
        bare.execute(f"INSERT INTO {BARE}.lines VALUES (1, %s, %s)", (seq[0], line))

    for mode in ("fsync", "flush"):
        store = PostgresSessionStore(dsn, schema=OURS, durability=mode)  # type: ignore[arg-type]
        bare.execute(f"SET synchronous_commit = {'on' if mode == 'fsync' else 'off'}")

        def ours(i: int, store: PostgresSessionStore = store, key: str = f"a-{mode}") -> str:
            return store.append(key, message(i))

        samples = interleaved({"floor": bare_insert, "jsonl_sessions": ours}, count=appends, block=BLOCK_SLOW, warmup=5)
        groups.append(Group(f"append_{mode}", f"append one message, durability={mode!r}", "call", [
            Row("floor", f"psycopg: one bare INSERT (synchronous_commit {'on' if mode == 'fsync' else 'off'})",
                samples["floor"]),
            Row("jsonl_sessions", "PostgresSessionStore.append (advisory lock, row, INSERT, counters, COMMIT)",
                samples["jsonl_sessions"])]).finish())
        store.close()
    bare.execute("SET synchronous_commit = on")

    store = PostgresSessionStore(dsn, schema=OURS, durability="flush")
    for start in range(0, big, 1000):
        store.append_many("big", [message(i) for i in range(start, start + 1000)])
    sid = bare.execute(f"SELECT id FROM {OURS}.sessions WHERE key = 'big'").fetchone()[0]  # type: ignore[index]
    store.append_many("small", [message(i) for i in range(1000)])
    small = bare.execute(f"SELECT id FROM {OURS}.sessions WHERE key = 'small'").fetchone()[0]  # type: ignore[index]

    def bare_page() -> list[ChatMessage]:
        got = bare.execute(f"SELECT line FROM {OURS}.messages WHERE session = %s ORDER BY seq DESC LIMIT 50",
                           (sid,)).fetchall()
        return [ChatMessage.from_dict(orjson.loads(text)) for (text,) in reversed(got)]

    def bare_load() -> list[ChatMessage]:
        got = bare.execute(f"SELECT line FROM {OURS}.messages WHERE session = %s ORDER BY seq", (small,)).fetchall()
        return [ChatMessage.from_dict(orjson.loads(text)) for (text,) in got]

    def bare_count() -> int:
        row = bare.execute(f"SELECT count(*) FROM {OURS}.messages WHERE session = %s", (sid,)).fetchone()
        return int(row[0]) if row else 0

    for gid, title, ops, rows in (
        ("page", f"the newest 50 of {big:,} messages", {"floor": bare_page, "jsonl_sessions": lambda: store.page(
            "big", limit=50).messages}, ("psycopg: bare SELECT ... LIMIT 50, decoded", "PostgresSessionStore.page")),
        ("count", f"count {big:,} messages", {"floor": bare_count, "jsonl_sessions": lambda: store.get_message_count(
            "big")}, ("psycopg: bare count(*)", "PostgresSessionStore.get_message_count (counter column)")),
        ("load", "load 1,000 messages", {"floor": bare_load, "jsonl_sessions": lambda: store.load("small")},
         ("psycopg: bare SELECT, decoded", "PostgresSessionStore.load")),
    ):
        samples = repeated(ops, reps=reps)
        groups.append(Group(gid, title, "call", [Row("floor", rows[0], samples["floor"]),
                                                 Row("jsonl_sessions", rows[1], samples["jsonl_sessions"])]).finish())
    store.close()

    scale = scaling(dsn, seconds=0.2 if smoke else 1.0 if quick else 4.0)
    goals.append(Target("scale", "8 threads on 8 sessions vs 1 thread, appends per second (fsync)",
                        "8 threads / 1 thread", scale["ratio"], ">= 1.5"))
    bare.execute(f"DROP SCHEMA {OURS} CASCADE; DROP SCHEMA {BARE} CASCADE")
    bare.close()
    return groups, goals, scale


def scaling(dsn: str, *, seconds: float) -> dict[str, Any]:
    """Appends per second with 1 thread, then 8 threads each on a session of its own."""
    store = PostgresSessionStore(dsn, schema=OURS, durability="fsync", pool_size=16)
    rates = {}
    for threads in (1, 8):
        done = [0] * threads
        stop = threading.Event()

        def work(t: int, done: list[int] = done, stop: threading.Event = stop, threads: int = threads) -> None:
            while not stop.is_set():
                store.append(f"scale-{threads}-{t}", message(done[t]))
                done[t] += 1

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join()
        rates[threads] = sum(done) / (time.perf_counter() - t0)
    store.close()
    return {"one_thread_per_s": rates[1], "eight_threads_per_s": rates[8], "ratio": rates[8] / rates[1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgres", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="a PostgreSQL DSN (default: a throwaway local cluster)")
    parser.add_argument("--quick", action="store_true", help="small counts")
    parser.add_argument("--smoke", action="store_true", help="tiny counts: checks that it runs, times nothing")
    parser.add_argument("--json", help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    with server(args.dsn) as dsn:
        import psycopg

        with psycopg.connect(dsn) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        env = environment(os.getcwd(), label="PostgreSQL backend")
        groups, goals, scale = run(dsn, quick=args.quick, smoke=args.smoke)
    header = header_lines(env, "quick" if args.quick else "full") + [
        ("postgresql", f"{version} ({'the given DSN' if args.dsn else 'a throwaway local cluster, Unix socket'})"),
        ("scale", f"1 thread {scale['one_thread_per_s']:.0f}/s, 8 threads {scale['eight_threads_per_s']:.0f}/s")]
    print(render_text("jsonl_sessions.postgres vs bare psycopg", header, groups, goals))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"env": env, "groups": [{"id": g.id, "rows": [{"impl": r.impl, "median_ns": r.median_ns,
                                                                      "p95_ns": r.p95_ns} for r in g.rows]}
                                              for g in groups], "scale": scale}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
