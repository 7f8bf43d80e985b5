"""Child processes for tests/jsonl/test_concurrency.py.

Usage: ``python concurrency_worker.py COMMAND ARGS...``

- ``writer ROOT KEY WRITER THREADS COUNT GO DURABILITY``: wait for file GO, then THREADS threads
  each append COUNT messages ``{"w": "<WRITER>.<thread>", "s": seq}`` to KEY; print
  ``{"w.t": [ids in seq order], ...}``.
- ``reader ROOT KEY STOP OUT``: poll ``try_load`` until file STOP exists (then once
  more); every result must extend the previous one (same ids, more or as many); write a
  JSON summary to OUT. Exits 1 at the first exception or violation.
- ``mutator ROOT KEY OPS SEED GO LOG DURABILITY``: one thread: OPS random appends / update_last /
  remove_last on KEY; after each, one line with the hash of the new state to LOG.
- ``checker ROOT KEY STOP OUT``: poll ``try_load`` lock-free until STOP exists; every
  message must carry an intact checksum; the sequence of distinct states seen (hashes)
  goes to OUT.
- ``hold ROOT KEY``: hold KEY's guard, print ``held``, wait until stdin closes.
- ``append ROOT KEY``: append one message to KEY (lock_timeout 30 s), print its id.

``writer``, ``reader``, ``mutator`` and ``checker`` print ``ready`` once started (and,
for the pollers, after their first poll), so the parent can start them together.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import threading
import time
import traceback
import zlib
from typing import Any

from jsonl_sessions import ChatMessage, SessionStore


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.001)


def writer(root: str, key: str, name: str, threads: int, count: int, go: str, durability: str) -> None:
    store = SessionStore(root, durability=durability)  # type: ignore[arg-type]
    results: dict[str, list[str]] = {}
    errors: list[str] = []
    print("ready", flush=True)
    wait_for(go)

    def run(t: int) -> None:
        label = f"{name}.{t}"
        try:
            results[label] = [store.append(key, {"role": "user", "content": {"w": label, "s": s}}) for s in range(count)]
        except Exception:  # noqa: BLE001 - reported on stderr, exit status 1
            errors.append(traceback.format_exc())

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        sys.stderr.write("\n".join(errors))
        sys.exit(1)
    print(json.dumps(results))


def reader(root: str, key: str, stop: str, out: str) -> None:
    store = SessionStore(root, durability="fsync")
    polls = 0
    growths = 0
    previous: list[str] = []
    final = False
    while True:
        final = os.path.exists(stop)
        ids = [m.id for m in store.try_load(key)]  # any exception ends the process with a traceback
        polls += 1
        if polls == 1:
            print("ready", flush=True)
        if ids[: len(previous)] != previous:
            with open(out, "w") as f:
                json.dump({"violation": f"poll {polls}: {len(ids)} messages do not extend the {len(previous)} seen before",
                           "polls": polls}, f)
            sys.exit(1)
        growths += len(ids) > len(previous)
        previous = ids
        if final:
            break
    with open(out, "w") as f:
        json.dump({"polls": polls, "growths": growths, "last": len(previous)}, f)


def checked_content(rng: random.Random, tag: str) -> dict[str, Any]:
    pad = "p" * rng.choice((0, 100, 3000, 9000))
    return {"tag": tag, "pad": pad, "sum": zlib.crc32((tag + pad).encode())}


def state_hash(pairs: list[tuple[str, str]]) -> str:
    return hashlib.sha1("\n".join(f"{i}:{t}" for i, t in pairs).encode()).hexdigest()


def mutator(root: str, key: str, ops: int, seed: int, go: str, log: str, durability: str) -> None:
    rng = random.Random(seed)
    store = SessionStore(root, durability=durability)  # type: ignore[arg-type]
    state = [(m.id, m.content["tag"]) for m in store.try_load(key)]
    with open(log, "w", buffering=1) as f:
        f.write(state_hash(state) + "\n")
        print("ready", flush=True)
        wait_for(go)
        for i in range(ops):
            roll = rng.random()
            tag = f"m{i}"
            if len(state) < 2 or roll < 0.4:
                state.append((store.append(key, {"role": "user", "content": checked_content(rng, tag)}), tag))
            elif roll < 0.7:
                assert store.update_last(key, {"role": "assistant", "content": checked_content(rng, tag)})
                state[-1] = (state[-1][0], tag)
            else:
                assert store.remove_last(key)
                state.pop()
            f.write(state_hash(state) + "\n")


def checker(root: str, key: str, stop: str, out: str) -> None:
    store = SessionStore(root, durability="fsync")
    seen: list[str] = []
    polls = 0
    while not os.path.exists(stop):
        messages: list[ChatMessage] = store.try_load(key)  # a spliced line would raise here...
        polls += 1
        if polls == 1:
            print("ready", flush=True)
        for m in messages:  # ...or fail its checksum here
            c = m.content
            if zlib.crc32((c["tag"] + c["pad"]).encode()) != c["sum"]:
                raise AssertionError(f"poll {polls}: message {m.id} is not what was written: {str(c)[:200]}")
        ids = [m.id for m in messages]
        if ids != sorted(set(ids)):
            raise AssertionError(f"poll {polls}: ids not strictly increasing")
        h = state_hash([(m.id, m.content["tag"]) for m in messages])
        if not seen or seen[-1] != h:
            seen.append(h)
    with open(out, "w") as f:
        json.dump({"polls": polls, "states": seen}, f)


def hold(root: str, key: str) -> None:
    store = SessionStore(root, durability="fsync")
    with store.lock(key):
        print("held", flush=True)
        sys.stdin.read()


def append(root: str, key: str) -> None:
    store = SessionStore(root, durability="fsync", lock_timeout=30)
    print(store.append(key, {"role": "user", "content": "from another process"}), flush=True)


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "writer":
        writer(args[0], args[1], args[2], int(args[3]), int(args[4]), args[5], args[6])
    elif command == "reader":
        reader(*args)
    elif command == "mutator":
        mutator(args[0], args[1], int(args[2]), int(args[3]), args[4], args[5], args[6])
    elif command == "checker":
        checker(*args)
    elif command == "hold":
        hold(*args)
    elif command == "append":
        append(*args)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
