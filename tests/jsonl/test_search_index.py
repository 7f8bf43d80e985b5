"""The full-text index of a JSONL store (``.search-index.sqlite3``): kept current from each
session's high-water mark, rebuilt when damaged, never a session, usable after a SIGKILL in
the middle of an update, and always answering what the scan answers."""

from __future__ import annotations

import os
import pathlib
import pwd
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import pytest
from sigkill import ENV

from jsonl_sessions import SessionStore
from jsonl_sessions.jsonl import ftsindex
from jsonl_sessions.searchindex import build_index, drop_index, index_status

TEXTS = ["Die Straße ist gesperrt", "\x1b[31mERROR\x1b[0m: build failed in 3.2s", "the deploy of café.py worked",
         "日本語のテキスト deploy", "nothing to see \U0001f642"]


def _scan(store: SessionStore, text: str, **kw: object) -> object:
    """The answer without the index (moved aside for the call)."""
    path = ftsindex.path_of(store.root)
    aside = path + ".aside"
    had = os.path.exists(path)
    if had:
        os.rename(path, aside)
    try:
        return store.search_messages(text, limit=500, **kw)  # type: ignore[arg-type]
    finally:
        if had:
            os.rename(aside, path)


def _same(store: SessionStore, *queries: str) -> None:
    for q in queries:
        assert store.search_messages(q, limit=500) == _scan(store, q)


def _rows(store: SessionStore) -> list[tuple[int, str, int]]:
    conn = sqlite3.connect(ftsindex.path_of(store.root))
    try:
        return list(conn.execute("SELECT l.id, s.key, l.position FROM lines l JOIN sessions s ON s.id = l.session "
                                 "ORDER BY l.id"))
    finally:
        conn.close()


@pytest.fixture
def store(tmp_path: pathlib.Path) -> SessionStore:
    s = SessionStore(tmp_path / "store", durability="flush")
    for i, key in enumerate(["a", "b", "c"]):
        s.append_many(key, [{"role": "user" if j % 2 else "assistant", "content": TEXTS[(i + j) % len(TEXTS)]}
                            for j in range(6)])
    return s


def test_the_index_answers_as_the_scan_and_is_used_when_it_exists(store: SessionStore) -> None:
    assert not index_status(store).exists
    status = build_index(store)
    assert status.exists and status.entries == 18 and status.stale_sessions == 0
    assert (os.stat(ftsindex.path_of(store.root)).st_mode & 0o777) == 0o600
    _same(store, "strasse", "DEPLOY", '"build failed"', "error", "日本語", "py", "")
    assert store.list_sessions() == ["a", "b", "c"]  # the index file is never a session
    assert not store.verify().problems
    # the answer comes from the index: one that disagrees with the transcripts shows in the answer
    conn = sqlite3.connect(ftsindex.path_of(store.root))
    conn.execute("INSERT INTO texts (texts) VALUES ('delete-all')")
    conn.commit()
    conn.close()
    assert store.search_messages("strasse").hits == []
    assert drop_index(store) and not index_status(store).exists
    assert len(store.search_messages("strasse").hits) == 4


def test_appends_are_indexed_from_the_mark_and_rewrites_index_the_session_again(store: SessionStore) -> None:
    build_index(store)
    before = _rows(store)
    store.append("a", {"role": "user", "content": "a fresh Straße"})
    _same(store, "strasse", "fresh")
    after = _rows(store)
    assert set(before) < set(after)  # the rows indexed before are kept as they were
    assert [(key, pos) for _id, key, pos in set(after) - set(before)] == [("a", 6)]  # only the new line
    store.update_last("b", {"role": "user", "content": "replaced straße"})  # a tail rewrite in place
    _same(store, "strasse", "replaced", "nothing")
    store.remove_last("c")  # a truncation
    _same(store, "strasse", "nothing", "deploy")
    store.rewrite_messages("a", [{"role": "user", "content": "only this deploy"}])  # a new file
    _same(store, "deploy", "strasse")
    store.delete_session("b")
    store.append("b", {"role": "user", "content": "recreated"})  # the same key, a new transcript
    _same(store, "strasse", "recreated", "deploy")
    assert {key for _id, key, _pos in _rows(store)} == {"a", "b", "c"}
    store.delete_session("c")
    _same(store, "deploy")
    assert {key for _id, key, _pos in _rows(store)} == {"a", "b"}  # a deleted session leaves the index


