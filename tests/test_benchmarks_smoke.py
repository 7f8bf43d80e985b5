"""The benchmark script runs end to end and reports every row (tiny sizes; no timing checks:
benchmarks are measurements, never a gate)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

EXPECTED_ROWS = {
    "append_flush": {"floor", "jsonl_sessions", "sqlite_wal_normal", "sqlite_bare_normal"},
    "append_fsync": {"floor", "jsonl_sessions", "sqlite_wal_full"},
    "append_many_flush": {"floor", "jsonl_sessions", "sqlite_wal_normal"},
    "append_many_fsync": {"floor", "jsonl_sessions", "sqlite_wal_full"},
    "load": {"floor", "floor_dropped", "load", "jsonl_sessions", "sqlite_wal"},
    "rewrite_fsync": {"floor", "jsonl_sessions", "sqlite_wal_full"},
    "remove_last_flush": {"floor", "jsonl_sessions_small", "jsonl_sessions", "sqlite_wal_normal_small",
                          "sqlite_wal_normal"},
    "remove_last_fsync": {"floor", "jsonl_sessions_small", "jsonl_sessions", "sqlite_wal_full_small",
                          "sqlite_wal_full"},
}
EXPECTED_TARGETS = {"durable_append", "flush_append", "try_load", "try_load_dropped", "remove_last_flush",
                    "remove_last_fsync"}


@pytest.fixture
def bench() -> ModuleType:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import run

    return run


def test_quick_run_reports_every_row_and_cleans_up(
    bench: ModuleType, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    results = tmp_path / "results.json"
    argv = ["--quick", "--scale", "0.01", "--dir", str(work), "--json", str(results), "--markdown"]

    assert bench.main(argv) == 0

    data = json.loads(results.read_text(encoding="utf-8"))
    assert {g["id"]: {r["impl"] for r in g["rows"]} for g in data["groups"]} == EXPECTED_ROWS
    for group in data["groups"]:
        assert group["floor"] == "floor" and group["ours"] == "jsonl_sessions"
        for row in group["rows"]:
            assert row["samples"] > 0
            assert 0 < row["median_ns"] <= row["p95_ns"]
            assert row["vs_floor"] > 0 and row["vs_ours"] > 0
        by_impl = {r["impl"]: r for r in group["rows"]}
        assert by_impl["floor"]["vs_floor"] == 1.0
        assert by_impl["jsonl_sessions"]["vs_ours"] == 1.0
    assert {t["id"] for t in data["targets"]} == EXPECTED_TARGETS
    assert all(isinstance(t["met"], bool) for t in data["targets"])
    env = data["environment"]
    for field in ("python", "platform", "cpu_count", "filesystem", "date", "jsonl_sessions", "sqlite"):
        assert env[field], field

    out = capsys.readouterr().out
    for heading in ("python", "platform", "cpus", "file system", "date", "versions", "targets"):
        assert heading in out
    text, sep, markdown = out.partition("| operation | implementation | median | p95 | vs floor | vs ours |")
    assert sep
    for group in data["groups"]:
        assert f"{group['title']}  [{group['unit']}]" in text
        assert f"| **{group['title']}**<br>{group['unit']} |" in markdown
        for row in group["rows"]:
            assert f"  {row['label']} " in text, row["label"]
            assert f" {row['label']} |" in markdown or f" **{row['label']}** |" in markdown, row["label"]
    assert list(work.iterdir()) == []  # temp dir removed


@pytest.mark.parametrize("command", [["-m", "benchmarks"], ["benchmarks/run.py"]])
def test_both_entry_points_start(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--json" in done.stdout and "--markdown" in done.stdout
