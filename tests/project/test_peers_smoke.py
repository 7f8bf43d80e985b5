"""The peers benchmark (benchmarks/peers.py) runs end to end on tiny sizes with whatever
peers this environment has, and skips the others with a note. CI's test extras have
openai-agents and langchain-core but not langchain-community or matplotlib (the bench
extra), so there the LangChain peer and the chart are skipped; the SIGKILL comparison
runs one real kill of our store. No timing checks:
benchmarks are measurements, never a gate."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ALWAYS = {"floor", "jsonl_sessions", "jsonl_sessions_flush", "sqlite3"}  # stdlib + the package: never skipped
WRITE_ONLY = {"jsonl_sessions_flush"}  # timed on append and remove_last only


@pytest.fixture
def peers(untimed: None) -> ModuleType:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import peers

    return peers


def has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


def tiny(work: pathlib.Path, tmp_path: pathlib.Path, *extra: str) -> list[str]:
    return ["--quick", "--scale", "0.01", "--dir", str(work), "--json", str(tmp_path / "peers.json"),
            "--chart", str(tmp_path / "peers.png"), *extra]


def test_tiny_run_times_every_installed_peer_and_kills_our_store(
    peers: ModuleType, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    argv = tiny(work, tmp_path, "--markdown", "--kill-trials", "1", "--kill-peers", "jsonl_sessions")

    assert peers.main(argv) == 0

    out = capsys.readouterr().out
    data = json.loads((tmp_path / "peers.json").read_text(encoding="utf-8"))
    timed = set(data["implementations"])
    skipped = set(data["skipped"])
    assert ALWAYS <= timed
    assert timed | skipped == set(peers.IMPLS) and not timed & skipped
    # An installed openai-agents (the test-integrations extra) must be timed, not skipped.
    assert ("openai_agents" in timed) == has("agents")
    assert ("langchain" in timed) == has("langchain_community")
    if not has("llama_index.core"):
        assert "llama_index" in skipped
    for impl_id, reason in data["skipped"].items():
        assert reason and f"note: skipping {peers.IMPLS[impl_id].name}: " in out

    sizes = [60, 120, 240]  # --quick --scale 0.01
    expected_groups = {"append"} | {f"{op}:{n}" for op in peers.OPS for n in sizes}
    assert {g["id"] for g in data["groups"]} == expected_groups
    for group in data["groups"]:
        writes = group["id"] == "append" or group["id"].startswith("remove_last:")
        assert {r["impl"] for r in group["rows"]} == (timed if writes else timed - WRITE_ONLY), group["id"]
        for row in group["rows"]:
            assert row["samples"] >= 3
            assert 0 < row["median_ns"] <= row["p95_ns"]
        by_impl = {r["impl"]: r for r in group["rows"]}
        assert by_impl["floor"]["vs_floor"] == 1.0
        assert by_impl["jsonl_sessions"]["vs_ours"] == 1.0
        assert f"{group['title']}  [{group['unit']}]" in out
        for row in group["rows"]:
            assert f"  {row['label']} " in out
    assert next(r for r in data["groups"] if r["id"] == "append")["rows"][0]["samples"] == 20

    # One real SIGKILL of a process appending to our store: nothing acknowledged is lost.
    assert data["sigkill"]["trials"] == 1
    (kill,) = data["sigkill"]["results"]
    assert kill["impl"] == "jsonl_sessions" and kill["kills"] == 1
    assert kill["unreadable"] == 0 and kill["lost"] == 0 and kill["errors"] == {}
    assert kill["acked"] >= 10  # the seeded session at least
    assert "SIGKILL: 1 kill(s) per implementation" in out
    assert "| jsonl_sessions | 1 | 0 | 0 of " in out  # the Markdown SIGKILL table

    for heading in ("python", "platform", "cpus", "file system", "date", "versions", "peers", "timing"):
        assert f"  {heading:<12} " in out, heading
    assert "| implementation | load | newest 50 | count | remove_last |" in out
    chart = tmp_path / "peers.png"
    if has("matplotlib"):
        assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert not chart.exists() and "note: chart not written: matplotlib is not installed" in out
    assert list(work.iterdir()) == []  # temp dir removed


def hide(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Make ``import package`` (and its submodules) fail as if it were not installed."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")] + [package]:
        monkeypatch.setitem(sys.modules, name, None)


def test_missing_peers_are_skipped_with_a_note(
    peers: ModuleType, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for package in ("agents", "langchain_community", "llama_index", "matplotlib"):
        hide(monkeypatch, package)
    work = tmp_path / "work"
    work.mkdir()

    assert peers.main(tiny(work, tmp_path, "--kill-trials", "0")) == 0

    out = capsys.readouterr().out
    data = json.loads((tmp_path / "peers.json").read_text(encoding="utf-8"))
    assert set(data["implementations"]) == ALWAYS
    assert set(data["skipped"]) == {"openai_agents", "langchain", "llama_index"}
    for impl_id, reason in data["skipped"].items():
        assert reason.startswith("not installed") and "jsonl-sessions[bench]" in reason
        assert f"note: skipping {peers.IMPLS[impl_id].name}: not installed" in out
        assert f"  skipped      {peers.IMPLS[impl_id].name}: not installed" in out
    assert all(r["impl"] in ALWAYS for g in data["groups"] for r in g["rows"])
    assert data["sigkill"]["results"] == []
    assert "note: chart not written: matplotlib is not installed" in out
    assert not (tmp_path / "peers.png").exists()


@pytest.mark.parametrize("command", [["-m", "benchmarks.peers"], ["benchmarks/peers.py"]])
def test_both_entry_points_start(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    for option in ("--quick", "--scale", "--dir", "--json", "--markdown", "--chart", "--kill-trials", "--kill-peers"):
        assert option in done.stdout