def test_a_changed_session_keeps_the_rows_of_the_lines_still_in_place(store: SessionStore) -> None:
    # the index holds where each line is, not a copy: a session changed in place is read again
    # and the lines at the same offset with the same bytes keep their rows
    build_index(store)
    before = {row for row in _rows(store) if row[1] == "b"}
    store.update_last("b", {"role": "user", "content": "replaced straße"})
    _same(store, "strasse", "replaced", "nothing")
    after = {row for row in _rows(store) if row[1] == "b"}
    assert len(before) == len(after) == 6
    assert len(before & after) == 5  # one line changed: one new row, the other five kept
    assert ftsindex.status(store._root).dead == 1
    store.remove_last("b")
    _same(store, "strasse", "replaced", "nothing")
    assert {row for row in _rows(store) if row[1] == "b"} == before & after
    assert ftsindex.status(store._root).dead == 2
    # dead rows stay out of answers, and in the file until a rebuild (a build never replaces it)
    store.rewrite_messages("c", [{"role": "user", "content": "deploy"}])
    assert ftsindex.status(store._root).dead == 2  # not seen yet
    _same(store, "deploy", "strasse")
    assert index_status(store).dead_entries == 8
    assert build_index(store).dead_entries == 8
    status = build_index(store, rebuild=True)
    assert status.dead_entries == 0 and status.entries == 6 + 5 + 1
    _same(store, "deploy", "strasse", "replaced")


def test_an_index_of_an_earlier_version_is_made_anew(store: SessionStore, caplog: pytest.LogCaptureFixture) -> None:
    build_index(store)
    ftsindex.close_connections()
    conn = sqlite3.connect(ftsindex.path_of(store.root))
    conn.execute(f"PRAGMA user_version = {ftsindex.VERSION - 1}")
    conn.execute("INSERT INTO texts (texts) VALUES ('delete-all')")  # it would answer nothing
    conn.commit()
    conn.close()
    _same(store, "strasse", "deploy")
    assert "not a search index of this version" in caplog.text
    assert index_status(store).entries == 18


def test_a_line_changed_behind_the_stores_back_after_it_was_indexed_is_never_answered(
        store: SessionStore, caplog: pytest.LogCaptureFixture) -> None:
    # edited in place by another program, with the same length, size and time: the mark holds
    # (the counter did not move), but the line read is checked against its digest
    build_index(store)
    assert len(store.search_messages("strasse").hits) == 4
    transcript = os.path.join(store.root, "a.jsonl")
    st = os.stat(transcript)
    with open(transcript, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(data.replace("Straße".encode(), b"STRASSE"))  # as many bytes
    os.utime(transcript, ns=(st.st_atime_ns, st.st_mtime_ns))
    hits = store.search_messages("strasse", limit=500)
    assert hits == _scan(store, "strasse") and any("STRASSE" in h.snippet for h in hits.hits)
    assert "kept changing" in caplog.text


def test_a_change_of_the_same_size_within_one_clock_tick_is_seen(store: SessionStore) -> None:
    # update_last with a message of the same length: size (and maybe mtime) unchanged, the
    # control counter moved
    store.append("d", {"role": "user", "content": "version A of it", "created_at": 1})
    build_index(store)
    assert len(store.search_messages("version a").hits) == 1
    transcript = os.path.join(store.root, "d.jsonl")
    before = os.stat(transcript)
    store.update_last("d", {"role": "user", "content": "version B of it", "created_at": 1})
    os.utime(transcript, ns=(before.st_atime_ns, before.st_mtime_ns))  # as if in the same clock tick
    assert os.stat(transcript).st_size == before.st_size
    assert len(store.search_messages("version a").hits) == 0
    assert len(store.search_messages("version b").hits) == 1


def test_a_damaged_or_foreign_index_file_is_made_anew(store: SessionStore, caplog: pytest.LogCaptureFixture) -> None:
    build_index(store)
    path = ftsindex.path_of(store.root)
    for damage in (b"not a database at all" * 100, None):
        ftsindex.close_connections()  # damaged while no one had it open
        if damage is None:  # a valid SQLite file of another application
            os.unlink(path)
            conn = sqlite3.connect(path)
            conn.execute("CREATE TABLE other (x)")
            conn.commit()
            conn.close()
        else:
            with open(path, "r+b") as f:
                f.write(damage)
        for name in (path + "-wal", path + "-shm"):
            if os.path.exists(name):
                os.unlink(name)
        _same(store, "strasse", "deploy")
        assert index_status(store).entries == 18
    assert "made anew" in caplog.text or "built again" in caplog.text


def test_a_search_with_only_short_terms_scans(store: SessionStore) -> None:
    build_index(store)
    _same(store, "py", "s", '"日本"', "ß")


def test_a_torn_tail_is_never_indexed(store: SessionStore) -> None:
    build_index(store)
    transcript = os.path.join(store.root, "a.jsonl")
    with open(transcript, "ab") as f:
        f.write(b'{"id":"zzzz","created_at":5,"role":"user","kind":"message","content":"torn stra\xc3\x9fe')
    _same(store, "torn", "strasse")
    assert not store.search_messages("torn").hits


_WORKER = """
import sys
from jsonl_sessions import SessionStore
from jsonl_sessions.searchindex import build_index
store = SessionStore(sys.argv[1], durability="flush")
print("start", flush=True)
build_index(store)
print("done", flush=True)
"""


def _kill_while(store: SessionStore, rng: random.Random, written: Callable[[], bool]) -> bool:
    """Run a build in a subprocess and SIGKILL it at a random moment once ``written()``;
    whether it was killed before it finished."""
    proc = subprocess.Popen([sys.executable, "-c", _WORKER, store.root], stdout=subprocess.PIPE, env=ENV)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"start\n"
    deadline = time.monotonic() + 30
    while not written() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.001)
    time.sleep(rng.uniform(0, 0.05))
    proc.send_signal(signal.SIGKILL)
    out = proc.stdout.read()
    proc.wait()
    proc.stdout.close()
    return proc.returncode == -signal.SIGKILL and b"done" not in out


