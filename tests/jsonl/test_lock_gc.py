"""Lock files of sessions that no longer exist are removed (``cleanup_stale``, ``gc``) without
ever letting two processes hold one session's guard at once.

- which files go: the lock files of deleted and never-created (mistyped) keys, short and
  long; never a live session's, a busy one's, a symlink, or a file the store does not make;
- a process that still has a removed lock file open (its guard kept the descriptor) and
  locks it later opens the path again: it waits for whoever holds the new file;
- real processes: a long-lived writer (keeping its descriptors) and forked writers (each
  opening the lock file afresh) append, check and delete one key under its guard while
  another process runs ``gc`` in a loop: mutual exclusion holds (an ``O_EXCL`` marker file
  and a counter file changed under the guard), no acknowledged message is missing.

This file is also the worker (``python test_lock_gc.py ROLE ...``).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import orjson
import pytest
from _budget import sized
from sigkill import ENV

from jsonl_sessions import LockTimeoutError, SessionStore
from jsonl_sessions.cli import main
from jsonl_sessions.jsonl.store import prune_report
from jsonl_sessions.keys import key_to_stem

LONG = "long/" + "k" * 300


def names(root: pathlib.Path) -> set[str]:
    return {p.name for p in root.iterdir()}


def lock(key: str) -> str:
    return key_to_stem(key) + ".lock"


def populated(root: pathlib.Path) -> SessionStore:
    store = SessionStore(root, durability="flush")
    for key in ("live", "gone", LONG, "orphan"):
        store.append(key, {"role": "user", "content": key})
    store.delete_session("gone")
    store.delete_session(LONG)
    assert store.remove_last("typo") is False  # a mistyped key leaves a lock file too
    os.unlink(root / (key_to_stem("orphan") + ".jsonl"))  # an orphan sidecar, as a killed delete leaves
    (root / "Foreign.lock").write_bytes(b"not ours")
    (root / "gone.quarantine-20240101T000000000Z.jsonl.bak").write_bytes(b"{}\n")
    os.symlink(root / "Foreign.lock", root / "linked.lock")
    assert {lock(k) for k in ("live", "gone", LONG, "orphan", "typo")} <= names(root)
    return store


def test_cleanup_stale_removes_lock_files_of_absent_sessions(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    store = populated(root)
    assert store.cleanup_stale(1) == 0
    left = names(root)
    assert {lock(k) for k in ("gone", LONG, "typo")}.isdisjoint(left)
    assert {lock("live"), lock("orphan"), "Foreign.lock", "linked.lock"} <= left  # the orphan sidecar is young
    assert store.load("live")[0].content == "live"
    store.append("gone", {"role": "user", "content": "back"})
    assert [m.content for m in store.load("gone")] == ["back"] and lock("gone") in names(root)


def test_gc_removes_lock_files_and_orphans_and_keeps_live_sessions(tmp_path: pathlib.Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    store = populated(root)
    with store.lock("live"):
        holder = SessionStore(root, durability="flush")
        holder.append("busy", {"role": "user"})
        holder.delete_session("busy")
        with holder.lock("busy"):  # a busy absent session is skipped...
            assert main(["--root", str(root), "gc", "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    gone = {lock(k) for k in ("gone", LONG, "typo", "orphan")}
    assert {os.path.basename(p) for p in report["locks"]} == gone
    assert [os.path.basename(p) for p in report["sidecars"]] == [key_to_stem("orphan") + ".meta.json"]
    assert names(root) == {lock("live"), key_to_stem("live") + ".jsonl", key_to_stem("live") + ".meta.json",
                           lock("busy"), "Foreign.lock", "linked.lock", "gone.quarantine-20240101T000000000Z.jsonl.bak"}
    assert main(["--root", str(root), "gc"]) == 0  # ...until it is free
    assert "removed 1 lock file, 0 orphan sidecars and 0 temp files" in capsys.readouterr().out
    assert main(["--root", str(root), "gc"]) == 0
    assert "nothing to collect" in capsys.readouterr().out
    assert store.list_sessions() == ["live"] and store.load("live")[0].content == "live"


def test_gc_of_this_process_reopens_its_own_guard(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    store.append("k", {"role": "user", "content": 1})
    store.delete_session("k")
    assert [os.path.basename(p) for p in prune_report(store).locks] == [lock("k")]
    store.append("k", {"role": "user", "content": 2})
    lock_path = tmp_path / "store" / lock("k")
    with store.lock("k"):
        probe = os.open(lock_path, os.O_RDONLY)
        try:
            import fcntl
            with pytest.raises(BlockingIOError):  # the guard holds the file that is at the path now
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)


# -- another process holding a removed lock file ----------------------------------------------
def holder_main(root: str) -> None:
    """Keep the guard of "k" (its lock file's descriptor) from a delete, then on each
    "try" line from stdin try to take it (0.3 s) and say whether it could."""
    store = SessionStore(root, durability="flush", lock_timeout=0.3)
    store.append("k", {"role": "user"})
    store.delete_session("k")
    print("ready", flush=True)
    for _line in sys.stdin:
        try:
            with store.lock("k"):
                print("took", flush=True)
        except LockTimeoutError:
            print("timeout", flush=True)


def test_a_process_with_a_removed_lock_file_open_waits_for_the_new_one(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    store = SessionStore(root, durability="flush")
    proc = subprocess.Popen([sys.executable, __file__, "holder", str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdin is not None and proc.stdout is not None

    def ask() -> str:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("try\n")
        proc.stdin.flush()
        return proc.stdout.readline().strip()

    try:
        assert proc.stdout.readline().strip() == "ready"
        assert [os.path.basename(p) for p in prune_report(store).locks] == [lock("k")]
        with store.lock("k"):  # a new lock file at the path
            assert ask() == "timeout", "the other process took a lock on the removed file"
        assert ask() == "took"
        with store.lock("k"):
            assert ask() == "timeout"
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == 0


# -- writers and gc at once -------------------------------------------------------------------
def one_turn(store: SessionStore, work: pathlib.Path, tag: str) -> None:
    """Under the guard of "k": mark the guard taken (O_EXCL), bump the counter, append a
    message and see it, delete the session, unmark. Exit 3 on an overlap, 4 on a loss."""
    with store.lock("k"):
        try:
            marker = os.open(work / "inside", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            print(f"overlap in {tag}", file=sys.stderr, flush=True)
            os._exit(3)
        os.close(marker)
        counter = work / "counter"
        n = int(counter.read_text() or 0)
        time.sleep(0.0005)
        counter.write_text(str(n + 1))
        mid = store.append("k", {"role": "user", "content": tag})
        if mid not in [m.id for m in store.load("k")]:
            print(f"lost {tag}", file=sys.stderr, flush=True)
            os._exit(4)
        store.delete_session("k")
        os.unlink(work / "inside")


def writer_main(root: str, work: str, turns: int, fork: bool) -> None:
    store = SessionStore(root, durability="flush", lock_timeout=30)
    for i in range(turns):
        if not fork:
            one_turn(store, pathlib.Path(work), f"w{i}")
        else:
            pid = os.fork()
            if pid == 0:  # the child's guards start empty: it opens the lock file afresh
                code = 0
                try:
                    one_turn(SessionStore(root, durability="flush", lock_timeout=30), pathlib.Path(work), f"f{i}")
                except BaseException:  # noqa: BLE001 - reported through the exit status
                    code = 1
                os._exit(code)
            _pid, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                sys.exit(os.waitstatus_to_exitcode(status))
        time.sleep(0.001)


def gc_main(root: str, work: str) -> None:
    store = SessionStore(root, durability="flush", lock_timeout=30)
    removed = 0
    stop = pathlib.Path(work) / "stop"
    while not stop.exists():
        removed += len(prune_report(store).locks)
        time.sleep(0.0005)
    print(removed, flush=True)


TURNS = sized(50, 500)  # per writer


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_writers_and_gc_at_once_keep_mutual_exclusion(tmp_path: pathlib.Path) -> None:
    root, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    (work / "counter").write_text("0")
    SessionStore(root, durability="flush")
    collector = subprocess.Popen([sys.executable, __file__, "gc", str(root), str(work)], stdout=subprocess.PIPE,
                                 text=True, env=ENV)
    writers = [subprocess.Popen([sys.executable, __file__, "writer", str(root), str(work), str(TURNS), fork], env=ENV)
               for fork in ("0", "1")]
    try:
        codes = [w.wait(timeout=120) for w in writers]
    finally:
        (work / "stop").write_text("")
        out, _ = collector.communicate(timeout=60)
    assert codes == [0, 0], "a writer saw another inside the guard (3) or lost a message (4)"
    assert collector.returncode == 0
    assert int((work / "counter").read_text()) == 2 * TURNS
    assert int(out) > 0, "gc never removed the lock file: the test checked nothing"


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    if role == "holder":
        holder_main(rest[0])
    elif role == "writer":
        writer_main(rest[0], rest[1], int(rest[2]), rest[3] == "1")
    else:
        gc_main(rest[0], rest[1])
