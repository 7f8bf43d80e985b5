"""The fixtures of the command-line tests: a store directory, a store on it, and the CLI
run in-process against it (a test module may define its own ``root`` or ``store``)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from jsonl_sessions import SessionStore
from jsonl_sessions.cli import main


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "store"
    SessionStore(path, durability="flush")  # creates it, mode 0700
    return path


@pytest.fixture
def store(root: pathlib.Path) -> SessionStore:
    return SessionStore(root, durability="flush")


@pytest.fixture
def run(root: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``main(["--root", root, *argv])`` in-process: (exit status, stdout, stderr)."""

    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--root", str(root), *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return call