def _builds(store: SessionStore) -> list[str]:
    return [n for n in os.listdir(store.root) if n.startswith(ftsindex.INDEX_NAME + ".build-")]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_build_killed_midway_leaves_the_old_index_or_none(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    rng = random.Random(int(os.environ.get("JSONL_SESSIONS_SEED", "7")))
    for i in range(40):
        store.append_many(f"s{i}", [{"role": "user", "content": f"{rng.choice(TEXTS)} number {i} {j} Straße"}
                                    for j in range(120)])
    path = ftsindex.path_of(store.root)
    killed = 0
    for trial in range(3):
        # a build from nothing writes a file of its own, moved into place once complete
        ftsindex.drop(store._root)
        killed += _kill_while(store, rng, lambda: bool(_builds(store)))
        if os.path.exists(path):  # killed after the move: complete
            assert index_status(store).stale_sessions == 0
        _same(store, "strasse", f"number {trial}", "deploy")  # with the index or by a scan
        store.append(f"s{trial}", {"role": "user", "content": f"after kill {trial}"})
    assert killed >= 2, "the builds finished before they were killed: make the store bigger"
    for name in _builds(store):  # a killed build's file, removed by a build once it is old
        os.utime(os.path.join(store.root, name), ns=(0, 0))
    status = build_index(store)
    assert status.exists and status.stale_sessions == 0 and status.entries == 40 * 120 + 3
    assert _builds(store) == []
    # an index being brought up to date in place (per-session transactions) killed midway: usable as it is
    killed = 0
    for trial in range(3):
        for i in range(40):
            store.rewrite_messages(f"s{i}", [{"role": "user", "content": f"update {trial} of {i} {j} Straße"}
                                             for j in range(120)])
        ftsindex.close_connections()  # the WAL file is the worker's: it shows when the worker writes
        killed += _kill_while(store, rng, lambda: os.path.exists(path + "-wal"))
        assert index_status(store).exists
        _same(store, "strasse", f"update {trial}", "deploy")
        assert index_status(store).stale_sessions == 0
    assert killed >= 2, "the updates finished before they were killed: make the store bigger"
    # the rows of rewritten lines are dead, until a rebuild
    assert index_status(store).dead_entries >= 2 * 40 * 120
    status = build_index(store, rebuild=True)
    assert status.exists and status.stale_sessions == 0 and status.entries == 40 * 120
    assert status.dead_entries == 0
    _same(store, "update 2", "strasse", "update 1")


def test_pages_through_ties_and_times_the_row_ids_cannot_order(tmp_path: pathlib.Path) -> None:
    # the index streams candidates by row id (which follows created_at) and stops early:
    # ties of created_at across sessions, times past its range and before 1970 must not end a page early
    store = SessionStore(tmp_path / "store", durability="flush")
    times = [7, 7, 7, 2**60, 2**60 + 1, -3, 7, 0, 2**64 - 1]
    for i, key in enumerate("edcba"):
        store.append_many(key, [{"role": "user", "content": f"deploy {i} {j}", "created_at": times[(i + j) % 9]}
                                for j in range(4)])
    build_index(store)
    for limit in (1, 2, 3, 5):
        pages, cursor = [], None
        while True:
            page = store.search_messages("deploy", limit=limit, cursor=cursor)
            pages.append(page)
            cursor = page.cursor
            if cursor is None:
                break
        assert [h for p in pages for h in p.hits] == _scan(store, "deploy").hits  # type: ignore[attr-defined]


@pytest.mark.skipif(sys.platform == "win32", reason="fork and file modes")
def test_an_index_this_process_cannot_write_is_left_alone_and_the_scan_answers() -> None:
    # a forked child that may read the store but not write its index (as nobody when root)
    parent = tempfile.mkdtemp()
    os.chmod(parent, 0o755)  # the child must reach the store
    try:
        store = SessionStore(os.path.join(parent, "store"), durability="flush")
        store.append_many("a", [{"role": "user", "content": t} for t in TEXTS * 2])
        build_index(store)
        store.append("a", {"role": "user", "content": "new Straße"})  # the index must be brought up to date
        ftsindex.close_connections()
        path = ftsindex.path_of(store.root)
        nobody = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
        if nobody is not None:
            for dirpath, _dirs, files in os.walk(store.root):
                for name in [dirpath, *(os.path.join(dirpath, f) for f in files)]:
                    os.chown(name, nobody.pw_uid, nobody.pw_gid)
            os.chown(path, 0, 0)
        os.chmod(path, 0o444)
        pid = os.fork()
        if pid == 0:  # the child: no pytest machinery from here on
            code = 1
            try:
                if nobody is not None:
                    os.setgroups([])
                    os.setgid(nobody.pw_gid)
                    os.setuid(nobody.pw_uid)
                hits = SessionStore(store.root, durability="flush").search_messages("strasse", limit=100).hits
                code = 0 if len(hits) == 3 else 2
            except BaseException as exc:  # noqa: BLE001 - reported by the exit status
                sys.stderr.write(f"child failed: {exc!r}\n")
            finally:
                os._exit(code)
        assert os.waitpid(pid, 0)[1] == 0
        assert os.path.exists(path)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_a_search_reads_its_candidates_lines_and_a_build_reads_each_transcript_once(tmp_path: pathlib.Path) -> None:
    from syscalls import SyscallProbe

    store = SessionStore(tmp_path / "store", durability="flush")
    for i in range(20):
        store.append_many(f"s{i}", [{"role": "user", "content": f"line {j} of session {i} " + "filler " * 20,
                                     "created_at": 1_000_000 * i + j} for j in range(100)])
    store.append("s7", {"role": "user", "content": "a XYLOPHONIST here", "created_at": 7_000_050})
    size = 0
    for i in range(20):  # changed long before the index looks at them: trusted by their look
        transcript = os.path.join(store.root, f"s{i}.jsonl")
        size += os.path.getsize(transcript)
        os.utime(transcript, ns=(time.time_ns() - 3600 * 10**9,) * 2)
    with SyscallProbe() as built:
        build_index(store)
    # each transcript read once, in blocks (plus the last bytes before each end, for the mark)
    assert size <= sum(built.read_sizes) <= size + 20 * (64 + 4096)
    os.utime(store.root, ns=(time.time_ns() - 3600 * 10**9,) * 2)  # no session made or removed lately
    store.search_messages("xylophonist")  # the index and the listing kept, as by a long-lived process
    with SyscallProbe() as searched:
        hits = store.search_messages("xylophonist").hits
    assert len(hits) == 1
    # the directory unchanged since the last search: not listed again (one stat), each session an lstat
    assert searched.seam["scandir"] == 0 and searched.seam["stat_of"] == 1 and searched.seam["lstat"] == 20
    store.append("new", {"role": "user", "content": "another xylophonist"})  # the directory changed
    assert len(store.search_messages("xylophonist").hits) == 2
    os.utime(store.root, ns=(time.time_ns() - 3600 * 10**9,) * 2)
    assert len(store.search_messages("xylophonist").hits) == 2
    store.delete_session("new")
    assert len(store.search_messages("xylophonist").hits) == 1
    os.utime(store.root, ns=(time.time_ns() - 3600 * 10**9,) * 2)
    store.search_messages("xylophonist")
    with SyscallProbe() as searched:
        hits = store.search_messages("xylophonist").hits
    assert len(hits) == 1
    # one candidate: one pread of its line, and the control file read once to check the counter
    assert searched.seam["pread"] == 2 and sum(searched.read_sizes) < 200, searched.read_sizes
    with SyscallProbe() as paged:
        page = store.search_messages("filler", limit=5)
    # newest first: the search stops once its page is full, after a few candidates
    assert len(page.hits) == 5 and paged.seam["pread"] <= 5 + 3
