"""An append that raised never appears later, also when its rollback fails too.

Two faults in a row: the transcript's ``fsync`` fails (EIO), and so does the ``ftruncate``
that should cut the new bytes back. The store then commits a ``cut`` record to the control
file, so whoever comes next (this process, another one, a lock-free reader) cuts the bytes
before anything else. Faults come through the platform seam (the calls on the transcript
only); one test injects them into a real process with ``strace``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _child import child_env

from jsonl_sessions import SessionStore
from jsonl_sessions.jsonl.guard import REGISTRY
from jsonl_sessions.jsonl.layout import SessionFiles
from jsonl_sessions.testing.faults import FaultInjector

KEY = "k"


def _on(path: pathlib.Path) -> Callable[[str, tuple[Any, ...]], bool]:
    """A FaultInjector ``match``: calls on the file at ``path`` (its inode) only."""
    ino = path.stat().st_ino

    def match(_kind: str, args: tuple[Any, ...]) -> bool:
        try:
            return isinstance(args[0], int) and os.fstat(args[0]).st_ino == ino
        except OSError:
            return False

    return match


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SessionStore]:
    opened = SessionStore(tmp_path / "store", durability="fsync", lock_timeout=10)
    opened.append(KEY, {"role": "user", "content": "before"})
    yield opened
    opened.close()


def _transcript(store: SessionStore) -> pathlib.Path:
    return pathlib.Path(SessionFiles.of(str(store.root), KEY).transcript)


def _double_fault(store: SessionStore) -> tuple[FaultInjector, FaultInjector]:
    """The transcript's next fsync fails, and so does its next ftruncate (the rollback)."""
    on = _on(_transcript(store))
    return FaultInjector("fsync", 1, match=on), FaultInjector("truncate", 1, match=on)


def _contents_elsewhere(root: pathlib.Path) -> list[str]:
    """The session's messages as another process reads them, lock-free, first thing."""
    code = ("import sys; from jsonl_sessions import SessionStore; "
            "print('\\n'.join(str(m.content) for m in SessionStore(sys.argv[1]).try_load(sys.argv[2])))")
    out = subprocess.run([sys.executable, "-c", code, str(root), KEY], env=child_env(), check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


def _check_never_appears(store: SessionStore, before: bytes) -> None:
    # Another process first (it never held this process's guard), then this one.
    assert "NEVER" not in _contents_elsewhere(store.root)
    assert _transcript(store).read_bytes() == before
    assert [m.content for m in store.try_load(KEY)] == ["before"]
    store.append(KEY, {"role": "user", "content": "after"})
    assert [m.content for m in SessionStore(store.root).try_load(KEY)] == ["before", "after"]


def test_append_whose_fsync_and_rollback_fail(store: SessionStore) -> None:
    before = _transcript(store).read_bytes()
    fsync, truncate = _double_fault(store)
    with fsync, truncate, pytest.raises(OSError):
        store.append(KEY, {"role": "user", "content": "NEVER"})
    assert fsync.injected == truncate.injected == 1
    _check_never_appears(store, before)


def test_append_many_whose_fsync_and_rollback_fail(store: SessionStore) -> None:
    before = _transcript(store).read_bytes()
    fsync, truncate = _double_fault(store)
    with fsync, truncate, pytest.raises(OSError):
        store.append_many(KEY, [{"role": "user", "content": "NEVER"}, {"role": "user", "content": "NEVER"}])
    assert fsync.injected == truncate.injected == 1
    _check_never_appears(store, before)


def test_group_commit_whose_fsync_and_rollback_fail(store: SessionStore) -> None:
    """Eight threads queue while the guard is held; one writes them all, and every one fails."""
    before = _transcript(store).read_bytes()
    guard = REGISTRY.get(SessionFiles.of(str(store.root), KEY).lock)
    errors: list[BaseException] = []
    ids: list[str] = []

    def one() -> None:
        try:
            ids.append(store.append(KEY, {"role": "user", "content": "NEVER"}))
        except OSError as exc:
            errors.append(exc)

    fsync, truncate = _double_fault(store)
    with fsync, truncate:
        threads = [threading.Thread(target=one) for _ in range(8)]
        with store.lock(KEY):
            for t in threads:
                t.start()
            while True:  # every thread queued behind the held guard: one group of eight
                with guard.pending_cond:
                    if len(guard.pending) == 8:
                        break
                threading.Event().wait(0.001)
        for t in threads:
            t.join()
    assert fsync.injected == truncate.injected == 1
    assert len(errors) == 8 and not ids
    _check_never_appears(store, before)


def test_the_cut_record_waits_for_the_next_guard_holder(store: SessionStore) -> None:
    """When the cut fails again after the record was committed (a persistent fault), the
    record stays: a reader raises rather than return the line, and the next guard holder,
    once the disk works, cuts it before anything else."""
    before = _transcript(store).read_bytes()
    on = _on(_transcript(store))
    with FaultInjector("fsync", 1, match=on), FaultInjector("truncate", 1, persistent=True, match=on):
        with pytest.raises(OSError):
            store.append(KEY, {"role": "user", "content": "NEVER"})
        with pytest.raises(OSError):
            store.try_load(KEY)  # recovery cannot cut it yet: raised, rather than the line returned
        assert b"NEVER" in _transcript(store).read_bytes()  # the bytes are still there, behind the record
    _check_never_appears(store, before)


@pytest.mark.skipif(shutil.which("strace") is None or not sys.platform.startswith("linux"),
                    reason="needs strace (fault injection into a real process)")
def test_real_process_with_strace_injected_faults(tmp_path: pathlib.Path) -> None:
    """``strace -e inject``: the kernel's fsync and ftruncate really fail (EIO) in a real
    process, the first of each (the append's fsync, then its rollback's ftruncate)."""
    root = tmp_path / "store"
    SessionStore(root).append(KEY, {"role": "user", "content": "before"})
    code = ("import sys; from jsonl_sessions import SessionStore\n"
            "s = SessionStore(sys.argv[1])\n"
            "try:\n    s.append(sys.argv[2], {'role': 'user', 'content': 'NEVER'})\n"
            "except OSError as e:\n    print('raised', e.errno)\nelse:\n    print('acknowledged')\n")
    probe = subprocess.run(["strace", "-o", os.devnull, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode(errors='replace').strip()}")
    done = subprocess.run(["strace", "-f", "-o", os.devnull, "-e", "trace=fsync,ftruncate",
                           "-e", "inject=fsync:error=EIO:when=1", "-e", "inject=ftruncate:error=EIO:when=1",
                           sys.executable, "-c", code, str(root), KEY],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["raised", str(5)], done.stderr
    assert _contents_elsewhere(root) == ["before"]
    assert [m.content for m in SessionStore(root).load(KEY)] == ["before"]
