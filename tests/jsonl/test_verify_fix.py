"""``jsonl-sessions verify --fix`` clears what a writer SIGKILLed mid-fork or mid-create left
(temp files, a sidecar without its transcript, an odd counter), so ``verify`` exits 0
again, and removes no acknowledged data.

What a kill leaves depends on where it lands: before the sidecar's rename, its temp file;
between the sidecar and the transcript, an orphan sidecar (and the transcript's temp
file); during the transcript's rename, an odd counter. The first test kills a child (a
fork of this process, SIGKILLed by the platform seam at its n-th system call) at every
point of ``copy_messages`` and of a session's first append; the second kills a process
copying a 4 MB session at a random moment, as test_history_crash.py does.
"""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from _budget import sized
from test_crash import BASE_SEED
from test_history_crash import pairs, run_and_kill

from jsonl_sessions import SessionStore
from jsonl_sessions.cli import main
from jsonl_sessions.testing.faults import run_killed

pytestmark = pytest.mark.skipif(not (hasattr(os, "fork") and hasattr(signal, "SIGKILL")),
                                reason="needs os.fork and SIGKILL")


def verify(root: pathlib.Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["--root", str(root), "verify", "--json", *argv])
    return code, orjson.loads(capsys.readouterr().out)


def state(store: SessionStore) -> dict[str, list[Any]]:
    """Every session's messages (ids and contents). Reads only: no store is opened, which
    would remove temp files before verify sees them."""
    return {key: [(m.id, m.content) for m in store.try_load(key)] for key in store.list_sessions()}


def transcripts(root: pathlib.Path) -> dict[str, bytes]:
    """Every transcript's bytes, read directly (a read through the store may run recovery)."""
    return {p.name: p.read_bytes() for p in root.iterdir() if p.name.endswith(".jsonl") and not p.name.startswith(".")}


def leftovers(root: pathlib.Path) -> list[str]:
    """Temp files, and sidecars without a transcript."""
    names = set(os.listdir(root))
    return sorted(n for n in names if n.endswith(".tmp")
                  or (n.endswith(".meta.json") and n[: -len(".meta.json")] + ".jsonl" not in names))


OPS: dict[str, Callable[[SessionStore], object]] = {
    "copy_messages": lambda s: s.copy_messages("src", "dst"),
    "first append": lambda s: s.append("new", {"role": "user", "content": "first"}),
}


@pytest.mark.parametrize("op", list(OPS))
def test_verify_fix_clears_what_a_kill_at_each_step_left(tmp_path: pathlib.Path, op: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base"
    setup = SessionStore(base)
    setup.append_many("src", [{"role": "user", "content": i} for i in range(20)])
    setup.copy_messages("src", "old")
    seen: set[str] = set()
    n = 0
    while True:
        n += 1
        root = tmp_path / f"kill-{n}"
        shutil.copytree(base, root)
        store = SessionStore(root, durability="flush")
        acknowledged = state(store)
        if run_killed(lambda store=store: OPS[op](store), "any", n) == 0:
            break  # the operation ran past its last system call: every step was tried
        code, report = verify(root, capsys)
        kinds = {p["kind"] for p in report["problems"]}
        seen |= kinds
        assert kinds <= {"temp-file", "orphan-sidecar", "odd-counter"}, report["problems"]
        files = transcripts(root)
        code, fixed = verify(root, capsys, "--fix")
        assert code == 0, fixed["problems"]
        assert {(f["kind"], f["file"]) for f in fixed["fixed"]} == {(p["kind"], p["file"]) for p in report["problems"]}
        assert verify(root, capsys)[0] == 0
        assert transcripts(root) == files, "verify --fix changed a transcript"
        landed = state(store)  # the operation in flight landed whole, or not at all
        assert {k: v for k, v in landed.items() if k in acknowledged} == acknowledged
        assert landed.keys() - acknowledged.keys() in (set(), {"dst"}, {"new"})
        assert leftovers(root) == []
        if landed.keys() == acknowledged.keys():
            OPS[op](SessionStore(root))  # the key works again
            assert len(state(store)) == len(acknowledged) + 1
    assert n > 5
    assert {"temp-file", "orphan-sidecar", "odd-counter"} <= seen, "no kill left these: the test checked nothing"


def test_verify_fix_after_a_random_kill_mid_copy(tmp_path: pathlib.Path) -> None:
    """A real process forking a 4 MB session in a loop, SIGKILLed at a random moment; the
    command line run as real processes."""
    for trial in range(sized(1, 20)):
        seed = BASE_SEED * 1000 + 900 + trial
        rng = random.Random(seed)
        root = tmp_path / f"store-{trial}"
        setup = SessionStore(root, durability="flush")
        setup.append_many("src", [{"role": "user", "content": f"s{i}", "pad": "p" * rng.randint(0, 2000)}
                                  for i in range(4000)])
        events = run_and_kill(tmp_path, root, "fork", seed, rng.uniform(0.01, 0.25))
        done, _pending = pairs(events)
        forks = {begin["target"]: SessionStore(root).try_load(begin["target"]) for begin, _ack in done}
        source = SessionStore(root).try_load("src")

        def cli(*argv: str, root: pathlib.Path = root) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "jsonl_sessions", "--root", str(root), *argv],
                                  capture_output=True, text=True, timeout=60, check=False,
                                  env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])})

        fixed = cli("verify", "--fix")
        assert fixed.returncode == 0, f"seed {seed}: {fixed.stdout}{fixed.stderr}"
        assert cli("verify").returncode == 0
        after = SessionStore(root)
        assert after.try_load("src") == source
        for target, messages in forks.items():
            assert after.try_load(target) == messages, f"seed {seed}: acknowledged fork {target} changed"
