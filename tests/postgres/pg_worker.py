"""Child processes for tests/postgres/test_postgres_faults.py (the PostgreSQL backend).

Usage: ``python pg_worker.py COMMAND DSN SCHEMA ARGS...``

- ``writer DSN SCHEMA MODE WRITER THREADS COUNT``: THREADS threads each append COUNT
  messages ``{"w": "<WRITER>.<thread>", "s": seq}``, to the session ``shared`` (MODE
  ``one``) or to a session of their own (``many``); print ``{"w.t": [ids], ...}``.
- ``appender DSN SCHEMA KEY``: append messages ``{"n": n}`` forever (every third call an
  ``append_many`` of two), printing ``ack N ID`` after each acknowledged one; killed by
  the parent.
- ``lockheld DSN SCHEMA KEY``: inside ``lock(KEY)``: append one message, print ``acked
  ID``, then wait inside the block until killed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from jsonl_sessions.postgres import PostgresSessionStore


def writer(store: PostgresSessionStore, mode: str, name: str, threads: int, count: int) -> None:
    out: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def run(t: int) -> None:
        key = "shared" if mode == "one" else f"s-{name}-{t}"
        tag = f"{name}.{t}"
        try:
            out[tag] = [store.append(key, {"role": "user", "content": {"w": tag, "s": s}}) for s in range(count)]
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    print(json.dumps(out), flush=True)


def appender(store: PostgresSessionStore, key: str) -> None:
    n = 0
    while True:
        if n % 3 == 2:
            got = store.append_many(key, [{"role": "user", "content": {"n": n}}, {"role": "user", "content": {"n": n + 1}}])
            for i, mid in enumerate(got):
                print(f"ack {n + i} {mid}", flush=True)
            n += 2
        else:
            mid = store.append(key, {"role": "user", "content": {"n": n}})
            print(f"ack {n} {mid}", flush=True)
            n += 1


def lockheld(store: PostgresSessionStore, key: str) -> None:
    with store.lock(key):
        mid = store.append(key, {"role": "user", "content": "inside the block"})
        print(f"acked {mid}", flush=True)
        while True:
            time.sleep(1)


def main(argv: list[str]) -> None:
    command, dsn, schema, *args = argv
    options: dict[str, Any] = {"schema": schema, "pool_size": 6, "lock_timeout": 60}
    store = PostgresSessionStore(dsn, **options)
    if command == "writer":
        writer(store, args[0], args[1], int(args[2]), int(args[3]))
    elif command == "appender":
        appender(store, args[0])
    elif command == "lockheld":
        lockheld(store, args[0])
    else:
        raise SystemExit(f"unknown command {command!r}")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
