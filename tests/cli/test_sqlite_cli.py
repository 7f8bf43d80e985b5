"""The command line on a SQLite store: every command with ``--backend sqlite`` (or a root
that is a ``.db`` file) prints what it prints for the same sessions in a JSONL directory;
``verify`` / ``repair`` / ``stats`` have their SQLite versions; ``migrate`` copies a store
both ways (exit 1 when a session could not be copied), with a progress bar only on a
terminal."""

from __future__ import annotations

import io
import os
import pathlib
import sqlite3
import subprocess
import sys

import pytest

from jsonl_sessions import SessionStore
from jsonl_sessions.cli import main
from jsonl_sessions.cli.migrate import ProgressBar
from jsonl_sessions.sqlite import SqliteSessionStore

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def stores(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The same sessions in a JSONL directory and (migrated) in a SQLite file."""
    jsonl = SessionStore(tmp_path / "jsonl")
    jsonl.append_many("demo/chat", [{"role": "user", "content": "FINDME please"},
                                    {"role": "assistant", "content": "sure"},
                                    {"role": "user", "content": "thanks"}])
    jsonl.set_session_name("demo/chat", "a chat")
    jsonl.copy_messages("demo/chat", "fork")
    assert main(["migrate", str(tmp_path / "jsonl"), str(tmp_path / "s.db")]) == 0
    return tmp_path / "jsonl", tmp_path / "s.db"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    got = capsys.readouterr()
    return status, got.out, got.err


@pytest.mark.parametrize("argv", [
    ["ls"], ["ls", "--json"], ["show", "demo/chat", "--width", "0"], ["show", "demo/chat", "-n", "1", "--jsonl"],
    ["tail", "-n", "2", "fork", "--jsonl"], ["search", "findme", "--nl"], ["export", "fork"],
    ["show", "missing"], ["export", "missing"],
])
def test_same_output_as_the_jsonl_store(stores: tuple[pathlib.Path, pathlib.Path], argv: list[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    jsonl, db = stores
    want = run(capsys, "--root", str(jsonl), *argv)
    for prefix in (["--root", str(db)], ["--root", str(db), "--backend", "sqlite"], [*argv[:1], "--root", str(db)]):
        rest = argv if prefix[0] == "--root" else argv[1:]
        got = run(capsys, *prefix, *rest)
        assert got == tuple(x.replace(str(jsonl), str(db)) if isinstance(x, str) else x for x in want), prefix


def test_writes_verify_repair_stats(stores: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    _, db = stores
    source = tmp_path / "in.jsonl"
    source.write_text('{"role": "user", "content": "imported"}\n')
    assert run(capsys, "--root", str(db), "import", "new", str(source))[0] == 0
    assert [m.content for m in SqliteSessionStore(db).load("new")] == ["imported"]
    assert run(capsys, "--root", str(db), "rm", "new")[:2] == (0, "removed session 'new'\n")
    status, out, _ = run(capsys, "--root", str(db), "verify")
    assert status == 0 and out.startswith("ok: 2 sessions, 6 messages")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE messages SET line = CAST('{broken' AS BLOB) WHERE seq = 1 AND session = "
                 "(SELECT id FROM sessions WHERE key = 'fork')")
    conn.close()
    status, out, _ = run(capsys, "--root", str(db), "verify")
    assert status == 1 and "session 'fork' line 2: corrupt row: " in out
    status, _out, err = run(capsys, "--root", str(db), "export", "fork")
    assert status == 1 and "line 2" in err and "`jsonl-sessions repair fork`" in err
    status, out, _ = run(capsys, "--root", str(db), "repair", "fork")
    assert status == 0 and "kept 2 messages, set aside 1 row" in out
    assert run(capsys, "--root", str(db), "verify")[0] == 0
    status, out, _ = run(capsys, "--root", str(db), "stats", "--json")
    assert status == 0 and '"quarantined_rows": 3' in out and '"messages": 5' in out
    assert run(capsys, "--backend", "sqlite", "--root", str(tmp_path / "d"), "demo")[0] == 2


def test_migrate_both_ways_and_refusals(stores: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    jsonl, db = stores
    status, out, err = run(capsys, "migrate", str(db), str(tmp_path / "back"))
    assert status == 0 and "copied 2 sessions from the SQLite file" in out and err == ""
    for name in ("demo%2fchat.jsonl", "fork.jsonl"):
        assert (tmp_path / "back" / name).read_bytes() == (jsonl / name).read_bytes()
    status, out, err = run(capsys, "migrate", str(jsonl), str(db))  # the same sessions: already there
    assert status == 0 and "2 sessions already there" in out and err == ""
    SqliteSessionStore(db).append("fork", {"role": "user", "content": "only in the copy"})
    status, out, err = run(capsys, "migrate", str(jsonl), str(db))
    assert status == 1 and "1 not copied" in out and "already exists" in err
    assert run(capsys, "migrate", str(tmp_path / "nowhere"), str(db))[0] == 2
    assert run(capsys, "migrate", str(db), str(db))[0] == 2
    status, out, _ = run(capsys, "migrate", "--to", "sqlite", str(jsonl), str(tmp_path / "plain-name"))
    assert status == 0 and SqliteSessionStore(tmp_path / "plain-name").list_sessions() == ["demo/chat", "fork"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(stores: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path) -> None:
    screen = Terminal()
    bar = ProgressBar(screen, width=10)
    for n in range(1, 4):
        bar(n, 3, f"k{n}")
    assert screen.getvalue().endswith("\r[##########] 3/3 k3" + " " * 28 + "\n")
    pipe = io.StringIO()
    ProgressBar(pipe)(1, 1, "k")
    assert pipe.getvalue() == ""
    jsonl, _db = stores  # as a real process with stderr a pipe: no bar
    done = subprocess.run([sys.executable, "-m", "jsonl_sessions", "migrate", str(jsonl), str(tmp_path / "p.db")],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stderr == "" and "copied 2 sessions" in done.stdout


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_progress_bar_on_a_real_terminal(stores: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path) -> None:
    """``migrate`` as a real process whose stderr is a pseudo-terminal draws the bar there."""
    jsonl, _db = stores
    master, slave = os.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "jsonl_sessions", "migrate", str(jsonl), str(tmp_path / "t.db")],
                              stdout=subprocess.PIPE, stderr=slave, text=True, timeout=60, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        os.close(slave)
        slave = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if slave != -1:
            os.close(slave)
        os.close(master)
    assert done.returncode == 0 and "copied 2 sessions" in done.stdout
    assert b"[" + b"#" * 30 + b"] 2/2 fork" in drawn, drawn


def test_tail_follow_on_sqlite_sees_appends_a_revert_and_a_recreate(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    import _thread
    import threading
    import time

    import orjson

    path = tmp_path / "s.db"
    ids = SqliteSessionStore(path).append_many("f", [{"role": "user", "content": f"message {i}"} for i in range(3)])

    def writer() -> None:
        try:
            other = SqliteSessionStore(path, durability="flush")
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
            _thread.interrupt_main()  # Ctrl-C: the only way a follow ends

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        code = main(["--root", str(path), "tail", "f", "-n", "1", "-f", "--jsonl", "--interval", "0.01"])
    finally:
        thread.join()
    out, err = capsys.readouterr()
    assert code == 130
    assert [orjson.loads(line)["content"] for line in out.splitlines()] == [
        "message 2", "appended live", "after the revert", "born again"]
    assert "truncated or rewritten" in err and "was removed" in err and "is back" in err
