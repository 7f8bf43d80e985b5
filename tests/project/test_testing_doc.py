"""docs/testing.md is real code: every block runs, in order, and keeps its promises (the
ten-line check passes, the file store passes the quick profile with recoveries counted,
the planted remove_last bug fails with the operation named and the program as a test)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from _child import CHECKOUT
from _doc import TESTING_DOC, python_blocks, run_blocks


def test_every_block_of_the_page_runs() -> None:
    namespace = run_blocks()
    namespace["test_my_store_agrees_with_the_model"]()  # the ten lines' test function, called as pytest would
    assert "FileStore" in namespace and "DictStore" in namespace


def test_the_ten_lines_pass_under_pytest(tmp_path: pathlib.Path) -> None:
    """The first block, saved as a test module: pytest collects and passes both the
    check_backend test and the contract mixin."""
    first = python_blocks()[0]
    assert len(first.strip().splitlines()) <= 12, "the ten lines grew"
    module = tmp_path / "test_ten_lines.py"
    module.write_text(first, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", str(module)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": CHECKOUT})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_the_gallery_table_is_filled_in() -> None:
    text = TESTING_DOC.read_text(encoding="utf-8")
    assert "GALLERY_TABLE" not in text, "docs/testing.md still has the gallery table's placeholder"
