"""The command line speaks with one voice: on a damaged store every command counts the
same messages and names a skipped line by its line and byte offset; a lost sidecar is a
finding that says what was lost; one time format in every ``--json`` output; the write
options default as the API does; ``migrate`` is safe to run again; ``prune`` runs the
store's TTL cleanup."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

import orjson
import pytest

from jsonl_sessions import SessionStore
from jsonl_sessions.cli import main

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: pathlib.Path) -> SessionStore:
    return SessionStore(root, durability="flush")


@pytest.fixture
def run(root: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> Run:
    """``main(["--root", root, *argv])`` in-process: (exit status, stdout, stderr)."""

    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--root", str(root), *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return call


def _damage(store: SessionStore, root: pathlib.Path) -> int:
    """Session "k" of four messages whose second line no longer parses; that line's offset."""
    store.append_many("k", [{"role": "user", "content": f"word {i}"} for i in range(4)])
    path = root / "k.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = b'{"role": garbage, "content": "word x"}'
    path.write_bytes(b"\n".join(lines))
    return len(lines[0]) + 1


def test_a_damaged_store_counts_the_same_messages_in_every_command(run: Run, store: SessionStore,
                                                                   root: pathlib.Path) -> None:
    _damage(store, root)
    store.append("other", {"role": "user", "content": "fine"})
    code, out, _ = run("ls", "--json")
    listed = {s["key"]: s["message_count"] for s in orjson.loads(out)}
    code, out, _ = run("stats", "--json")
    stats = orjson.loads(out)["messages"]
    code, out, _ = run("verify", "--json")
    checked = orjson.loads(out)["messages"]
    assert listed == {"k": 4, "other": 1}
    assert stats == checked == sum(listed.values()) == store.get_message_count("k") + 1


@pytest.mark.parametrize("argv", [["show", "k"], ["search", "word"], ["tail", "k"]])
def test_warnings_about_skipped_lines_give_the_line_and_the_offset(argv: list[str], run: Run, store: SessionStore,
                                                                   root: pathlib.Path) -> None:
    offset = _damage(store, root)
    code, out, err = run(*argv)
    assert code == 0 and "3" in out
    assert f"line 2, byte offset {offset}" in err, err
    assert "line 1 column" not in err


def test_a_corrupt_transcript_error_names_the_repair_once(run: Run, store: SessionStore, root: pathlib.Path) -> None:
    offset = _damage(store, root)
    code, out, err = run("export", "k")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and f"line 2, byte offset {offset}" in err and "line 1 column" not in err
    assert err.count("jsonl-sessions repair k") == 1


def test_verify_says_what_a_lost_sidecar_took_with_it(run: Run, store: SessionStore, root: pathlib.Path) -> None:
    store.append("k", {"role": "user", "content": "hi"})
    store.set_session_name("k", "My chat")
    os.remove(root / "k.meta.json")
    code, out, _ = run("verify")
    assert code == 1 and "missing sidecar" in out and "name" in out and "creation time" in out
    store.set_session_agent_alias("k", "bot")  # a metadata write makes a new sidecar
    assert store.get_session_name("k") is None
    report = store.verify()
    assert report.ok  # nothing to repair, but not silent:
    [note] = report.notes
    assert note.kind == "sidecar-recreated" and note.key == "k" and "name" in note.message
    code, out, _ = run("verify")
    assert code == 0 and "sidecar made anew" in out
    store.set_session_name("k", "again")  # a later write keeps the mark
    assert [f.kind for f in store.verify().notes] == ["sidecar-recreated"]
