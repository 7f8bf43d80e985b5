"""``benchmarks/export_memory.py`` runs end to end on a tiny session and reports every format
(no memory or timing checks: benchmarks are measurements, never a gate; the bound itself is
tests/cli/test_export_stream.py's)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_export_memory_benchmark_reports_every_format(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("jinja2", reason="the viewer extra: pip install '.[viewer]'")
    done = subprocess.run([sys.executable, "-m", "benchmarks.export_memory", "--messages", "200", "--dir",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "200 messages" in done.stdout
    for fmt in ("jsonl", "markdown", "html"):
        assert re.search(rf"^{fmt} +[0-9.,]+ MiB +[0-9.]+s +[0-9.,]+ MiB$", done.stdout, re.MULTILINE), done.stdout
