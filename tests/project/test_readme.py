"""The README's example is real code: run it, and check what it promises."""

from __future__ import annotations

import pathlib
import re

import pytest

from jsonl_sessions import SessionStore

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _first_python_block() -> str:
    match = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert match, "README has no python example"
    return match.group(1)


def test_readme_example_runs_and_keeps_its_promises(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _first_python_block()
    assert len(code.strip().splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {})  # noqa: S102 - running the README example is the point
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("user What is 2 + 2?")
    assert out[1].startswith("assistant 4 ")
    fresh = SessionStore(tmp_path / "sessions")
    messages = fresh.try_load("chat-42")
    assert [m.content for m in messages] == ["[trimmed]", "What is 2 + 2?"]
    assert fresh.get_session_trim_breadcrumb("chat-42") is True
    assert messages[0].id < messages[1].id


def test_readme_gives_exactly_the_two_setup_commands_and_ci_runs_the_test_ones() -> None:
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(.*?)```", text, re.DOTALL)
    assert len(commands) == 2 and "jsonl-sessions demo" in commands[0]
    steps = [part.strip() for part in re.split(r"&&|\n", commands[1]) if part.strip().startswith(".venv/bin/")]
    runs = [step.removeprefix(".venv/bin/python ") for step in steps if step.startswith(".venv/bin/python -m ")]
    assert runs == ["-m pytest -q", "-m mypy jsonl_sessions", "-m ruff check jsonl_sessions"]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    ci_runs = re.findall(r'^"\$venv/bin/python" (-m (?:pytest|mypy|ruff)\b.*)$', ci, re.MULTILINE)
    assert ci_runs == runs  # the same test commands, in the same order
    extras = re.findall(r"pip install '(\.\[[a-z,]+\])'", commands[1])
    assert extras and f'pip install --quiet "{extras[0]}"' in ci  # installed with the same extras
