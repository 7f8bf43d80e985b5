"""``python -m benchmarks.postgres --smoke`` runs against the tests' server and reports
every group (no timing is checked)."""

from __future__ import annotations

import json
import pathlib

import pytest
from _pg import PgServer


def test_postgres_benchmark_reports_every_group(pg_server: PgServer, tmp_path: pathlib.Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.postgres import main

    assert main(["--dsn", pg_server.dsn, "--smoke", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "PostgresSessionStore.append" in out and "8 threads on 8 sessions" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert [g["id"] for g in report["groups"]] == ["append_fsync", "append_flush", "page", "count", "load"]
    assert all(len(g["rows"]) == 2 for g in report["groups"]) and report["scale"]["eight_threads_per_s"] > 0
