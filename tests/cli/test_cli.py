"""The ``jsonl-sessions`` command: every command in-process (``main(argv)``) and as a real
subprocess, ``verify`` against damage planted on disk, ``tail -f`` against appends from
another process, and the error contract (one line on stderr, the documented exit status,
no traceback)."""

from __future__ import annotations

import _thread
import contextlib
import http.client
import importlib.metadata
import os
import pathlib
import queue
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from jsonl_sessions import SessionStore
from jsonl_sessions.cli import COMMANDS, build_parser, default_root, main, resolve_root
from jsonl_sessions.cli.report import PROGRESS_MIN_SESSIONS
from jsonl_sessions.keys import key_to_stem
from jsonl_sessions.sqlite import SqliteSessionStore

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
Run = Callable[..., tuple[int, str, str]]


# -- helpers ----------------------------------------------------------------------------------
def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JSONL_SESSIONS_ROOT"}
    env.update(extra)
    return env


def cli(*argv: str, root: pathlib.Path | None = None, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command as a real process: ``python -m jsonl_sessions [--root root] argv``."""
    prefix = ["--root", str(root)] if root is not None else []
    return subprocess.run([sys.executable, "-m", "jsonl_sessions", *prefix, *argv], input=stdin,
                          capture_output=True, text=True, timeout=60, env=env or _env(), check=False)


def one_error_line(err: str) -> str:
    """The error output is exactly one line, ``jsonl-sessions: error: ...``, no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("jsonl-sessions: error: "), err
    assert "Traceback" not in err
    return lines[0]


def transcript(root: pathlib.Path, key: str) -> pathlib.Path:
    return root / (key_to_stem(key) + ".jsonl")


def chat(store: SessionStore, key: str = "demo/chat", n: int = 3) -> list[str]:
    ids = [store.append(key, {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"})
           for i in range(n)]
    return ids


# -- commands, help, README ----------------------------------------------------------------------
def test_commands_constant_is_exactly_the_parsers_commands() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: jsonl-sessions {command}")
    description = out.split("\n\n")[1]
    assert len(description.split()) >= 5, out
    from jsonl_sessions.cli import TABLE

    assert ("--root" in out) == TABLE[command].at_root  # migrate names its stores: SRC and DST
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    summary = re.search(rf"^    {command} +(\S.*)$", top, re.MULTILINE)
    assert summary, top


def test_readme_documents_every_command() -> None:
    """The README's CLI section names every command as ``jsonl-sessions <command>``."""
    text = README.read_text(encoding="utf-8")
    missing = [c for c in COMMANDS if not re.search(rf"jsonl-sessions {c}\b", text)]
    assert not missing, f"README.md does not document: {missing}"


def test_help_prints_how_the_root_is_chosen(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("JSONL_SESSIONS_ROOT", str(tmp_path / "from-env"))
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Store directory: --root DIR, else $JSONL_SESSIONS_ROOT, else the per-user data directory" in out
    assert f"Now: {tmp_path / 'from-env'}" in out


def test_root_resolution_order(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.delenv("JSONL_SESSIONS_ROOT", raising=False)
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
        assert default_root() == str(tmp_path / "xdg" / "jsonl-sessions")
        monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
        assert default_root() == os.path.join(os.path.expanduser("~"), ".local", "share", "jsonl-sessions")
    assert resolve_root() == os.path.abspath(default_root())
    monkeypatch.setenv("JSONL_SESSIONS_ROOT", str(tmp_path / "env"))
    assert resolve_root() == str(tmp_path / "env")
    assert resolve_root(str(tmp_path / "flag")) == str(tmp_path / "flag")


def test_env_root_is_used_and_root_option_works_after_the_command(
        monkeypatch: pytest.MonkeyPatch, root: pathlib.Path, store: SessionStore,
        capsys: pytest.CaptureFixture[str]) -> None:
    chat(store, "env-session", 1)
    monkeypatch.setenv("JSONL_SESSIONS_ROOT", str(root))
    assert main(["ls"]) == 0
    assert "env-session" in capsys.readouterr().out
    monkeypatch.setenv("JSONL_SESSIONS_ROOT", str(root.parent / "elsewhere"))
    assert main(["ls", "--root", str(root)]) == 0
    assert "env-session" in capsys.readouterr().out


# -- errors -------------------------------------------------------------------------------------
def test_read_commands_never_create_a_missing_root(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "typo"
    for argv in (["ls"], ["show", "k"], ["tail", "k"], ["search", "x"], ["verify"], ["stats"], ["export", "k"],
                 ["rm", "k"], ["repair", "k"]):
        assert main(["--root", str(missing), *argv]) == 2, argv
        line = one_error_line(capsys.readouterr().err)
        assert "no store at" in line and str(missing) in line
    assert not missing.exists()


def test_user_errors_are_one_line_with_the_documented_status(run: Run, store: SessionStore,
                                                             root: pathlib.Path) -> None:
    chat(store, "k")
    code, _, err = run("show", "missing")
    assert code == 1 and "session 'missing' does not exist" in one_error_line(err)
    code, _, err = run("show", "")
    assert code == 2 and "session key" in one_error_line(err)
    code, _, err = run("show", "k", "--before", "01NOSUCHID0000000000000000")
    assert code == 1 and "not found" in one_error_line(err)
    code, _, err = run("show", "k", "--limit", "0")
    assert code == 2 and "Traceback" not in err
    code, _, err = run("bogus-command")
    assert code == 2
    os.symlink(transcript(root, "k"), transcript(root, "link"))
    for argv in (["show", "link"], ["repair", "link"], ["export", "link"]):
        code, _, err = run(*argv)
        assert code == 1 and "refusing to follow" in one_error_line(err), argv
    path = transcript(root, "k")
    path.write_bytes(path.read_bytes() + b"{broken\n")
    code, _, err = run("export", "k")
    line = one_error_line(err)
    assert code == 1 and "line 4" in line and "repair" in line


def test_root_that_is_a_file_is_a_usage_error_in_a_subprocess(tmp_path: pathlib.Path) -> None:
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    done = cli("ls", root=not_dir)
    assert done.returncode == 2 and "is not a directory" in one_error_line(done.stderr)


def test_unreadable_root_is_one_line(tmp_path: pathlib.Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            locked.chmod(0o700)
            pytest.skip("running as root without setpriv: a permission cannot be denied")
        prefix = [setpriv, "--inh-caps=-all", "--bounding-set=-all"]
    try:
        for argv in (["ls"], ["verify"], ["stats"]):
            done = subprocess.run([*prefix, sys.executable, "-m", "jsonl_sessions", "--root", str(locked), *argv],
                                  capture_output=True, text=True, timeout=60, env=_env(), check=False)
            assert done.returncode == 1, (argv, done.stderr)
            assert "Permission denied" in one_error_line(done.stderr)
    finally:
        locked.chmod(0o700)


def test_lock_timeout_is_one_line_naming_the_holder(root: pathlib.Path, store: SessionStore) -> None:
    chat(store, "busy")
    with store.lock("busy"):
        done = cli("--lock-timeout", "0.2", "rm", "busy", root=root)
    line = one_error_line(done.stderr)
    assert done.returncode == 1 and "timed out" in line and "'busy'" in line
    if sys.platform.startswith("linux"):
        assert f"process {os.getpid()}" in line
    assert store.session_exists("busy")


def test_broken_pipe_is_quiet(root: pathlib.Path, store: SessionStore) -> None:
    store.append_many("big", [{"role": "user", "content": "x" * 200} for _ in range(5000)])
    with subprocess.Popen([sys.executable, "-m", "jsonl_sessions", "--root", str(root), "export", "big"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b'{"id":')
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.wait(timeout=30)
    assert "Traceback" not in err and "BrokenPipe" not in err and err == ""


# -- ls / search / stats ------------------------------------------------------------------------------
def test_ls_table_filters_sorts_and_json(run: Run, store: SessionStore) -> None:
    chat(store, "alpha", 2)
    chat(store, "beta", 5)
    chat(store, "gamma\x1b[2J", 1)
    store.set_session_name("beta", "The beta run")
    store.set_session_agent_alias("beta", "planner")
    store.set_session_state("alpha", "running", "turn-7")
    code, out, err = run("ls")
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0].split() == ["KEY", "NAME", "MESSAGES", "SIZE", "LAST", "ACTIVITY", "STATE"]
    beta = next(line for line in lines if line.startswith("beta"))
    assert "The beta run" in beta and " 5 " in beta
    alpha = next(line for line in lines if line.startswith("alpha"))
    assert "running (turn-7)" in alpha
    assert "\x1b" not in out and "gamma\\x1b[2J" in out  # a key cannot drive the terminal
    assert [line.split()[0] for line in lines[1:]] == ["alpha", "beta", "gamma\\x1b[2J"]
    code, out, _ = run("ls", "--sort", "messages")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["beta", "alpha", "gamma\\x1b[2J"]
    code, out, _ = run("ls", "--sort", "messages", "--reverse")
    assert out.splitlines()[1].startswith("gamma")
    code, out, _ = run("ls", "--alias", "planner")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["beta"]
    code, out, _ = run("ls", "--state", "running", "--json")
    data = orjson.loads(out)
    assert [d["key"] for d in data] == ["alpha"] and data[0]["state"] == "running"
    assert data[0]["turn_id"] == "turn-7" and data[0]["message_count"] == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", data[0]["updated_at"])
    code, out, _ = run("ls", "--state", "none", "--nl")
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [r["key"] for r in rows] == ["beta", "gamma\x1b[2J"]
    assert rows[0]["name"] == "The beta run" and rows[0]["agent_alias"] == "planner"


def test_ls_pages_by_cursor_with_the_stores_sorts_and_filters(run: Run, store: SessionStore) -> None:
    for i, key in enumerate(("a", "b", "c", "d", "e")):
        chat(store, key, i + 1)
    store.set_session_name("b", "Bug triage")
    store.set_session_name("d", "Bugfix")
    store.set_session_name("e", "release")
    code, out, err = run("ls", "--sort", "message_count", "--desc", "--limit", "2")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["e", "d"]
    cursor = re.fullmatch(r"jsonl-sessions: more sessions: add --cursor (\S+) for the next page\n", err)
    assert cursor is not None, err
    code, out, err = run("ls", "--sort", "message_count", "--desc", "--limit", "2", "--json", "--cursor",
                         cursor.group(1))
    page = orjson.loads(out)
    assert [d["key"] for d in page["sessions"]] == ["c", "b"] and page["cursor"] and err == ""
    code, out, _ = run("ls", "--sort", "message_count", "--desc", "--limit", "2", "--json", "--cursor",
                       page["cursor"])
    last = orjson.loads(out)
    assert [d["key"] for d in last["sessions"]] == ["a"] and last["cursor"] is None
    code, out, _ = run("ls", "--name-prefix", "Bug", "--sort", "name", "--nl")
    assert [orjson.loads(line)["key"] for line in out.splitlines()] == ["b", "d"]
    code, out, _ = run("ls", "--offset", "3", "--json")
    assert [d["key"] for d in orjson.loads(out)] == ["d", "e"]  # no --limit: the array, as ever
    code, out, _ = run("ls", "--updated-since", "2999-01-01T00:00Z", "--json")
    assert orjson.loads(out) == []
    code, out, _ = run("ls", "--updated-since", "2000-01-01", "--json")
    assert len(orjson.loads(out)) == 5
    code, out, _ = run("ls", "--sort", "size", "--limit", "1", "--json")
    assert [d["key"] for d in orjson.loads(out)["sessions"]] == ["e"]


@pytest.mark.parametrize("argv", [("--cursor", "nonsense"), ("--sort", "name", "--cursor", "WzEsImtleSIsZmFsc2UsImEiLCJhIl0"),
                                  ("--sort", "size", "--cursor", "WzEsImtleSIsZmFsc2UsImEiLCJhIl0"),
                                  ("--offset", "1", "--cursor", "WzEsImtleSIsZmFsc2UsImEiLCJhIl0"),
                                  ("--limit", "-1",), ("--updated-since", "yesterday"), ("--sort", "bogus")])
def test_ls_refuses_bad_paging_arguments_as_usage_errors(run: Run, store: SessionStore, argv: tuple[str, ...]) -> None:
    chat(store, "a", 1)
    code, out, err = run("ls", *argv)
    assert code == 2 and out == "" and err


def test_ls_on_an_empty_store(run: Run) -> None:
    code, out, err = run("ls")
    assert code == 0 and out == "" and "no sessions in" in err
    code, out, _ = run("ls", "--json")
    assert orjson.loads(out) == []


def test_search_by_text_name_alias_and_limit(run: Run, store: SessionStore) -> None:
    store.append("a", {"role": "user", "content": [{"type": "text", "text": "Deploy the Kubernetes cluster"}]})
    store.append("b", {"role": "user", "content": "nothing here"})
    store.set_session_name("b", "kubernetes notes")
    store.append("c", {"role": "user", "content": "unrelated"})
    store.set_session_agent_alias("a", "ops")
    code, out, _ = run("search", "KUBERNETES", "-l")
    assert code == 0 and sorted(line.split()[0] for line in out.splitlines()[1:]) == ["a", "b"]
    code, out, _ = run("search", "kubernetes", "--alias", "ops", "-l", "--json")
    assert [d["key"] for d in orjson.loads(out)] == ["a"]
    code, out, _ = run("search", "kubernetes", "--limit", "1", "--nl")
    assert len(out.splitlines()) == 1
    code, out, err = run("search", "absent-word", "-l")
    assert code == 1 and out == "" and "no session matches" in err


@pytest.fixture(params=["jsonl", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> tuple[pathlib.Path, Any]:
    """A JSONL directory or a SQLite file the CLI opens by its ``--root``."""
    if request.param == "jsonl":
        return tmp_path / "store", SessionStore(tmp_path / "store", durability="flush")
    return tmp_path / "s.db", SqliteSessionStore(tmp_path / "s.db", durability="flush")


def test_search_prints_each_matching_message_like_grep(any_store: tuple[pathlib.Path, Any],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    where, store = any_store
    ids = [store.append("a", {"role": "user", "content": [{"type": "text", "text": "Deploy the Kubernetes cluster"}]}),
           store.append("a", {"role": "assistant", "content": "nothing here"}),
           store.append("a", {"role": "assistant", "content": "Die STRASSE und kubernetes"})]
    other = store.append("b", {"role": "user", "content": "Eine Straße\nzwei"})
    store.set_session_name("b", "Kubernetes notes")

    def search(*argv: str) -> tuple[int, list[str], str]:
        capsys.readouterr()
        code = main(["--root", str(where), "search", *argv])
        out, err = capsys.readouterr()
        return code, out.splitlines(), err

    code, lines, _ = search("KUBERNETES")
    assert code == 0  # newest first; a session's name is searched with -l (or filtered by --name)
    assert lines == [f"a  {ids[2]}  assistant  Die STRASSE und **kubernetes**",
                     f"a  {ids[0]}  user  Deploy the **Kubernetes** cluster"]
    # casefolded as the store compares: ß matches ss both ways, and the mark covers the original characters
    code, lines, _ = search("strasse")
    assert code == 0 and sorted(lines) == sorted([f"a  {ids[2]}  assistant  Die **STRASSE** und kubernetes",
                                                  f"b  {other}  user  Eine **Straße**\\nzwei"])
    code, lines, _ = search("straße", "--json")
    hits = [orjson.loads(line) for line in lines]
    assert sorted((h["key"], h["id"], h["role"], h["field"], h["text"][h["start"]:h["end"]]) for h in hits) == [
        ("a", ids[2], "assistant", "message", "STRASSE"), ("b", other, "user", "message", "Straße")]
    code, lines, err = search("absent-word")
    assert code == 1 and lines == [] and "no message matches 'absent-word'" in err
    code, lines, _ = search("absent-word", "--json")
    assert code == 1 and lines == []
    code, lines, _ = search("")  # every message, nothing marked
    assert code == 0 and len(lines) == 4 and not any("**" in line for line in lines)


def test_search_snippets_of_coloured_tool_output_read_as_the_terminal_showed_them(run: Run,
                                                                                   store: SessionStore) -> None:
    ident = store.append("t", {"role": "tool", "tool_call_id": "c", "content":
                               "\x1b[31mE   AssertionError: boom\x1b[0m\n\x1b]0;retitled\x07\x1b[2J"
                               "\x1b[31m=== \x1b[1m1 failed\x1b[0m, \x1b[32m41 passed\x1b[0m ==="})
    code, out, _ = run("search", "failed")
    assert code == 0
    assert out == f"t  {ident}  tool  E   AssertionError: boom\\n=== 1 **failed**, 41 passed ===\n"
    code, out, _ = run("show", "t", "--around", ident, "-C", "1")
    assert code == 0 and "    === 1 failed, 41 passed ===\n" in out and "\\x1b" not in out and "\x1b" not in out


def test_search_filters_pages_and_opens_a_hit_in_context(root: pathlib.Path, store: SessionStore,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ids = store.append_many("k", [{"role": "user" if i % 2 else "assistant", "content": f"step {i} of the deploy",
                                   "created_at": 1_000 * i} for i in range(10)])
    store.append("other", {"role": "user", "content": "deploy elsewhere", "created_at": 5_500})
    store.set_session_name("other", "Side Project")

    def search(*argv: str) -> tuple[int, list[dict[str, Any]], str]:
        capsys.readouterr()
        code = main(["--root", str(root), "search", *argv, "--json"])
        out, err = capsys.readouterr()
        return code, [orjson.loads(line) for line in out.splitlines()], err

    code, hits, _ = search("deploy", "--role", "user", "--since", "3000", "--until", "8000")
    assert [h["id"] for h in hits] == [ids[7], hits[1]["id"], ids[5], ids[3]] and hits[1]["key"] == "other"
    assert hits[0]["created_at"] == 7000 and hits[0]["matches"] == [[14, 20]]
    code, hits, _ = search("deploy", "--key", "other")
    assert [h["key"] for h in hits] == ["other"]
    code, hits, _ = search("DEPLOY", "--name", "side")
    assert [h["key"] for h in hits] == ["other"]
    code, hits, err = search('"step 9"', "--limit", "1")
    assert [h["id"] for h in hits] == [ids[9]] and "--cursor" not in err
    code, hits, err = search("deploy", "--key", "k", "--limit", "4")
    assert [h["id"] for h in hits] == ids[:5:-1]
    cursor = err.split("--cursor ")[1].split()[0]
    code, hits, err = search("deploy", "--key", "k", "--limit", "4", "--cursor", cursor)
    assert code == 0 and [h["id"] for h in hits] == ids[5:1:-1]
    capsys.readouterr()
    assert main(["--root", str(root), "show", "k", "--around", ids[4], "-C", "2", "--jsonl"]) == 0
    shown = [orjson.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    assert shown == ids[2:7]
    assert main(["--root", str(root), "show", "k", "--around", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"]) != 0


def test_search_finds_matches_past_the_first_page(root: pathlib.Path, store: SessionStore,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Messages are read a page at a time, and every page is searched."""
    store.append_many("long", [{"role": "user", "content": f"line {i}" + (" needle" if i % 400 == 7 else "")}
                               for i in range(1300)])
    capsys.readouterr()
    assert main(["--root", str(root), "search", "NEEDLE", "--json"]) == 0
    hits = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(h["text"] for h in hits) == ["line 1207 needle", "line 407 needle", "line 7 needle",
                                               "line 807 needle"]


def test_stats_counts(run: Run, store: SessionStore, root: pathlib.Path) -> None:
    chat(store, "a", 3)
    chat(store, "b", 2)
    store.set_session_state("b", "running", "t")
    with open(transcript(root, "a"), "ab") as f:
        f.write(b'{"id":"01Z')
    (root / ("." + key_to_stem("b") + ".jsonl.tmp")).write_bytes(b"partial")
    chat(store, "gone", 1)
    os.unlink(transcript(root, "gone"))  # leaves an orphan sidecar
    code, out, _ = run("stats", "--json")
    data = orjson.loads(out)
    assert code == 0
    assert data["sessions"] == 2 and data["messages"] == 5 and data["states"] == {"none": 1, "running": 1}
    assert data["torn_tails"] == 1 and data["orphan_sidecars"] == 1
    assert data["temp_files"] == 1 and data["temp_files_removed"] == 1  # opening the store cleans them up
    assert data["quarantine_files"] == 0 and data["corrupt_lines"] is None
    code, out, _ = run("stats")
    assert code == 0 and re.search(r"^sessions: +2 \(1 running, 1 without a state\)$", out, re.MULTILINE)
    assert re.search(r"^torn tails: +1$", out, re.MULTILINE)


# -- show / tail / export ---------------------------------------------------------------------------
def test_show_renders_roles_tool_calls_and_wraps_long_text(run: Run, store: SessionStore) -> None:
    long_text = " ".join(f"word{i}" for i in range(60))
    store.append("s", {"role": "user", "content": long_text})
    store.append("s", {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}}]})
    store.append("s", {"role": "tool", "tool_call_id": "call_9", "content": "evil \x1b]0;title\x07 text"})
    code, out, _ = run("show", "s", "--width", "40")
    assert code == 0
    body = [line for line in out.splitlines() if line.startswith("    word")]
    assert all(len(line) <= 40 for line in body)
    assert "word59" in out and len(body) > 5  # wrapped over many lines
    assert re.search(r"^user  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  01", out, re.MULTILINE)
    assert '-> lookup({"q":1})  [call_9]' in out
    assert "result of call_9" in out
    assert "\x1b" not in out and "\x07" not in out and "evil  text" in out  # the title sequence taken out
    code, out, _ = run("show", "s", "--width", "0")
    assert long_text in out


def test_show_pages_with_limit_and_before(run: Run, store: SessionStore) -> None:
    ids = chat(store, "p", 7)
    code, out, err = run("show", "p", "--limit", "3", "--jsonl")
    got = [orjson.loads(line)["id"] for line in out.splitlines()]
    assert code == 0 and got == ids[-3:]
    assert f"--before {ids[-3]}" in err
    code, out, err = run("show", "p", "--limit", "3", "--before", ids[-3], "--jsonl")
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == ids[1:4]
    code, out, err = run("show", "p", "--limit", "5", "--before", ids[2], "--jsonl")
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == ids[:2] and err == ""
    code, out, _ = run("show", "p", "--before", ids[3], "--jsonl")
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == ids[:3]
    code, out, _ = run("show", "p", "--after", ids[3], "--jsonl")
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == ids[4:]
    code, out, _ = run("show", "p", "--jsonl")
    assert [orjson.loads(line) for line in out.splitlines()] == [m.to_dict() for m in store.try_load("p")]


def test_show_streams_a_session_longer_than_one_read(run: Run, store: SessionStore) -> None:
    store.append_many("long", [{"role": "user", "content": str(i)} for i in range(1203)])
    _, out, _ = run("show", "long", "--jsonl")
    assert [orjson.loads(line)["content"] for line in out.splitlines()] == [str(i) for i in range(1203)]


def test_tail_prints_the_newest(run: Run, store: SessionStore) -> None:
    ids = chat(store, "t", 6)
    code, out, _ = run("tail", "t", "-n", "2", "--jsonl")
    assert code == 0 and [orjson.loads(line)["id"] for line in out.splitlines()] == ids[-2:]
    code, out, _ = run("tail", "t")
    assert out.count("message ") == 6


def test_tail_follow_in_process_sees_appends_a_revert_and_a_recreate(
        root: pathlib.Path, store: SessionStore, capsys: pytest.CaptureFixture[str]) -> None:
    ids = chat(store, "f", 3)
    # interrupt_main() is a no-op while SIGINT is ignored (a process started in the
    # background by a shell without job control): Python's handler, so the follow ends.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def writer() -> None:
        try:
            other = SessionStore(root, durability="flush")
            time.sleep(0.15)
            other.append("f", {"role": "user", "content": "appended live"})
            time.sleep(0.15)
            other.truncate_messages("f", ids[0])
            other.append("f", {"role": "assistant", "content": "after the revert"})
            time.sleep(0.15)
            other.delete_session("f")
            time.sleep(0.15)
            other.append("f", {"role": "user", "content": "born again"})
            time.sleep(0.3)
        finally:
            _thread.interrupt_main()  # Ctrl-C: the only way a follow ends, also when the writer failed

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        code = main(["--root", str(root), "tail", "f", "-n", "1", "-f", "--jsonl", "--interval", "0.01"])
    finally:
        thread.join()
        signal.signal(signal.SIGINT, previous)
    out, err = capsys.readouterr()
    contents = [orjson.loads(line)["content"] for line in out.splitlines()]
    assert code == 130  # Ctrl-C ends a follow quietly
    assert contents == ["message 2", "appended live", "after the revert", "born again"]
    assert "truncated or rewritten" in err and "was removed" in err and "is back" in err


def test_export_is_jsonl_and_refuses_corruption_unless_lenient(run: Run, store: SessionStore,
                                                               root: pathlib.Path) -> None:
    chat(store, "e", 3)
    store.append("e", {"role": "assistant", "content": [{"type": "text", "text": "parts"}], "name": "bot"})
    code, out, _ = run("export", "e")
    assert code == 0 and [orjson.loads(line) for line in out.splitlines()] == [m.to_dict() for m in store.load("e")]
    path = transcript(root, "e")
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"not json"
    path.write_bytes(b"\n".join(lines))
    offset = len(lines[0]) + 1
    code, out, err = run("export", "e")
    assert code == 1 and out == "" and f"line 2, byte offset {offset}" in one_error_line(err)
    code, out, err = run("export", "e", "--lenient")
    assert code == 0 and len(out.splitlines()) == 3 and "warning: skipped 1 corrupt line" in err


# -- import / rm / repair -------------------------------------------------------------------------------
def test_import_export_round_trip_keeps_ids(run: Run, store: SessionStore, tmp_path: pathlib.Path) -> None:
    chat(store, "src", 4)
    _, exported, _ = run("export", "src")
    dump = tmp_path / "src.jsonl"
    dump.write_text(exported + "\n\n")  # blank lines are skipped
    code, out, _ = run("import", "copy", str(dump))
    assert code == 0 and "imported 4 messages into new session 'copy'" in out
    assert store.try_load("copy") == store.try_load("src")
    code, _, err = run("import", "copy", str(dump))
    assert code == 1 and "already exists" in one_error_line(err) and "--append" in err
    code, _, err = run("import", "copy", str(dump), "--append")
    assert code == 1 and "--new-ids" in one_error_line(err)
    assert len(store.try_load("copy")) == 4  # nothing written
    code, out, _ = run("import", "copy", str(dump), "--append", "--new-ids")
    assert code == 0 and len(store.try_load("copy")) == 8


def test_import_openai_style_array_and_messages_object(run: Run, store: SessionStore, tmp_path: pathlib.Path) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    array = tmp_path / "messages.json"
    array.write_bytes(orjson.dumps(messages, option=orjson.OPT_INDENT_2))
    assert run("import", "oa", str(array))[0] == 0
    got = store.try_load("oa")
    assert [m.role for m in got] == ["system", "user", "assistant", "tool"]
    assert got[2].extra["tool_calls"][0]["id"] == "c1" and got[3].extra == {"tool_call_id": "c1"}
    body = tmp_path / "request.json"
    body.write_bytes(orjson.dumps({"model": "x", "messages": messages[:2]}))
    assert run("import", "req", str(body))[0] == 0
    assert [m.content for m in store.try_load("req")] == ["Be brief.", "Weather?"]


@pytest.mark.parametrize(("content", "expected"), [
    (b'{"role":"user","content":"a"}\n{"role":"user","content":"b"}\n{oops\n', "bad.jsonl:3: not JSON"),
    (b'{"role":"user","content":"a"}\n[1,2]\n', "bad.jsonl:2: a message must be a JSON object"),
    (b'[{"role":"user"},{"content":"no role"}]', "bad.jsonl: item 2: a message needs a 'role'"),
    (b"[]", "holds no messages"),
])
def test_import_rejects_bad_input_and_writes_nothing(run: Run, store: SessionStore, tmp_path: pathlib.Path,
                                                     content: bytes, expected: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    code, _, err = run("import", "never", str(bad))
    assert code == 1 and expected in one_error_line(err)
    assert not store.session_exists("never")


def test_import_of_a_directory_or_missing_file_is_one_line(run: Run, tmp_path: pathlib.Path) -> None:
    code, _, err = run("import", "k", str(tmp_path))
    assert code == 1 and "cannot read" in one_error_line(err)
    code, _, err = run("import", "k", str(tmp_path / "absent.jsonl"))
    assert code == 1 and "No such file" in one_error_line(err)


def test_rm(run: Run, store: SessionStore) -> None:
    chat(store, "x", 1)
    chat(store, "y", 1)
    chat(store, "run", 1)
    store.set_session_state("run", "running", "turn-1")
    code, out, _ = run("rm", "x", "y")
    assert code == 0 and "removed session 'x'" in out and not store.session_exists("y")
    code, _, err = run("rm", "x")
    assert code == 1 and "does not exist" in one_error_line(err)
    assert run("rm", "-f", "x")[0] == 0
    code, _, err = run("rm", "run")
    assert code == 1 and "running" in one_error_line(err) and store.session_exists("run")
    assert run("rm", "--force", "run")[0] == 0 and not store.session_exists("run")
    code, _, err = run("rm", "ok-key", "")
    assert code == 2  # every key is checked before anything is removed


def test_repair_reports_what_it_kept_and_set_aside(run: Run, store: SessionStore, root: pathlib.Path) -> None:
    chat(store, "r", 4)
    path = transcript(root, "r")
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"role": 42}'
    original = b"\n".join(lines) + b'{"id":"01ZZ'
    path.write_bytes(original)
    offset = len(lines[0]) + len(lines[1]) + 2
    code, out, err = run("repair", "r")
    assert code == 0, err
    assert "kept 3 messages" in out
    assert f"line 3, byte offset {offset}" in out and "{\"role\": 42}" in out
    assert "torn tail of 11 bytes" in out
    saved = re.search(r"the original bytes are saved in (\S+)", out)
    assert saved and pathlib.Path(saved.group(1)).read_bytes() == original
    assert [m.content for m in store.try_load("r")] == ["message 0", "message 1", "message 3"]
    assert run("verify")[0] == 0
    code, out, _ = run("repair", "r")
    assert code == 0 and "needs no repair" in out
    code, _, err = run("repair", "nope")
    assert code == 1 and "does not exist" in one_error_line(err)


def test_repair_completes_an_interrupted_write(run: Run, store: SessionStore, root: pathlib.Path) -> None:
    chat(store, "i", 2)
    lock = root / (key_to_stem("i") + ".lock")
    with open(lock, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<Q", 7))
    assert run("verify")[0] == 1
    code, out, _ = run("repair", "i")
    assert code == 0 and "completed an interrupted write" in out
    assert run("verify")[0] == 0


# -- verify -----------------------------------------------------------------------------------------
def _lock(root: pathlib.Path, key: str) -> pathlib.Path:
    return root / (key_to_stem(key) + ".lock")


def _write_at(path: pathlib.Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _append(path: pathlib.Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _plant_corrupt(root: pathlib.Path) -> None:
    path = transcript(root, "a")
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"{oops"
    path.write_bytes(b"\n".join(lines))


def _plant_id_order(root: pathlib.Path) -> None:
    with open(transcript(root, "a"), "ab") as f:
        f.write(b'{"id":"00000000000000000000000000","created_at":1,"role":"user","kind":"message","content":"x"}\n')


def _plant_key_mismatch(root: pathlib.Path) -> None:
    path = root / (key_to_stem("a") + ".meta.json")
    meta = orjson.loads(path.read_bytes())
    meta["key"] = "someone-else"
    path.write_bytes(orjson.dumps(meta))


DAMAGE: dict[str, tuple[str, Callable[[pathlib.Path], object]]] = {
    "torn tail": ("torn-tail", lambda r: _append(transcript(r, "a"), b'{"id":"01ZZ')),
    "corrupt mid-file line": ("corrupt-line", _plant_corrupt),
    "id out of order": ("id-order", _plant_id_order),
    "orphan sidecar": ("orphan-sidecar", lambda r: os.unlink(transcript(r, "b"))),
    "missing sidecar": ("missing-sidecar", lambda r: os.unlink(r / (key_to_stem("a") + ".meta.json"))),
    "corrupt sidecar": ("corrupt-sidecar", lambda r: (r / (key_to_stem("a") + ".meta.json")).write_bytes(b"{")),
    "sidecar of another key": ("key-mismatch", _plant_key_mismatch),
    "temp file": ("temp-file", lambda r: (r / ("." + key_to_stem("a") + ".jsonl.tmp")).write_bytes(b"half")),
    "pending record": ("pending-record",
                       lambda r: _write_at(_lock(r, "a"), 56, b'{"op":"tail","at":0,"line":"{}"}\n')),
    "odd counter": ("odd-counter", lambda r: _write_at(_lock(r, "a"), 8, struct.pack("<Q", 3))),
    "file mode 0644": ("permissions", lambda r: os.chmod(transcript(r, "a"), 0o644)),
    "root mode 0755": ("permissions", lambda r: os.chmod(r, 0o755)),
    "symlink": ("symlink", lambda r: os.symlink(transcript(r, "a"), r / "c.jsonl")),
    "directory as transcript": ("not-regular", lambda r: os.mkdir(r / "d.jsonl")),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_verify_finds_planted_damage(damage: str, run: Run, store: SessionStore, root: pathlib.Path) -> None:
    chat(store, "a", 3)
    chat(store, "b", 2)
    code, out, _ = run("verify")
    assert code == 0 and out.startswith("ok: 2 sessions, 5 messages")
    kind, plant = DAMAGE[damage]
    plant(root)
    before = sorted((p.name, p.lstat().st_size) for p in root.iterdir())
    code, out, _ = run("verify", "--json")
    assert code == 1, out
    report = orjson.loads(out)
    assert report["ok"] is False
    assert kind in {p["kind"] for p in report["problems"]}, report
    assert all(p["hint"] for p in report["problems"])
    assert sorted((p.name, p.lstat().st_size) for p in root.iterdir()) == before  # verify changed nothing
    code, text, _ = run("verify")
    assert code == 1 and "to fix:" in text


def test_verify_reports_line_and_byte_offset_of_each_corrupt_line(run: Run, store: SessionStore,
                                                                  root: pathlib.Path) -> None:
    chat(store, "a", 5)
    path = transcript(root, "a")
    lines = path.read_bytes().split(b"\n")
    lines[1], lines[3] = b"{oops", b""
    path.write_bytes(b"\n".join(lines))
    _, out, _ = run("verify", "--json")
    found = [(p["line"], p["offset"]) for p in orjson.loads(out)["problems"] if p["kind"] == "corrupt-line"]
    assert found == [(2, len(lines[0]) + 1), (4, len(lines[0]) + len(lines[1]) + len(lines[2]) + 3)]
    _, text, _ = run("verify")
    assert f"{key_to_stem('a')}.jsonl:2: corrupt line: byte offset {len(lines[0]) + 1}" in text


def test_verify_selected_keys_and_unknown_key(run: Run, store: SessionStore, root: pathlib.Path) -> None:
    chat(store, "good", 2)
    chat(store, "bad", 2)
    _append(transcript(root, "bad"), b"torn")
    assert run("verify", "good")[0] == 0
    assert run("verify", "bad")[0] == 1
    code, out, _ = run("verify", "--json", "nope")
    assert code == 1 and [p["kind"] for p in orjson.loads(out)["problems"]] == ["missing-session"]
    code, _, err = run("verify", "")
    assert code == 2 and "session key" in one_error_line(err)


def test_verify_treats_a_write_in_progress_as_a_note(run: Run, store: SessionStore, root: pathlib.Path) -> None:
    chat(store, "live", 2)
    temp = root / ("." + key_to_stem("live") + ".jsonl.tmp")
    holder = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with SessionStore(root, durability="flush").lock("live"):
            holder.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        holder.wait(10)
        temp.write_bytes(b"being written")
        temp.chmod(0o600)
        code, out, _ = run("verify", "--json")
    finally:
        release.set()
        thread.join()
    report = orjson.loads(out)
    assert code == 0 and report["problems"] == []
    assert [n["kind"] for n in report["notes"]] == ["busy"]


def test_verify_progress_bar_only_on_a_terminal(root: pathlib.Path, store: SessionStore,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(PROGRESS_MIN_SESSIONS):
        store.append(f"s{i}", {"role": "user", "content": "hi"})
    assert main(["--root", str(root), "verify"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith(f"ok: {PROGRESS_MIN_SESSIONS} sessions")
    if not hasattr(os, "openpty"):
        return
    leader, follower = os.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "jsonl_sessions", "--root", str(root), "verify"],
                              stdout=subprocess.PIPE, stderr=follower, timeout=60, env=_env(), check=False)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert done.returncode == 0 and done.stdout.startswith(b"ok: ")
    assert f"] {PROGRESS_MIN_SESSIONS}/{PROGRESS_MIN_SESSIONS} sessions".encode() in shown


# -- demo -------------------------------------------------------------------------------------------
def test_demo_tours_and_leaves_a_healthy_store(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo_root = tmp_path / "demo"
    assert main(["demo", "--root", str(demo_root)]) == 0
    out = capsys.readouterr().out
    for expected in ("copy_messages(", "truncate_messages(", "torn tail", "$ jsonl-sessions verify",
                     "$ jsonl-sessions repair demo/what-if", "the original bytes are saved in",
                     "ok: 2 sessions", f"jsonl-sessions --root {demo_root} ls"):
        assert expected in out, expected
    store = SessionStore(demo_root)
    assert store.list_sessions() == ["demo/chat", "demo/what-if"]
    assert [m.role for m in store.try_load("demo/chat")][-1] == "user"
    assert store.get_session_metadata("demo/what-if").parent == "demo/chat"  # type: ignore[union-attr]
    assert main(["--root", str(demo_root), "verify"]) == 0
    capsys.readouterr()
    assert main(["demo", "--root", str(demo_root)]) == 1  # never mixes into a store with sessions
    assert "already holds sessions" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["x.db", "x.sqlite3"])
def test_demo_refuses_a_sqlite_root_and_creates_nothing(name: str, tmp_path: pathlib.Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A root every other command opens as a SQLite file is a usage error, not a directory of that name."""
    assert main(["--root", str(tmp_path / name), "demo"]) == 2
    assert "no SQLite version" in one_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []
    existing = tmp_path / "store.bin"
    SqliteSessionStore(existing, durability="flush").append("k", {"role": "user", "content": "hi"})  # by its header
    assert main(["demo", "--root", str(existing)]) == 2
    assert "no SQLite version" in one_error_line(capsys.readouterr().err)
    assert existing.is_file()


# -- every command as a real process ------------------------------------------------------------------
def _read_lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def _wait_for(lines: queue.Queue[str], predicate: Callable[[str], bool], seen: list[str]) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        seen.append(line)
        if predicate(line):
            return line
    raise AssertionError(f"not seen; got {seen}")


@contextlib.contextmanager
def _killed_at_exit(proc: subprocess.Popen[str]) -> Iterator[None]:
    """A follow runs until a signal: when the test fails first, SIGKILL it rather than hang."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()


def test_tail_follow_subprocess_sees_appends_from_another_process(root: pathlib.Path, store: SessionStore) -> None:
    ids = chat(store, "live", 2)
    argv = [sys.executable, "-m", "jsonl_sessions", "--root", str(root), "tail", "live", "-f", "--jsonl",
            "--interval", "0.02"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()) as proc, \
            _killed_at_exit(proc):
        out: queue.Queue[str] = queue.Queue()
        err: queue.Queue[str] = queue.Queue()
        readers = [threading.Thread(target=_read_lines, args=(proc.stdout, out), daemon=True),
                   threading.Thread(target=_read_lines, args=(proc.stderr, err), daemon=True)]
        for r in readers:
            r.start()
        seen: list[str] = []
        _wait_for(out, lambda line: ids[-1] in line, seen)
        new_id = store.append("live", {"role": "assistant", "content": "from the test process"})
        assert orjson.loads(_wait_for(out, lambda line: new_id in line, seen))["content"] == "from the test process"
        store.truncate_messages("live", ids[0])  # a revert: the follow cursor vanishes
        after = store.append("live", {"role": "user", "content": "after revert"})
        _wait_for(out, lambda line: after in line, seen)
        _wait_for(err, lambda line: "truncated or rewritten" in line, [])
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
        for r in readers:
            r.join(timeout=5)
        rest = []
        while not err.empty():
            rest.append(err.get())
    assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in rest)


@pytest.fixture
def populated(root: pathlib.Path, store: SessionStore) -> pathlib.Path:
    chat(store, "demo/chat", 3)
    store.set_session_name("demo/chat", "findme")
    return root


SUBPROCESS_CASES: dict[str, tuple[list[str], int, str]] = {
    "ls": (["ls"], 0, "demo/chat"),
    "show": (["show", "demo/chat"], 0, "message 2"),
    "tail": (["tail", "-n", "1", "demo/chat"], 0, "message 2"),
    "search": (["search", "FINDME", "--nl"], 0, '"key":"demo/chat"'),
    "verify": (["verify"], 0, "ok: 1 session, 3 messages"),
    "repair": (["repair", "demo/chat"], 0, "needs no repair"),
    "gc": (["gc"], 0, "nothing to collect"),
    "export": (["export", "demo/chat"], 0, '"content":"message 0"'),
    "import": (["import", "piped", "-"], 0, "imported 2 messages into new session 'piped'"),
    "rm": (["rm", "demo/chat"], 0, "removed session 'demo/chat'"),
    "prune": (["prune", "--older-than", "1000"], 0, "removed 0 sessions with no activity for 1000 hours"),
    "stats": (["stats", "--json"], 0, '"messages": 3'),
    "index": (["index", "build"], 0, "messages indexed: 3"),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_runs_as_a_real_process(command: str, populated: pathlib.Path, tmp_path: pathlib.Path) -> None:
    if command == "demo":
        done = cli("demo", env=_env(TMPDIR=str(tmp_path)))
        assert done.returncode == 0, done.stderr
        assert "ok: 2 sessions" in done.stdout
        return
    if command == "migrate":
        done = cli("migrate", str(populated), str(tmp_path / "copy.db"))
        assert done.returncode == 0, done.stderr
        assert "copied 1 session from the JSONL directory" in done.stdout
        return
    if command == "serve":
        _serve_as_process(populated)
        return
    argv, status, expected = SUBPROCESS_CASES[command]
    stdin = '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]'
    done = cli(*argv, root=populated, stdin=stdin if command == "import" else None)
    assert done.returncode == status, done.stderr
    assert expected in done.stdout
    assert "Traceback" not in done.stderr


def _serve_as_process(root: pathlib.Path) -> None:
    """``serve --port 0``: prints its address, answers it (token, then cookie), stops on Ctrl-C with 0."""
    pytest.importorskip("jinja2", reason="the viewer extra: pip install '.[viewer]'")
    with subprocess.Popen([sys.executable, "-m", "jsonl_sessions", "--root", str(root), "serve", "--port", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()) as proc:
        _serve_checks(proc)


def _serve_checks(proc: subprocess.Popen[str]) -> None:
    try:
        assert proc.stdout is not None
        url = next(line.strip() for line in proc.stdout if "?token=" in line)
        host, rest = url.removeprefix("http://").split("/", 1)
        conn = http.client.HTTPConnection(host, timeout=60)
        conn.request("GET", "/" + rest)
        first = conn.getresponse()
        first.read()
        assert first.status == 303
        conn.request("GET", "/", headers={"Cookie": first.getheader("Set-Cookie", "").split(";")[0]})
        page = conn.getresponse()
        assert page.status == 200 and "demo/chat" in page.read().decode()
        conn.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_console_script_entry_point_exists() -> None:
    """The installed distribution declares the ``jsonl-sessions`` console script for the
    CLI's ``main``, and the script the installer wrote (next to this interpreter) runs.
    No fallback: without the installed script this test fails (install the checkout with
    ``pip install -e .``)."""
    declared = [ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == "jsonl-sessions"]
    assert [ep.value for ep in declared] == ["jsonl_sessions.cli:main"], declared
    assert declared[0].load() is main
    bindir = pathlib.Path(sys.executable).parent
    script = shutil.which("jsonl-sessions", path=str(bindir))
    assert script is not None, f"no jsonl-sessions script in {bindir}: is the package installed there?"
    done = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60, env=_env(), check=False)
    assert done.returncode == 0 and done.stdout.startswith("jsonl-sessions "), done.stderr


# -- --json on every command ---------------------------------------------------------------------------
JSON_CASES: dict[str, list[str]] = {
    "ls": ["ls"],
    "show": ["show", "demo/chat"],
    "tail": ["tail", "demo/chat", "-n", "2"],
    "search": ["search", "message"],
    "verify": ["verify"],
    "repair": ["repair", "demo/chat"],
    "gc": ["gc"],
    "export": ["export", "demo/chat"],
    "import": ["import", "imported", "{input}"],
    "rm": ["rm", "demo/chat"],
    "prune": ["prune", "--older-than", "0", "--dry-run"],
    "stats": ["stats"],
    "index": ["index", "status"],
    "migrate": ["migrate", "{root}", "{tmp}/copy.db"],
    "demo": ["demo", "--root", "{tmp}/tour"],
    "serve": ["serve", "--get", "/session?key=demo%2Fchat"],
}


def _json_values(text: str) -> list[Any]:
    """The values of ``text``: one JSON document, or NDJSON (one a line)."""
    try:
        return [orjson.loads(text)]
    except orjson.JSONDecodeError:
        return [orjson.loads(line) for line in text.splitlines()]


def test_json_cases_cover_every_command() -> None:
    assert sorted(JSON_CASES) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_accepts_json_and_prints_only_json(command: str, populated: pathlib.Path,
                                                         tmp_path: pathlib.Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.json"
    source.write_text('[{"role": "user", "content": "hi"}]', encoding="utf-8")
    argv = [a.format(root=populated, tmp=tmp_path, input=source) for a in JSON_CASES[command]]
    capsys.readouterr()
    assert main(["--root", str(populated), *argv, "--json"]) == 0
    out = capsys.readouterr().out
    values = _json_values(out)
    assert values and all(isinstance(v, (dict, list)) for v in values), out


def test_json_shapes_of_the_commands_that_print_a_result(populated: pathlib.Path, tmp_path: pathlib.Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    def as_json(*argv: str) -> Any:
        capsys.readouterr()
        main(["--root", str(populated), *argv, "--json"])
        return _json_values(capsys.readouterr().out)

    (shown,) = as_json("show", "demo/chat", "-n", "1")
    assert shown["content"] == "message 2"
    (repaired,) = as_json("repair", "demo/chat")
    assert repaired["key"] == "demo/chat" and repaired["changed"] is False and repaired["kept"] == 3
    (imported,) = as_json("import", "new", str(_write(tmp_path)))
    assert imported["key"] == "new" and imported["created"] is True and len(imported["ids"]) == 1
    (removed,) = as_json("rm", "-f", "new", "absent")
    assert [(r["key"], r["removed"], r["reason"]) for r in removed] == [("new", True, None), ("absent", False, "missing")]
    (copied,) = as_json("migrate", str(populated), str(tmp_path / "c.db"))
    assert copied["copied"] == ["demo/chat"] and copied["failed"] == {} and copied["target"]["kind"] == "SQLite file"
    (tour,) = as_json("demo", "--root", str(tmp_path / "tour"))
    assert tour == {"root": str(tmp_path / "tour"), "sessions": ["demo/chat", "demo/what-if"]}
    capsys.readouterr()
    assert main(["--root", str(populated), "export", "demo/chat", "--to", "claude-code", "--json"]) == 2


def _write(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "one.json"
    path.write_text('[{"role": "user", "content": "hi"}]', encoding="utf-8")
    return path


def test_index_build_status_and_drop(any_store: tuple[pathlib.Path, Any], capsys: pytest.CaptureFixture[str]) -> None:
    where, store = any_store
    store.append_many("k", [{"role": "user", "content": f"deploy number {i}"} for i in range(5)])

    def run(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["--root", str(where), "index", *argv])
        return code, capsys.readouterr().out

    code, out = run("status")
    assert code == 0 and "no index" in out
    code, out = run("build", "--json")
    status = orjson.loads(out)
    assert code == 0 and status["exists"] and status["entries"] == 5 and status["seconds"] >= 0
    capsys.readouterr()
    assert main(["--root", str(where), "search", "NUMBER 3", "--json"]) == 0
    assert [orjson.loads(line)["text"] for line in capsys.readouterr().out.splitlines()] == ["deploy number 3"]
    code, out = run("status")
    assert code == 0 and "messages indexed: 5" in out
    code, out = run("drop")
    assert code == 0 and out.strip() == "index dropped"
    code, out = run("drop")
    assert code == 0 and out.strip() == "no index to drop"


def test_show_renders_anthropic_tool_blocks_as_tool_calls_with_their_results(run: Run, store: SessionStore) -> None:
    store.append_many("a", [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading it"},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "/src/ü.py"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "\x1b[32mprint(1)\x1b[0m"}]}]},
        {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]},
    ])
    code, out, _ = run("show", "a", "--width", "0")
    assert code == 0 and "[tool_use]" not in out and "[tool_result]" not in out
    assert '    Reading it\n    -> Read({"path":"/src/ü.py"})  [toolu_1]\n' in out  # as an OpenAI call is shown
    assert "    <- result of toolu_1\n    print(1)\n" in out  # its output, colours taken out
    assert '    [image] {"type":"image","source":{"type":"url","url":"u"}}' in out
    code, plain, _ = run("show", "a", "--width", "0")
    _, tailed, _ = run("tail", "a", "-n", "3", "--width", "0")
    assert tailed == plain
