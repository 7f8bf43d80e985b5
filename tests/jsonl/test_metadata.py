"""Session metadata and lifecycle on JSONL files: names, aliases, context, owner, run
state, TTL cleanup, search and compact/repair. (What every backend must do with metadata,
run state, attribution and search: contract/test_session_metadata.py.)

Each behaviour a user depends on, on real files: setters never create a session, every
change is one atomic sidecar replace that a fresh store reads back, getters take no
lock, listings parse no transcript (checked by instrumenting the platform seam), an
unreadable sidecar never hides a session, search streams transcripts and skips corrupt
lines, compact refuses to destroy what it cannot parse unless asked to repair (and then
keeps a quarantine copy).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pathlib
import threading
import time
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import strategies as st

from jsonl_sessions import (
    ChatMessage,
    CorruptMetadataError,
    CorruptTranscriptError,
    SessionMetadata,
    SessionNotFoundError,
    SessionQuery,
    SessionStore,
    _platform,
    codec,
)
from jsonl_sessions.jsonl import transcript
from jsonl_sessions.testing.faults import FaultInjector as Injector

START_MS = 1_750_000_000_000
HOUR_NS = 3600 * 10**9


class Clock:
    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cstore(tmp_path: pathlib.Path, durability: str, clock: Clock) -> SessionStore:
    """A store on a clock the test controls."""
    return SessionStore(tmp_path / "store", durability=durability, clock=clock)  # type: ignore[arg-type]


def fresh(store: SessionStore) -> SessionStore:
    return SessionStore(store.root)


def path_of(store: SessionStore, key: str, suffix: str) -> str:
    return os.path.join(store.root, key + suffix)  # keys used here are their own stems


def set_mtime(store: SessionStore, key: str, ns: int, *, which: tuple[str, ...] = (".jsonl", ".meta.json")) -> None:
    for suffix in which:
        os.utime(path_of(store, key, suffix), ns=(ns, ns))


def replace_file(path: str | pathlib.Path, data: bytes) -> None:
    """Another tool rewrites a file the way editors do: a new file renamed over it."""
    tmp = pathlib.Path(str(path) + ".edit")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def sidecar_json(store: SessionStore, key: str) -> dict[str, Any]:
    with open(path_of(store, key, ".meta.json"), "rb") as f:
        return json.loads(f.read())  # type: ignore[no-any-return]


def test_setters_keep_unknown_sidecar_fields_and_the_breadcrumb(store: SessionStore) -> None:
    store.append("k", {"role": "user"})
    store.set_session_trim_breadcrumb("k", True)
    meta = sidecar_json(store, "k")
    meta["from_the_future"] = {"x": [1, 2]}
    with open(path_of(store, "k", ".meta.json"), "w") as f:
        json.dump(meta, f)
    store.set_session_name("k", "n")
    after = sidecar_json(store, "k")
    assert after["from_the_future"] == {"x": [1, 2]} and after["name"] == "n"
    assert store.get_session_trim_breadcrumb("k") is True


def test_metadata_counts_messages_appended_by_another_process_and_tool(store: SessionStore, tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    store.append("k", {"role": "user", "content": "one"})
    code = (
        "import sys; from jsonl_sessions import SessionStore; s = SessionStore(sys.argv[1]);"
        "s.append_many('k', [{'role': 'user', 'content': i} for i in range(3)])"
    )
    subprocess.run([sys.executable, "-c", code, store.root], check=True)
    md = store.get_session_metadata("k")
    assert md is not None and md.message_count == 4
    # Another tool appends a line straight to the file.
    line = codec.encode_record(codec.record_of(ChatMessage("user", "raw"), "01ZZZZZZZZZZZZZZZZZZZZZZZZ", 1))
    with open(path_of(store, "k", ".jsonl"), "ab") as f:
        f.write(line)
    md = store.get_session_metadata("k")
    assert md is not None
    assert md.message_count == 5
    assert md.size_bytes == os.path.getsize(path_of(store, "k", ".jsonl"))


def test_updated_at_is_the_newest_of_transcript_and_sidecar_mtime(store: SessionStore) -> None:
    store.append("k", {"role": "user"})
    t0 = 1_600_000_000 * 10**9
    set_mtime(store, "k", t0)
    set_mtime(store, "k", t0 + 7 * 10**9, which=(".jsonl",))  # an append by another tool
    md = store.get_session_metadata("k")
    assert md is not None and md.updated_at == datetime.fromtimestamp(1_600_000_007, tz=timezone.utc)
    set_mtime(store, "k", t0 + 9 * 10**9, which=(".meta.json",))  # a metadata change
    md = store.get_session_metadata("k")
    assert md is not None and md.updated_at == datetime.fromtimestamp(1_600_000_009, tz=timezone.utc)
    assert md.updated_at.tzinfo is timezone.utc


def test_transcript_without_sidecar_has_metadata_from_stats(store: SessionStore) -> None:
    """A transcript dropped in by another tool is a session; what only a sidecar knows is None."""
    store.append("seed", {"role": "user"})
    line = codec.encode_record(codec.record_of(ChatMessage("user", "x"), "01ZZZZZZZZZZZZZZZZZZZZZZZZ", 1))
    pathlib.Path(path_of(store, "other", ".jsonl")).write_bytes(line * 2)
    md = store.get_session_metadata("other")
    assert md is not None
    assert (md.message_count, md.size_bytes, md.created_at, md.name) == (2, 2 * len(line), None, None)
    store.set_session_name("other", "adopted")  # a setter gives it a sidecar
    assert fresh(store).get_session_name("other") == "adopted"


# -- listing parses no transcript -----------------------------------------------------
class ReadSpy:
    """Counts bytes read from transcript files through the platform seam."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.transcript_fds: set[int] = set()
        self.transcript_bytes = 0
        self.sidecar_opens = 0
        real_open, real_pread, real_close = _platform.open_file, _platform.pread, _platform.close

        def open_file(path: str, flags: int, mode: int = 0o600) -> int:
            fd = real_open(path, flags, mode)
            if path.endswith(".jsonl"):
                self.transcript_fds.add(fd)
            elif path.endswith(".meta.json"):
                self.sidecar_opens += 1
            return fd

        def pread(fd: int, size: int, offset: int) -> bytes:
            data = real_pread(fd, size, offset)
            if fd in self.transcript_fds:
                self.transcript_bytes += len(data)
            return data

        def close(fd: int) -> None:
            self.transcript_fds.discard(fd)
            real_close(fd)

        def no_parsing(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a transcript line was parsed")

        monkeypatch.setattr(_platform, "open_file", open_file)
        monkeypatch.setattr(_platform, "pread", pread)
        monkeypatch.setattr(_platform, "close", close)
        monkeypatch.setattr(transcript, "parse", no_parsing)
        monkeypatch.setattr(codec, "decode_record", no_parsing)


def test_listing_2000_sessions_reads_no_transcript(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    n = 2000
    for i in range(n):
        store.append_many(f"s{i:05d}", [{"role": "user", "content": "x" * 100}] * (1 + i % 3))
        if i % 2:
            store.set_session_state(f"s{i:05d}", "running", "t")
            store.set_session_agent_alias(f"s{i:05d}", "bot")
    spy = ReadSpy(monkeypatch)
    for listing in (SessionStore(store.root).list_sessions_with_metadata, store.list_running_sessions,
                    lambda: store.list_stuck_sessions(0)):
        got = listing()
        assert spy.transcript_bytes == 0, "a listing read transcript bytes"
        assert len(got) in (n, n // 2)
    assert store.count_agent_attribution("bot") == n // 2
    assert spy.transcript_bytes == 0
    listed = store.list_sessions_with_metadata()
    assert [m.key for m in listed] == [f"s{i:05d}" for i in range(n)]
    assert [m.message_count for m in listed] == [1 + i % 3 for i in range(n)]
    assert spy.sidecar_opens >= n


# -- unreadable sidecars --------------------------------------------------------------
SETTERS = [
    ("set_session_name", ("chat",)),
    ("set_session_agent_alias", ("bot",)),
    ("set_session_context", ({"a": "b"},)),
    ("set_session_principal", ("alice",)),
    ("set_session_state", ("running", "t1")),
]


@pytest.mark.parametrize("content", [b"{not json", b'{"format": 99, "key": "k"}', b"[]"], ids=["garbage", "newer", "array"])
def test_unreadable_sidecar_never_hides_the_session(
    store: SessionStore, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    store.append("k", {"role": "user", "content": "still here"})
    store.append("ok", {"role": "user"})
    set_mtime(store, "k", 1_000_000_000 * 10**9)  # stale: cleanup must still not delete it
    sidecar = pathlib.Path(path_of(store, "k", ".meta.json"))
    sidecar.write_bytes(content)
    os.utime(sidecar, ns=(10**18, 10**18 - 10**15))
    with pytest.raises(CorruptMetadataError) as info:
        store.get_session_metadata("k")
    if content.startswith(b'{"format": 99'):
        assert "newer" in str(info.value) and "upgrade" in str(info.value)
    with pytest.raises(CorruptMetadataError):
        store.get_session_name("k")
    # The session still loads, lists, and shows up (with the fields the stats give).
    assert [m.content for m in store.load("k")] == ["still here"]
    assert store.list_sessions() == ["k", "ok"]
    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        listed = {m.key: m for m in store.list_sessions_with_metadata()}
    assert listed["k"].message_count == 1 and listed["k"].name is None
    assert "corrupt sidecar" in caplog.text
    # Nothing overwrites it (it may be a newer writer's), nothing deletes the session.
    for method, args in SETTERS:
        with pytest.raises(CorruptMetadataError):
            getattr(store, method)("k", *args)
    with pytest.raises(CorruptMetadataError):
        store.delete_session_owned("k", "alice")
    assert store.cleanup_stale(0) == 1  # "ok" goes (ttl 0); "k" (state unknown) stays
    assert store.list_sessions() == ["k"]
    assert sidecar.read_bytes() == content


# -- ownership -------------------------------------------------------------------------
def test_delete_session_owned_fails_closed(store: SessionStore) -> None:
    store.append("k", {"role": "user"})
    assert store.delete_session_owned("k", "alice") is False  # no recorded owner
    store.set_session_principal("k", "alice")
    assert store.delete_session_owned("k", "bob") is False
    assert store.delete_session_owned("k", "") is False
    assert store.delete_session_owned("k", "ALICE") is False
    assert store.session_exists("k")
    assert store.get_session_metadata("k").principal_id == "alice"  # type: ignore[union-attr]
    store.set_session_principal("k", "bob")  # re-stamped
    assert store.delete_session_owned("k", "alice") is False
    assert store.delete_session_owned("k", "bob") is True
    assert not store.session_exists("k") and store.list_sessions() == []
    assert not os.path.exists(path_of(store, "k", ".meta.json"))
    assert store.delete_session_owned("k", "bob") is False
    # A new session under the same key starts without an owner.
    store.append("k", {"role": "user"})
    assert store.get_session_metadata("k").principal_id is None  # type: ignore[union-attr]
    assert store.delete_session_owned("k", "bob") is False


# -- cleanup_stale ---------------------------------------------------------------------
def test_cleanup_stale(store: SessionStore) -> None:
    now = time.time_ns()
    old = now - 3 * HOUR_NS
    for key in ("stale", "fresh", "running", "appended", "renamed", "error"):
        store.append(key, {"role": "user", "content": key})
        store.set_session_name(key, key)
    store.set_session_state("running", "running", "t")
    store.set_session_state("error", "error", "t")
    for key in ("stale", "running", "appended", "renamed", "error"):
        set_mtime(store, key, old)
    set_mtime(store, "appended", now, which=(".jsonl",))  # appended by another tool
    set_mtime(store, "renamed", now, which=(".meta.json",))  # metadata changed
    assert store.cleanup_stale(4) == 0
    assert store.cleanup_stale(2) == 2
    assert store.list_sessions() == ["appended", "fresh", "renamed", "running"]
    assert not os.path.exists(path_of(store, "stale", ".meta.json"))
    assert store.cleanup_stale(0) == 3  # everything but the running one
    assert store.list_sessions() == ["running"]
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError):
            store.cleanup_stale(bad)
    with pytest.raises(TypeError):
        store.cleanup_stale(None)  # type: ignore[arg-type]


def test_cleanup_stale_skips_a_session_whose_guard_is_held(store: SessionStore) -> None:
    store.append("busy", {"role": "user"})
    set_mtime(store, "busy", time.time_ns() - 3 * HOUR_NS)
    holding = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with store.lock("busy"):
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        holding.wait(10)
        assert store.cleanup_stale(1) == 0
    finally:
        release.set()
        holder.join()
    assert store.cleanup_stale(1) == 1


def test_cleanup_stale_removes_orphan_sidecars_only(store: SessionStore) -> None:
    """A sidecar without a transcript (an interrupted delete) is removed once stale; a
    quarantine copy and files the store does not own are left alone."""
    store.append("gone", {"role": "user"})
    store.append("long" + "x" * 200, {"role": "user"})  # a hashed stem: key read from the sidecar
    stems = [n[: -len(".jsonl")] for n in os.listdir(store.root) if n.endswith(".jsonl")]
    for stem in stems:
        os.unlink(os.path.join(store.root, stem + ".jsonl"))
    pathlib.Path(store.root, "notes.txt").write_text("mine")
    pathlib.Path(store.root, "gone.quarantine-20240101T000000000Z.jsonl.bak").write_text("{}\n")
    assert store.list_sessions() == []
    assert store.cleanup_stale(1) == 0
    assert sorted(n for n in os.listdir(store.root) if n.endswith(".meta.json")) == sorted(s + ".meta.json" for s in stems)
    for stem in stems:
        os.utime(os.path.join(store.root, stem + ".meta.json"), ns=(0, 0))
    assert store.cleanup_stale(1) == 0
    assert sorted(n for n in os.listdir(store.root) if not n.endswith(".lock")) == [
        "gone.quarantine-20240101T000000000Z.jsonl.bak", "notes.txt"]


# -- search ------------------------------------------------------------------------------
def keys_of(results: list[SessionMetadata]) -> list[str]:
    return [m.key for m in results]


def test_search_matches_names_and_message_text(store: SessionStore) -> None:
    store.append("plain", {"role": "user", "content": "The Quick brown fox"})
    store.append("parts", {"role": "user", "content": [{"type": "text", "text": "Deploy to PROD"}, "loose Part",
                                                       {"type": "image", "url": "fox.png"}]})
    store.append("single", {"role": "user", "content": {"type": "text", "text": "single part object"}})
    store.append("named", {"role": "user", "content": "nothing"})
    store.set_session_name("named", "Fox hunting notes")
    store.append("roles", {"role": "foxrole", "content": None, "tool_calls": [{"id": "fox"}]})
    for i, key in enumerate(["plain", "parts", "single", "named", "roles"]):
        set_mtime(store, key, (1_700_000_000 + i) * 10**9)
    assert keys_of(store.search(SessionQuery("fox"))) == ["named", "plain"]  # newest activity first
    assert keys_of(store.search(SessionQuery("prod"))) == ["parts"]
    assert keys_of(store.search(SessionQuery("LOOSE PART"))) == ["parts"]
    assert keys_of(store.search(SessionQuery("part"))) == ["single", "parts"]
    assert keys_of(store.search(SessionQuery("fox", limit=1))) == ["named"]
    assert keys_of(store.search(SessionQuery("fox", limit=0))) == []
    assert keys_of(store.search(SessionQuery("zebra"))) == []
    assert keys_of(store.search(SessionQuery(""))) == ["roles", "named", "single", "parts", "plain"]
    assert keys_of(store.search(SessionQuery("", limit=None))) == keys_of(store.search(SessionQuery("")))
    result = store.search(SessionQuery("quick"))[0]
    assert result.message_count == 1 and result.updated_at == datetime.fromtimestamp(1_700_000_000, tz=timezone.utc)
    with pytest.raises(ValueError):
        store.search(SessionQuery("x", limit=-1))
    with pytest.raises(TypeError):
        store.search("fox")  # type: ignore[arg-type]


def test_search_case_folding_escapes_and_non_ascii(store: SessionStore) -> None:
    store.append("strasse", {"role": "user", "content": "Die Straße"})
    store.append("quote", {"role": "user", "content": 'she said "Hi"\nthen left'})
    store.append("kelvin", {"role": "user", "content": "300 \u212a"})  # KELVIN SIGN folds to "k"
    # A line written by another tool with every non-ASCII character escaped (\u00e9).
    line = json.dumps({"id": "01ZZZZZZZZZZZZZZZZZZZZZZZZ", "created_at": 1, "role": "user", "content": "Caf\u00e9 CR\u00c8ME"},
                      ensure_ascii=True).encode() + b"\n"
    assert b"\\u00e9" in line
    pathlib.Path(path_of(store, "escaped", ".jsonl")).write_bytes(line)
    assert keys_of(store.search(SessionQuery("STRASSE"))) == ["strasse"]
    assert keys_of(store.search(SessionQuery("straße"))) == ["strasse"]
    assert keys_of(store.search(SessionQuery('said "hi"'))) == ["quote"]
    assert keys_of(store.search(SessionQuery('"hi"\nTHEN'))) == ["quote"]
    assert keys_of(store.search(SessionQuery("300 k"))) == ["kelvin"]
    assert keys_of(store.search(SessionQuery("café crème"))) == ["escaped"]
    assert keys_of(store.search(SessionQuery("u00e9"))) == []  # the escape is not the text


def test_search_skips_corrupt_lines_and_torn_tails(store: SessionStore) -> None:
    store.append("k", {"role": "user", "content": "first"})
    with open(path_of(store, "k", ".jsonl"), "ab") as f:
        f.write(b'{"broken needle\n')  # corrupt, mentions the keyword in its bytes
        f.write(b"\n")
    store.append("k", {"role": "user", "content": "after the damage"})
    with open(path_of(store, "k", ".jsonl"), "ab") as f:
        f.write(b'{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","role":"user","content":"torn needle"}')
    assert keys_of(store.search(SessionQuery("needle"))) == []
    assert keys_of(store.search(SessionQuery("damage"))) == ["k"]


def test_search_streams_long_transcripts_in_bounded_blocks(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines longer than a block and lines crossing block boundaries are found; no read
    of a transcript asks for more than one block."""
    big = "y" * (3 << 20)
    store.append_many("k", [{"role": "user", "content": f"filler {i} " + "z" * 70_000} for i in range(40)])
    store.append("k", {"role": "user", "content": big + " NEEDLE in a haystack"})
    store.append("k", {"role": "user", "content": "small tail"})
    sizes: list[int] = []
    real = _platform.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        sizes.append(size)
        return real(fd, size, offset)

    monkeypatch.setattr(_platform, "pread", pread)
    assert keys_of(store.search(SessionQuery("needle in a"))) == ["k"]
    assert keys_of(store.search(SessionQuery("filler 39 zzz"))) == ["k"]
    assert keys_of(store.search(SessionQuery("small tail"))) == ["k"]
    assert keys_of(store.search(SessionQuery("not there"))) == []
    assert max(sizes) <= 1 << 20


texts = st.text(alphabet=st.sampled_from(list('abcABC \n"\\\u00df\u1e9e\u212a\u0130\u00e9e\u0301\U0001f600{}:,')), max_size=30)


# -- compact / repair --------------------------------------------------------------------
def lines_of(store: SessionStore, key: str) -> list[bytes]:
    return pathlib.Path(path_of(store, key, ".jsonl")).read_bytes().splitlines(keepends=True)


def quarantines(store: SessionStore) -> list[str]:
    return sorted(n for n in os.listdir(store.root) if ".quarantine-" in n)


def test_compact_of_a_clean_transcript_changes_nothing(store: SessionStore) -> None:
    store.append_many("k", [{"role": "user", "content": i} for i in range(3)])
    path = pathlib.Path(path_of(store, "k", ".jsonl"))
    before, ino = path.read_bytes(), path.stat().st_ino
    assert store.compact("k") == 0
    assert store.compact("k", repair=True) == 0
    assert path.read_bytes() == before and path.stat().st_ino == ino, "nothing to drop: not rewritten"
    assert quarantines(store) == []
    with pytest.raises(SessionNotFoundError):
        store.compact("ghost")


def test_compact_drops_torn_tail_bom_and_exact_duplicates(store: SessionStore) -> None:
    store.append_many("k", [{"role": "user", "content": i} for i in range(3)])
    lines = lines_of(store, "k")
    path = pathlib.Path(path_of(store, "k", ".jsonl"))
    replace_file(path, b"\xef\xbb\xbf" + lines[0] + lines[1] + lines[0] + lines[2] + lines[1] + b'{"id":"torn')
    assert store.get_session_metadata("k").message_count == 5  # type: ignore[union-attr]
    assert store.compact("k") == 2
    assert path.read_bytes() == b"".join(lines)
    assert [m.content for m in fresh(store).try_load("k")] == [0, 1, 2]
    assert store.get_session_metadata("k").message_count == 3  # type: ignore[union-attr]
    assert [pathlib.Path(store.root, n).read_bytes() for n in quarantines(store)] == [b'{"id":"torn']
    store.append("k", {"role": "user", "content": 3})
    assert [m.content for m in store.try_load("k")] == [0, 1, 2, 3]


def test_compact_refuses_corruption_and_repair_quarantines_first(cstore: SessionStore, clock: Clock) -> None:
    cstore.append_many("k", [{"role": "user", "content": i} for i in range(3)])
    cstore.set_session_name("k", "kept")
    lines = lines_of(cstore, "k")
    path = pathlib.Path(path_of(cstore, "k", ".jsonl"))
    original = lines[0] + b"garbage\n" + lines[1] + lines[0] + b"\n" + lines[2] + b'{"torn'
    replace_file(path, original)
    with pytest.raises(CorruptTranscriptError) as info:
        cstore.compact("k")
    assert (info.value.line, info.value.offset) == (2, len(lines[0]))
    assert path.read_bytes() == original and quarantines(cstore) == []
    clock.now = 1_718_000_000_123  # 2024-06-10T06:13:20.123Z
    assert cstore.compact("k", repair=True) == 3  # garbage, the duplicate, the empty line
    name = "k.quarantine-20240610T061320123Z.jsonl.bak"
    assert quarantines(cstore) == [name]
    assert pathlib.Path(cstore.root, name).read_bytes() == original
    assert oct(os.stat(os.path.join(cstore.root, name)).st_mode & 0o777) == "0o600"
    assert path.read_bytes() == b"".join(lines)
    assert cstore.list_sessions() == ["k"], "a quarantine file is never a session"
    assert cstore.get_session_name("k") == "kept"
    assert [m.content for m in cstore.try_load("k")] == [0, 1, 2]
    # A second repair in the same millisecond gets its own file.
    replace_file(path, original)
    assert cstore.compact("k", repair=True) == 3
    assert quarantines(cstore) == sorted([name, "k.quarantine-20240610T061320123Z-1.jsonl.bak"])


def test_compact_refuses_same_id_with_different_bytes(store: SessionStore) -> None:
    store.append_many("k", [{"role": "user", "content": i} for i in range(2)])
    lines = lines_of(store, "k")
    record = json.loads(lines[0])
    record["content"] = "rewritten"
    changed = json.dumps(record, separators=(",", ":")).encode() + b"\n"
    path = pathlib.Path(path_of(store, "k", ".jsonl"))
    replace_file(path, lines[0] + lines[1] + changed)
    with pytest.raises(CorruptTranscriptError) as info:
        store.compact("k")
    assert info.value.line == 3 and "already used" in str(info.value)
    assert store.compact("k", repair=True) == 0  # nothing dropped: the other line is renumbered
    got = path.read_bytes().splitlines(keepends=True)
    assert got[:2] == lines[:2] and len(got) == 3
    renumbered = json.loads(got[2])
    assert renumbered["original_id"] == record["id"] and renumbered["id"] > json.loads(lines[1])["id"]
    assert {k: v for k, v in renumbered.items() if k not in ("id", "original_id")} == \
        {k: v for k, v in record.items() if k != "id"}
    assert [m.content for m in store.try_load("k")] == [0, 1, "rewritten"]
    assert len(quarantines(store)) == 1


def test_compact_interrupted_by_an_io_error_leaves_the_transcript(store: SessionStore) -> None:
    store.append_many("k", [{"role": "user", "content": i} for i in range(3)])
    path = pathlib.Path(path_of(store, "k", ".jsonl"))
    original = b"".join(lines_of(store, "k")) + b"junk\n"
    replace_file(path, original)
    with Injector("replace", 1) as inj, pytest.raises(OSError):
        store.compact("k", repair=True)
    assert inj.injected == 1
    assert path.read_bytes() == original
    assert len(quarantines(store)) == 1, "the quarantine copy is made before the rewrite"
    assert [n for n in os.listdir(store.root) if n.endswith(".tmp")] == []
    assert store.compact("k", repair=True) == 1
    assert [m.content for m in store.try_load("k")] == [0, 1, 2]


QUARANTINE_FAULTS = [("open_file", 2), ("write", 1), ("fsync", 1), ("fsync_dir", 1)]


@pytest.mark.parametrize(("kind", "nth"), QUARANTINE_FAULTS, ids=[k for k, _ in QUARANTINE_FAULTS])
def test_repair_without_its_quarantine_copy_changes_nothing(store: SessionStore, kind: str, nth: int) -> None:
    """The n-th call is the quarantine copy's (after the transcript was read under the guard)."""
    store.append("k", {"role": "user"})
    path = pathlib.Path(path_of(store, "k", ".jsonl"))
    original = path.read_bytes() + b"junk\n"
    replace_file(path, original)
    with store.lock("k"), Injector(kind, nth) as inj, pytest.raises(OSError):
        store.compact("k", repair=True)
    assert inj.injected == 1
    assert path.read_bytes() == original
    assert quarantines(store) == []


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "from-then-on"])
def test_cleanup_stale_never_takes_an_lstat_error_for_a_missing_transcript(store: SessionStore,
                                                                           persistent: bool) -> None:
    """A live (running) session with an old sidecar: for every lstat of its transcript that
    ``cleanup_stale`` makes, an I/O error there makes the sweep raise or skip it; the
    sidecar of a session whose transcript could not be checked is never deleted as an
    orphan."""
    store.append("live", {"role": "user", "content": "still here"})
    store.set_session_state("live", "running", "t")
    set_mtime(store, "live", time.time_ns() - 3 * HOUR_NS)
    transcript, sidecar = path_of(store, "live", ".jsonl"), path_of(store, "live", ".meta.json")
    kept = pathlib.Path(sidecar).read_bytes()

    def on_transcript(kind: str, args: tuple[Any, ...]) -> bool:
        return bool(args[0] == transcript)

    with Injector("lstat", 1 << 30, match=on_transcript) as counting:  # never fails: counts the checks
        assert store.cleanup_stale(1) == 0
    assert counting.calls >= 2, "cleanup_stale checks the transcript without going through the seam"
    for n in range(1, counting.calls + 1):
        with Injector("lstat", n, persistent=persistent, match=on_transcript) as injector:
            try:
                store.cleanup_stale(1)
            except OSError as exc:
                assert exc.errno == errno.EIO
        assert injector.injected >= 1
        assert pathlib.Path(sidecar).read_bytes() == kept, f"the sidecar went with an error at lstat {n}"
        assert store.get_session_metadata("live").state == "running"  # type: ignore[union-attr]
