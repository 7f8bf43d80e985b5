"""Child process for tests/jsonl/test_lifecycle_crash.py: lifecycle operations over many
sessions, to be SIGKILLed part-way, and the writer side of two races.

``python lifecycle_worker.py ROOT WORKLOAD SEED N`` prints one JSON event per line
(``ready`` after the set-up, ``begin`` right before the operation under test, ``ack``
after it returned, ``violation`` when a race check failed) and then waits to be killed.

Workloads:

- ``cleanup``: N aged sessions, then ``cleanup_stale(1)`` (fsync mode).
- ``delete``: N sessions owned by ``p`` (even) or ``q`` (odd); then
  ``delete_session_owned(key, "p")`` for every session and ``delete_session`` for every
  third one.
- ``rename``: N sessions of agent ``old`` and 10 of ``other``; then
  ``rename_agent_attribution("old", "new")``.
- ``stamper``: stamps the owner of session ``owned`` with ``alice`` or ``bob`` forever;
  when a stamp finds the session deleted, the last owner it stamped must be ``alice``
  (the only owner the racing deleter deletes for), else it reports a violation; then it
  recreates the session (no owner).
- ``turns``: runs turns on session ``busy``: append part 0, state running, append parts
  1 and 2 with the files aged in between (as if the turn were slow), state idle, then
  checks that the transcript holds only whole turns, and ages the files (idle and stale:
  the racing cleanup may delete it now).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

from jsonl_sessions import SessionNotFoundError, SessionStore

AGED = 2 * 3600  # seconds: older than the 1-hour TTL the tests use


def emit(event: dict[str, Any]) -> None:
    event["t"] = time.monotonic()
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def key_of(i: int) -> str:
    return f"s{i:04d}"


def age(store: SessionStore, key: str) -> None:
    then = time.time() - AGED
    stem = key  # the keys used here are their own stems
    for suffix in (".jsonl", ".meta.json"):
        try:
            os.utime(os.path.join(store.root, stem + suffix), (then, then))
        except FileNotFoundError:
            pass


def make(store: SessionStore, key: str, *, alias: str = "agent", owner: str | None = None) -> None:
    store.append_many(key, [{"role": "user", "content": f"{key}-0"}, {"role": "assistant", "content": f"{key}-1"}])
    store.set_session_name(key, f"name-{key}")
    store.set_session_agent_alias(key, alias)
    store.set_session_state(key, "idle")
    if owner is not None:
        store.set_session_principal(key, owner)


def wait_forever() -> None:
    while True:
        time.sleep(1)


def run_cleanup(root: str, n: int, rng: random.Random) -> None:
    setup = SessionStore(root, durability="flush")
    for i in range(n):
        make(setup, key_of(i))
        age(setup, key_of(i))
    store = SessionStore(root, durability="fsync")
    emit({"ev": "ready"})
    emit({"ev": "begin"})
    emit({"ev": "ack", "removed": store.cleanup_stale(1)})
    wait_forever()


def run_delete(root: str, n: int, rng: random.Random) -> None:
    setup = SessionStore(root, durability="flush")
    for i in range(n):
        make(setup, key_of(i), owner="p" if i % 2 == 0 else "q")
    store = SessionStore(root, durability="fsync")
    emit({"ev": "ready"})
    emit({"ev": "begin"})
    for i in range(n):
        if i % 3 == 0:
            store.delete_session(key_of(i))
        else:
            store.delete_session_owned(key_of(i), "p")
    emit({"ev": "ack"})
    wait_forever()


def run_rename(root: str, n: int, rng: random.Random) -> None:
    setup = SessionStore(root, durability="flush")
    for i in range(n + 10):
        make(setup, key_of(i), alias="old" if i < n else "other")
    store = SessionStore(root, durability="fsync")
    emit({"ev": "ready"})
    emit({"ev": "begin"})
    emit({"ev": "ack", "renamed": store.rename_agent_attribution("old", "new")})
    wait_forever()


def run_stamper(root: str, n: int, rng: random.Random) -> None:
    store = SessionStore(root, durability="flush")
    key = "owned"
    store.append(key, {"role": "user", "content": "x"})
    last: str | None = None
    emit({"ev": "ready"})
    stamps = deletions = 0
    while True:
        owner = rng.choice(("alice", "bob"))
        try:
            store.set_session_principal(key, owner)
            last = owner
            stamps += 1
        except SessionNotFoundError:
            deletions += 1
            if last != "alice":
                emit({"ev": "violation", "reason": f"deleted while owned by {last!r}"})
            store.append(key, {"role": "user", "content": "x"})
            last = None
        if stamps % 50 == 0:
            emit({"ev": "progress", "stamps": stamps, "deletions": deletions})
        time.sleep(rng.uniform(0, 0.001))  # let the deleter, polling for the guard, in


def run_turns(root: str, n: int, rng: random.Random) -> None:
    store = SessionStore(root, durability="flush")
    key = "busy"
    emit({"ev": "ready"})
    turn = 0
    while True:
        parts = [f"turn{turn}-{j}" for j in range(3)]
        try:
            store.append(key, {"role": "user", "content": parts[0]})
            store.set_session_state(key, "running", f"turn{turn}")
            age(store, key)
            store.append(key, {"role": "assistant", "content": parts[1]})
            age(store, key)
            store.append(key, {"role": "assistant", "content": parts[2]})
            store.set_session_state(key, "idle")
        except SessionNotFoundError:
            emit({"ev": "violation", "reason": f"session deleted during turn {turn}"})
            continue
        contents = [m.content for m in store.try_load(key)]
        whole = len(contents) % 3 == 0 and all(
            contents[j : j + 3] == [f"{contents[j].rsplit('-', 1)[0]}-{p}" for p in range(3)]
            for j in range(0, len(contents), 3)
        )
        if not whole:
            emit({"ev": "violation", "reason": f"transcript holds a partial turn: {contents}"})
        emit({"ev": "turn", "turn": turn, "messages": len(contents)})
        age(store, key)
        time.sleep(rng.uniform(0, 0.002))  # idle and stale: a window for the cleanup
        turn += 1


WORKLOADS = {
    "cleanup": run_cleanup,
    "delete": run_delete,
    "rename": run_rename,
    "stamper": run_stamper,
    "turns": run_turns,
}


def main() -> None:
    root, workload, seed, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    WORKLOADS[workload](root, n, random.Random(seed))


if __name__ == "__main__":
    main()
