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
    listed = {s["key"]: s["message_count"] for s in orjson.loads(run("ls", "--json")[1])}
    stats = orjson.loads(run("stats", "--json")[1])["messages"]
    code, out, _ = run("verify", "--json")
    checked = orjson.loads(out)["messages"]
    assert code == 1  # the corrupt line is a problem
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


# -- one time format, the API's defaults --------------------------------------------------------
RFC3339_MS = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"


def _times(value: object) -> list[str]:
    """Every string in ``value`` that looks like a time (starts with a year and has a T)."""
    import re

    if isinstance(value, dict):
        return [t for v in value.values() for t in _times(v)]
    if isinstance(value, list):
        return [t for v in value for t in _times(v)]
    return [value] if isinstance(value, str) and re.match(r"^\d{4}-\d\d-\d\dT", value) else []


@pytest.mark.parametrize("sqlite", [False, True])
def test_every_time_in_json_output_is_rfc3339_utc_with_milliseconds(sqlite: bool, tmp_path: pathlib.Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from jsonl_sessions.sqlite import SqliteSessionStore

    where = tmp_path / ("s.db" if sqlite else "dir")
    store = SqliteSessionStore(where) if sqlite else SessionStore(where)
    store.append("k", {"role": "user", "content": "hi"})
    store.close()
    seen = []
    for argv in (["ls", "--json"], ["stats", "--json"], ["search", "hi", "-l", "--json"],
                 ["prune", "--older-than", "1", "--dry-run", "--json"]):
        capsys.readouterr()
        assert main(["--root", str(where), *argv]) == 0, argv
        times = _times(orjson.loads(capsys.readouterr().out))
        assert times, argv
        seen += times
    bad = [t for t in seen if not re.match(RFC3339_MS, t)]
    assert not bad, bad


def test_lock_timeout_defaults_to_the_apis(capsys: pytest.CaptureFixture[str]) -> None:
    import inspect

    from jsonl_sessions.cli import build_parser
    from jsonl_sessions.sqlite import SqliteSessionStore

    api = {inspect.signature(cls).parameters["lock_timeout"].default for cls in (SessionStore, SqliteSessionStore)}
    assert api == {30.0}
    parser = build_parser()
    assert parser.parse_args(["ls"]).lock_timeout == 30.0
    assert parser.parse_args(["rm", "k"]).lock_timeout == 30.0
    assert main(["ls", "--help"]) == 0
    assert "default 30" in capsys.readouterr().out


# -- migrate, again ---------------------------------------------------------------------------------
def test_migrate_again_is_a_no_op_and_other_content_is_skipped_or_overwritten(store: SessionStore,
                                                                              root: pathlib.Path,
                                                                              tmp_path: pathlib.Path,
                                                                              capsys: pytest.CaptureFixture[str]
                                                                              ) -> None:
    from jsonl_sessions.sqlite import SqliteSessionStore

    for key in ("a", "b", "c"):
        store.append(key, {"role": "user", "content": key})
    db = str(tmp_path / "copy.db")

    def migrate(*extra: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["migrate", str(root), db, *extra])
        out, err = capsys.readouterr()
        return code, out, err

    assert migrate()[0] == 0
    code, out, err = migrate()
    assert code == 0 and err == "" and "copied 0 sessions" in out and "3 sessions already there" in out
    store.append("a", {"role": "user", "content": "more"})
    code, out, err = migrate()
    assert code == 1 and "'a'" in err and "--skip-existing" in err and "--overwrite" in err
    assert err.count("\n") == 1  # one line for the one session that differs, none for the others
    code, out, err = migrate("--skip-existing")
    assert code == 0 and err == "" and "1 session with other content left as they are" in out
    copy = SqliteSessionStore(db)
    assert [m.content for m in copy.load("a")] == ["a"]
    code, out, err = migrate("--overwrite")
    assert code == 0 and "copied 1 session" in out
    assert [m.content for m in copy.load("a")] == ["a", "more"]
    capsys.readouterr()
    assert main(["migrate", str(root), db, "--json"]) == 0
    result = orjson.loads(capsys.readouterr().out)
    assert result["copied"] == [] and result["unchanged"] == ["a", "b", "c"] and result["failed"] == {}
    copy.close()


def test_migrate_help_lists_only_the_options_that_apply(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--root" not in text and "--backend" not in text  # SRC and DST name the stores
    assert "--skip-existing" in text and "--overwrite" in text and "--lock-timeout" in text


# -- prune ----------------------------------------------------------------------------------------------
def test_prune_deletes_idle_sessions_never_a_running_one_and_dry_run_changes_nothing(
        run: Run, store: SessionStore, root: pathlib.Path) -> None:
    import time

    for key in ("old", "old-running", "new"):
        store.append(key, {"role": "user", "content": key})
    store.set_session_state("old-running", "running", "turn-1")
    past = time.time() - 3 * 3600
    for path in root.iterdir():
        if path.name.startswith("old"):
            os.utime(path, (past, past))
    before = sorted(p.name for p in root.iterdir())
    code, out, _ = run("prune", "--older-than", "2", "--dry-run")
    assert code == 0 and "would remove old " in out and "old-running" in out.splitlines()[-1]
    assert sorted(p.name for p in root.iterdir()) == before  # a dry run changes nothing
    code, out, _ = run("prune", "--older-than", "2", "--json")
    result = orjson.loads(out)
    assert code == 0 and result["removed"] == 1 and [s["key"] for s in result["sessions"]] == ["old"]
    assert result["kept_running"] == ["old-running"] and result["dry_run"] is False
    assert store.list_sessions() == ["new", "old-running"]
    code, out, _ = run("prune", "--older-than", "-1")
    assert code == 2
