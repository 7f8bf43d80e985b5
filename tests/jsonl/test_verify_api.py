"""``verify()`` through the API: the JSONL store's own health check (the checks the command
line renders), with what it finds, where, and what ``fix=True`` clears; the SQLite
store's with the same report types.

The contract (``SessionStoreContract``) checks on every backend that a fresh store
verifies clean and that a damaged session is found; these are the JSONL specifics.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sqlite3
import struct

import orjson
import pytest

from jsonl_sessions import Finding, InvalidArgumentError, InvalidSessionKeyError, SessionStore, VerifyReport
from jsonl_sessions.aio import AsyncSessionStore
from jsonl_sessions.cli import main
from jsonl_sessions.cli.report import HINTS
from jsonl_sessions.jsonl.verify import verify_directory
from jsonl_sessions.keys import key_to_stem
from jsonl_sessions.sqlite import SqliteSessionStore


def chat(store: SessionStore | SqliteSessionStore, key: str, n: int) -> None:
    store.append_many(key, [{"role": "user", "content": f"{key} {i}"} for i in range(n)])


def files(root: pathlib.Path) -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in root.iterdir())


def test_store_verify_finds_a_corrupt_line_with_its_line_and_offset(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "s", durability="flush")
    chat(store, "a", 4)
    chat(store, "b", 1)
    path = tmp_path / "s" / (key_to_stem("a") + ".jsonl")
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"{not json"
    path.write_bytes(b"\n".join(lines))
    counted = store.get_message_count("a")  # (it may refresh the count cache: before the snapshot)
    before = files(tmp_path / "s")
    report = store.verify()
    assert isinstance(report, VerifyReport) and report.backend == "jsonl" and not report.ok
    assert report.location == str(tmp_path / "s")
    [found] = report.problems
    assert isinstance(found, Finding)
    assert (found.kind, found.key, found.file, found.line, found.offset, found.severity, found.fixable) == (
        "corrupt-line", "a", key_to_stem("a") + ".jsonl", 3, len(lines[0]) + len(lines[1]) + 2, "problem", False)
    assert found.to_json(report.location)["path"] == str(path)
    # the corrupt line counts, as get_message_count, ls and stats count it (it holds a position)
    assert (report.sessions, report.messages) == (2, 5) == (2, counted + 1)
    assert store.verify(["b"]).ok and store.verify(["a"]).problems == [found]
    assert files(tmp_path / "s") == before  # read-only
    assert store.verify(fix=True).problems == [found] and files(tmp_path / "s") == before  # fix never touches a line


def test_store_verify_fix_clears_what_a_killed_writer_left(tmp_path: pathlib.Path) -> None:
    """An orphan sidecar and an odd counter (what a writer killed mid-delete or mid-write
    leaves) are fixable problems; ``verify(fix=True)`` clears them under each session's
    guard and reports the store as it is after."""
    root = tmp_path / "s"
    store = SessionStore(root, durability="flush")
    chat(store, "a", 2)
    chat(store, "gone", 1)
    os.unlink(root / (key_to_stem("gone") + ".jsonl"))
    with open(root / (key_to_stem("a") + ".lock"), "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<Q", 3))
    report = store.verify()
    assert sorted((f.kind, f.key, f.fixable) for f in report.problems) == [
        ("odd-counter", "a", True), ("orphan-sidecar", "gone", True)]
    fixed = store.verify(fix=True)
    assert fixed.ok and fixed.findings == [], fixed.findings
    assert sorted(f.kind for f in fixed.fixed) == ["odd-counter", "orphan-sidecar"]
    assert not (root / (key_to_stem("gone") + ".meta.json")).exists()
    assert [m.content for m in store.load("a")] == ["a 0", "a 1"]
    assert store.verify().ok


def test_verify_directory_reports_progress_and_refuses_bad_keys(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "s"
    store = SessionStore(root, durability="flush")
    for key in ("a", "b", "c"):
        chat(store, key, 1)
    calls: list[tuple[int, int]] = []
    assert verify_directory(root, progress=lambda done, total: calls.append((done, total))).ok
    assert calls == [(1, 3), (2, 3), (3, 3)]
    before = files(root)
    with pytest.raises(InvalidArgumentError):
        store.verify("a")  # a string is not a collection of keys
    with pytest.raises(InvalidSessionKeyError):
        store.verify(["a", ""])
    assert files(root) == before


def test_sqlite_verify_returns_the_same_types_for_the_keys_asked(tmp_path: pathlib.Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    chat(store, "a", 3)
    chat(store, "b", 1)
    exported = store.export_session("a")
    assert exported is not None
    offset = sum(len(line) + 1 for line in exported.lines[:2])  # the row's offset in the session's export
    broken = b"{broken".ljust(len(exported.lines[2]))  # same length: the counters stay right
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("UPDATE messages SET line = ? WHERE seq = 2 AND session = (SELECT id FROM sessions WHERE key = 'a')",
                 (broken,))
    conn.close()
    report = store.verify()
    assert report.backend == "sqlite" and report.location == store.path and not report.ok
    assert [(f.kind, f.key, f.file, f.line, f.offset, f.fixable) for f in report.problems] == [
        ("corrupt-row", "a", "", 3, offset, False)]
    only = store.verify(["b", "nope"])
    assert [(f.kind, f.key) for f in only.problems] == [("missing-session", "nope")]
    assert (only.sessions, only.messages) == (1, 1)
    assert store.verify(fix=True).problems == report.problems
    store.close()


def test_the_command_line_prints_the_stores_report(tmp_path: pathlib.Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``jsonl-sessions verify --json`` is the backend's report as it is, plus a hint per finding."""
    root = tmp_path / "s"
    store = SessionStore(root, durability="flush")
    chat(store, "a", 2)
    with open(root / (key_to_stem("a") + ".jsonl"), "ab") as f:
        f.write(b"{torn")
    db = SqliteSessionStore(tmp_path / "s.db")
    chat(db, "a", 1)
    for where, want in ((root, verify_directory(root)), (tmp_path / "s.db", db.verify())):
        assert main(["--root", str(where), "verify", "--json"]) == (0 if want.ok else 1)
        got = orjson.loads(capsys.readouterr().out)
        for name in ("problems", "notes", "fixed"):
            for item in got[name]:
                hint = item.pop("hint")
                assert hint == (HINTS.get(item["kind"]) if item["severity"] == "problem" else None)
        assert got == want.to_json()
    assert [p["kind"] for p in verify_directory(root).to_json()["problems"]] == ["torn-tail"]
    db.close()


def test_the_async_store_verifies_in_a_worker_thread(tmp_path: pathlib.Path) -> None:
    async def check() -> VerifyReport:
        async with AsyncSessionStore(tmp_path / "s", durability="flush") as astore:
            await astore.append("a", {"role": "user", "content": "x"})
            return await astore.verify(["a"])

    report = asyncio.run(check())
    assert report.ok and (report.sessions, report.messages) == (1, 1)


@pytest.mark.parametrize("kind", ["scandir", "lstat"])
def test_an_io_error_listing_or_checking_files_fails_verify_instead_of_reporting_a_healthy_store(
    tmp_path: pathlib.Path, kind: str
) -> None:
    """verify reaches the directory through the platform seam: an I/O error there is an
    error (or an "unreadable" finding), never a clean report of an empty store."""
    from jsonl_sessions.testing.faults import FaultInjector

    store = SessionStore(tmp_path / "s")
    store.append("k", {"role": "user", "content": "hi"})
    with FaultInjector(kind, 1, persistent=True) as injector:
        try:
            report = store.verify()
        except OSError:
            report = None
    assert injector.injected >= 1
    assert report is None or not report.ok
