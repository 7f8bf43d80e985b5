"""Both backends plan a compaction by the same rules and report it the same way: the
same lines kept and dropped (line numbers, byte offsets, reasons), a refusal naming the
first problem, a repair saying where the original bytes went; ``repair`` on the command
line prints the report and nothing through the logger."""

from __future__ import annotations

import logging
import pathlib
import sqlite3

import pytest

from jsonl_sessions import CorruptTranscriptError, SessionStore
from jsonl_sessions.cli import main
from jsonl_sessions.compaction import CompactionReport
from jsonl_sessions.jsonl.store import compaction_report
from jsonl_sessions.sqlite import SessionSnapshot, SqliteSessionStore

LINES = [
    b'{"id":"a","created_at":1,"role":"user","kind":"message","content":"one"}',
    b'{"id":"b","created_at":2,"role":"assistant","kind":"message","content":"two"}',
    b'{"id":"b","created_at":2,"role":"assistant","kind":"message","content":"two"}',  # exact repeat
    b'{broken',
    b'{"id":"b","created_at":3,"role":"user","kind":"message","content":"other bytes"}',
    b'{"id":"c","created_at":4,"role":"user","kind":"message","content":"three"}',
]


def _jsonl(tmp_path: pathlib.Path, lines: list[bytes]) -> SessionStore:
    store = SessionStore(tmp_path / "files")
    store.append("k", {"role": "user", "content": "x"})
    (path,) = [p for p in (tmp_path / "files").iterdir() if p.name.endswith(".jsonl")]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return store


def _sqlite(tmp_path: pathlib.Path, lines: list[bytes]) -> SqliteSessionStore:
    store = SqliteSessionStore(tmp_path / "s.db")
    store.import_session(SessionSnapshot("k", lines, {"format": 1, "key": "k"}, 0))
    return store


def _plans(tmp_path: pathlib.Path, lines: list[bytes], repair: bool) -> tuple[CompactionReport, CompactionReport]:
    files = _jsonl(tmp_path, lines)
    db = _sqlite(tmp_path, lines)
    try:
        return compaction_report(files, "k", repair=repair), db.compaction_report("k", repair=repair)
    finally:
        files.close()
        db.close()


def test_an_exact_repeat_is_dropped_alike(tmp_path: pathlib.Path) -> None:
    jsonl, sqlite = _plans(tmp_path, LINES[:3] + LINES[5:], repair=False)
    assert jsonl.plan == sqlite.plan and sqlite.dropped == 1 and sqlite.quarantine is None
    assert [d.line for d in sqlite.plan.dropped] == [3] and not sqlite.plan.dropped[0].corrupt


def test_a_problem_refuses_alike(tmp_path: pathlib.Path) -> None:
    errors = []
    for make in (_jsonl, _sqlite):
        store = make(tmp_path, LINES)
        with pytest.raises(CorruptTranscriptError) as info:
            store.compact("k")
        errors.append((info.value.line, info.value.offset, info.value.reason))
        assert len(store.load("k")) == 5  # nothing changed
        store.close()
    assert errors[0] == errors[1] and errors[0][0] == 4


def test_a_repair_reports_the_same_plan_and_where_the_bytes_are(tmp_path: pathlib.Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        jsonl, sqlite = _plans(tmp_path, LINES, repair=True)
    assert not caplog.records  # a report, not a log line
    assert [(d.line, d.offset, d.corrupt) for d in jsonl.plan.dropped] == \
           [(d.line, d.offset, d.corrupt) for d in sqlite.plan.dropped] == [(3, 151, False), (4, 229, True)]
    # The other line with id "b" keeps its place and bytes under a new id, "b" in original_id.
    assert [(d.line, d.offset) for d in jsonl.plan.renumbered] == \
           [(d.line, d.offset) for d in sqlite.plan.renumbered] == [(5, 237)]
    assert jsonl.plan.kept == sqlite.plan.kept and len(sqlite.plan.kept) == 4
    assert sqlite.quarantine is not None and "quarantine table" in sqlite.quarantine
    assert jsonl.quarantine is not None and pathlib.Path(jsonl.quarantine).read_bytes().startswith(LINES[0])
    db = SqliteSessionStore(tmp_path / "s.db")
    loaded = db.load("k")
    assert [m.id for m in loaded][:2] == ["a", "b"] and loaded[3].id == "c"
    assert loaded[2].extra == {"original_id": "b"} and loaded[2].content == "other bytes"
    db.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("SELECT line FROM quarantine ORDER BY seq").fetchall() == [(line,) for line in LINES]
    conn.close()


def test_the_repair_command_prints_the_report_and_logs_nothing(tmp_path: pathlib.Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    _sqlite(tmp_path, LINES).close()
    assert main(["--root", str(tmp_path / "s.db"), "repair", "k"]) == 0
    out, err = capsys.readouterr()
    assert "kept 4 messages, set aside 2 rows" in out and "line 4, byte offset 229" in out
    assert "gave 1 line a new id" in out and "line 5, byte offset 237" in out
    assert "quarantine table" in out and err == ""
    assert main(["--root", str(tmp_path / "s.db"), "repair", "k"]) == 0
    assert "needs no repair: 4 messages" in capsys.readouterr().out
