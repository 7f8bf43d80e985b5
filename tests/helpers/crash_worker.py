"""Child process for tests/jsonl/test_crash.py: mutates one session until it is SIGKILLed.

Usage: ``python crash_worker.py ROOT KEY WORKLOAD SEED``

It opens a :class:`SessionStore` on ROOT in fsync mode (flush for ``big``), writes
``{"ev": "ready"}`` and then, for every mutation, one JSON line *before* the call
(``{"ev": "begin", "op": ..., ...}``: what it is about to do) and one line *after* the
call returned (``{"ev": "ack", ...}``: acknowledged, with the ids it returned). Every line
is flushed at once, so the parent (which redirects stdout to a file) knows exactly which
mutations were acknowledged when the kill landed, and which one was in flight.

Workloads: ``append``, ``append_many``, ``rewrite`` (with appends between),
``replace`` (``replace_conversation_state`` and ``..._if_exists``), ``update_remove``
(appends, ``update_last``, ``remove_last``), ``big`` (8 MiB appends, to be killed
mid-write), ``torn_holder``, ``fsize`` and ``big_update`` (see their docstrings).

Message contents are unique tokens; an extra ``pad`` field of random length makes lines
cross page boundaries. ``replace`` writes the breadcrumb flag ``len(messages) % 2 == 0``
so the checker can verify that flag and transcript were written together.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

from jsonl_sessions import SessionStore


def emit(event: dict[str, Any]) -> None:
    event["t"] = time.monotonic()  # system-wide clock: the parent can time its kill from it
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def message(rng: random.Random, token: str) -> dict[str, Any]:
    return {"role": rng.choice(("user", "assistant")), "content": token, "pad": "x" * rng.choice((0, 10, 300, 5000))}


def run_append(store: SessionStore, key: str, rng: random.Random) -> None:
    i = 0
    while True:
        token = f"a{i}"
        emit({"ev": "begin", "op": "append", "tokens": [token]})
        mid = store.append(key, message(rng, token))
        emit({"ev": "ack", "ids": [mid]})
        i += 1


def run_append_many(store: SessionStore, key: str, rng: random.Random) -> None:
    i = 0
    while True:
        tokens = [f"b{i}-{j}" for j in range(rng.randint(1, 6))]
        emit({"ev": "begin", "op": "append", "tokens": tokens})
        ids = store.append_many(key, [message(rng, t) for t in tokens])
        emit({"ev": "ack", "ids": ids})
        i += 1


def run_rewrite(store: SessionStore, key: str, rng: random.Random) -> None:
    i = 0
    while True:
        if i and rng.random() < 0.3:
            tokens = [f"p{i}"]
            emit({"ev": "begin", "op": "append", "tokens": tokens})
            ids = [store.append(key, message(rng, tokens[0]))]
        else:
            tokens = [f"r{i}-{j}" for j in range(rng.randint(0, 30))]
            emit({"ev": "begin", "op": "rewrite", "tokens": tokens})
            store.rewrite_messages(key, [message(rng, t) for t in tokens])
            ids = []
        emit({"ev": "ack", "ids": ids})
        i += 1


def run_replace(store: SessionStore, key: str, rng: random.Random) -> None:
    i = 0
    while True:
        tokens = [f"s{i}-{j}" for j in range(rng.randint(0, 20))]
        flag = len(tokens) % 2 == 0
        op = "replace_if_exists" if i and rng.random() < 0.5 else "replace"
        emit({"ev": "begin", "op": op, "tokens": tokens, "breadcrumb": flag})
        msgs = [message(rng, t) for t in tokens]
        if op == "replace":
            store.replace_conversation_state(key, msgs, flag)
        elif not store.replace_conversation_state_if_exists(key, msgs, flag):
            raise AssertionError("replace_conversation_state_if_exists found no session")
        emit({"ev": "ack", "ids": []})
        i += 1


def run_update_remove(store: SessionStore, key: str, rng: random.Random) -> None:
    count = 0
    i = 0
    while True:
        roll = rng.random()
        if count < 2 or roll < 0.4:
            token = f"u{i}"
            emit({"ev": "begin", "op": "append", "tokens": [token]})
            ids = [store.append(key, message(rng, token))]
            count += 1
        elif roll < 0.7:
            token = f"u{i}"
            emit({"ev": "begin", "op": "update_last", "tokens": [token]})
            if not store.update_last(key, message(rng, token)):
                raise AssertionError("update_last found no message")
            ids = []
        else:
            emit({"ev": "begin", "op": "remove_last"})
            if not store.remove_last(key):
                raise AssertionError("remove_last found no message")
            ids = []
            count -= 1
        emit({"ev": "ack", "ids": ids})
        i += 1


def run_big(store: SessionStore, key: str, rng: random.Random) -> None:
    """Append an 8 MiB message and clear the session again, forever: a kill during the
    write leaves a genuinely torn tail (the kernel stops a large write at a fatal signal)."""
    token = "base"
    emit({"ev": "begin", "op": "append", "tokens": [token]})
    emit({"ev": "ack", "ids": [store.append(key, {"role": "user", "content": token})]})
    pad = "y" * (8 << 20)
    i = 0
    while True:
        token = f"big{i}"
        emit({"ev": "begin", "op": "append", "tokens": [token]})
        ids = [store.append(key, {"role": "user", "content": token, "pad": pad})]
        emit({"ev": "ack", "ids": ids})
        emit({"ev": "begin", "op": "clear"})
        store.clear_messages(key)
        emit({"ev": "ack", "ids": []})
        i += 1


def run_torn_holder(store: SessionStore, key: str, rng: random.Random) -> None:
    """Append two messages, then, holding the session's guard, write a fragment without
    its newline straight to the transcript (what a writer killed mid-write leaves) and
    wait to be killed."""
    for token in ("t0", "t1"):
        emit({"ev": "begin", "op": "append", "tokens": [token]})
        emit({"ev": "ack", "ids": [store.append(key, {"role": "user", "content": token})]})
    fragment = os.environ["CRASH_WORKER_FRAGMENT"].encode("utf-8")
    with store.lock(key):
        path = os.path.join(store.root, key + ".jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, fragment)
        os.fsync(fd)
        emit({"ev": "torn"})
        while True:
            time.sleep(1)


def run_fsize(store: SessionStore, key: str, rng: random.Random) -> None:
    """Append one message, then (``CRASH_WORKER_BATCH`` > 1: ``append_many`` of that many)
    one that crosses a file-size limit set ``CRASH_WORKER_TORN_BYTES`` past the
    transcript's end: the kernel writes up to the limit (a short write) and, when the
    store's write loop asks for the rest, kills the process with SIGXFSZ (restored to
    its default action; Python ignores it). The transcript ends in a genuine fragment."""
    import resource
    import signal

    emit({"ev": "begin", "op": "append", "tokens": ["f0"]})
    emit({"ev": "ack", "ids": [store.append(key, {"role": "user", "content": "f0"})]})
    size = os.path.getsize(os.path.join(store.root, key + ".jsonl"))
    limit = size + int(os.environ["CRASH_WORKER_TORN_BYTES"])
    tokens = [f"f{i}" for i in range(1, 1 + int(os.environ.get("CRASH_WORKER_BATCH", "1")))]
    emit({"ev": "begin", "op": "append", "tokens": tokens})  # before the limit: it applies to stdout too
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    store.append_many(key, [{"role": "user", "content": t, "pad": "z" * 100_000} for t in tokens])
    emit({"ev": "ack", "ids": []})  # not reached


def run_big_update(store: SessionStore, key: str, rng: random.Random) -> None:
    """Append two messages, then ``update_last`` with a large one, and die by SIGKILL (sent
    through the platform seam) just before the new line is written: its roll-forward
    record is committed and the transcript already cut to the old last line's start.
    ``CRASH_WORKER_UPDATE``: ``quotes`` (5 million double quotes: each is escaped twice,
    in the line and again in the record, which ends up four times as long), ``max``
    (plain text making the line exactly ``max_message_bytes`` long) or a number of plain
    bytes. The ``begin`` event names the content's character and length."""
    from jsonl_sessions.errors import InvalidMessageError
    from jsonl_sessions.testing.faults import FaultInjector

    for token in ("v0", "v1"):
        emit({"ev": "begin", "op": "append", "tokens": [token]})
        emit({"ev": "ack", "ids": [store.append(key, {"role": "user", "content": token, "pad": "p" * 100})]})
    path = os.path.join(store.root, key + ".jsonl")
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    at = len(lines[0])  # where the last line starts: the rewrite writes its new line there
    what = os.environ["CRASH_WORKER_UPDATE"]
    char, size = ('"', 5_000_000) if what == "quotes" else ("x", int(what) if what != "max" else 0)
    if what == "max":  # the old line holds "v1" and the pad; the new one only the content
        size = store._root.max_message_bytes - (len(lines[1]) - len("v1") - len('"pad":"",') - 100)

    def line_write(kind: str, args: tuple[Any, ...]) -> bool:
        return bool(args[2] == at and len(args[1]) > 1 << 20)

    for shrink in range(64):  # "max": the first size the store accepts (the exact overhead may vary)
        emit({"ev": "begin", "op": "update_last", "char": char, "size": size - shrink})
        try:
            with FaultInjector("pwrite", action="sigkill", match=line_write):
                store.update_last(key, {"role": "user", "content": char * (size - shrink)})
        except InvalidMessageError:
            if what != "max":
                raise
            continue
        break
    emit({"ev": "ack", "ids": []})  # not reached: the kill comes first


WORKLOADS = {
    "append": run_append,
    "append_many": run_append_many,
    "rewrite": run_rewrite,
    "replace": run_replace,
    "update_remove": run_update_remove,
    "big": run_big,
    "torn_holder": run_torn_holder,
    "fsize": run_fsize,
    "big_update": run_big_update,
}


def main() -> None:
    root, key, workload, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    store = SessionStore(root, durability="flush" if workload == "big" else "fsync", lock_timeout=10)
    emit({"ev": "ready", "pid": os.getpid()})
    WORKLOADS[workload](store, key, rng)


if __name__ == "__main__":
    main()
