"""``benchmarks/viewer.py`` runs end to end on a tiny session and reports every row (no
timing checks: benchmarks are measurements, never a gate)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_viewer_benchmark_reports_every_row(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("jinja2", reason="the viewer extra: pip install '.[viewer]'")
    out = tmp_path / "viewer.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.viewer", "--messages", "300", "--calls", "5",
                           "--json", str(out), "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    rows = {g["id"]: {r["impl"] for r in g["rows"]} for g in report["groups"]}
    assert rows == {"first_page": {"floor", "jsonl_sessions", "tail_poll"}, "older_page": {"floor", "jsonl_sessions"}}
    assert "newest page of a 300-message session" in done.stdout
