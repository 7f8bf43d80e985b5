"""The shape of the costs at scale, checked structurally (module imports, bytes held, system
calls per session, lines decoded), never by timing: what ``benchmarks/scale.py`` measures."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from itertools import accumulate
from types import FrameType

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from syscalls import SyscallProbe

from jsonl_sessions import (
    ChatMessage,
    CorruptTranscriptError,
    SessionMetadata,
    SessionQuery,
    SessionStore,
    codec,
    ids,
    records,
    sidecar,
)
from jsonl_sessions.jsonl import search, transcript
from jsonl_sessions.jsonl.lines import BOM, CHUNK_BYTES
from jsonl_sessions.keys import key_to_stem
from jsonl_sessions.types import from_record


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_package_does_not_import_asyncio() -> None:
    out = run_python(
        "import sys, jsonl_sessions\n"
        "print(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('asyncio.')))\n"
        "store = jsonl_sessions.SessionStore\n"
        "print('asyncio' in sys.modules)\n"
        "from jsonl_sessions import AsyncSessionStore, AsyncSessionBackend, SessionBackend\n"
        "print('asyncio' in sys.modules, AsyncSessionStore.__name__, AsyncSessionBackend.__name__,"
        " SessionBackend.__name__)\n"
    )
    lines = out.splitlines()
    assert lines[0] == "[]"
    assert lines[1] == "False"
    assert lines[2] == "True AsyncSessionStore AsyncSessionBackend SessionBackend"


def test_the_lazy_names_are_the_real_ones_and_unknown_names_raise() -> None:
    import jsonl_sessions
    from jsonl_sessions import aio, protocol

    assert jsonl_sessions.AsyncSessionStore is aio.AsyncSessionStore
    assert jsonl_sessions.SessionBackend is protocol.SessionBackend
    assert jsonl_sessions.AsyncSessionBackend is protocol.AsyncSessionBackend
    assert set(jsonl_sessions.__all__) <= set(dir(jsonl_sessions)) | {"AsyncSessionStore", "SessionBackend",
                                                                       "AsyncSessionBackend"}
    try:
        jsonl_sessions.NoSuchName  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")


# -- try_load / load: streamed in bounded blocks ------------------------------------------
def _session_of(tmp_path: pathlib.Path, n: int, text: str) -> tuple[SessionStore, pathlib.Path]:
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    store.rewrite_messages("k", [ChatMessage("user", f"{i} {text}") for i in range(n)])
    path = tmp_path / "store" / (key_to_stem("k") + ".jsonl")
    return store, path


@pytest.mark.parametrize("strict", [True, False])
def test_loading_a_large_transcript_reads_it_in_bounded_blocks(tmp_path: pathlib.Path, strict: bool) -> None:
    store, path = _session_of(tmp_path, 3000, "x" * 1200)
    size = path.stat().st_size
    assert size > 3 * CHUNK_BYTES

    with SyscallProbe() as p:
        got = store.try_load("k") if strict else store.load("k")

    assert [m.content for m in got] == [f"{i} {'x' * 1200}" for i in range(3000)]
    assert max(p.read_sizes) <= CHUNK_BYTES  # never the whole file in one buffer
    assert sum(p.read_sizes) < size + 64 * 1024  # each byte read once (plus the control file's head)


def test_corrupt_lines_past_the_first_block_keep_their_line_and_offset(tmp_path: pathlib.Path) -> None:
    store, path = _session_of(tmp_path, 3000, "y" * 1200)
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    bad_at = 2500  # 0-based index of the line made corrupt, well past the first 1 MiB
    offset = sum(map(len, lines[:bad_at]))
    long_line = lines[10].rstrip(b"\n")[:-1] + b', "pad":"' + b"z" * (3 * CHUNK_BYTES) + b'"}\n'
    lines[bad_at] = b'{"id": broken\n'
    lines[10] = long_line  # a line longer than a block, before the corrupt one
    offset += len(long_line) - len(data.splitlines(keepends=True)[10])
    path.write_bytes(lines_bytes := b"".join(lines) + b'{"id":"torn')

    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load("k")
    assert (info.value.line, info.value.offset) == (bad_at + 1, offset)
    assert lines_bytes[offset:].startswith(b'{"id": broken\n')
    loaded = store.load("k")
    assert len(loaded) == 2999 and loaded[10].extra["pad"] == "z" * (3 * CHUNK_BYTES)


_LINE = st.one_of(
    st.builds(lambda i, t: orjson.dumps({"id": f"{i:04d}", "created_at": 1, "role": "user", "kind": "message",
                                         "content": t}), st.integers(0, 9999), st.text(max_size=30)),
    st.sampled_from([b"", b"garbage", b"[1,2]", b'{"id":1}', b'{"role":"user"}', b"\xff\xfe", b"\r", b"{}"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(_LINE, max_size=12), bom=st.booleans(), torn=st.binary(max_size=20).filter(lambda b: b"\n" not in b),
       block=st.integers(1, 64))
def test_streamed_parse_equals_the_whole_buffer_parse(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes],
                                                      bom: bool, torn: bytes, block: int) -> None:
    data = (BOM if bom else b"") + b"".join(line + b"\n" for line in lines) + torn
    path = tmp_path_factory.mktemp("p") / "t.jsonl"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for strict in (False, True):
            try:
                want: object = transcript.parse(data, strict=strict, key="k", path="p")
            except CorruptTranscriptError as exc:
                want = (exc.line, exc.offset, exc.reason)
            try:
                got: object = transcript.parse_file(fd, len(data), strict=strict, key="k", path="p", block=block)
            except CorruptTranscriptError as exc:
                got = (exc.line, exc.offset, exc.reason)
            assert got == want
    finally:
        os.close(fd)


# -- list_sessions_with_metadata: system calls per session, whatever the transcripts hold ---
def _listing_syscalls(root: pathlib.Path, n: int, messages: int) -> dict[str, int]:
    """The system calls of a listing of ``n`` sessions of ``messages`` messages each."""
    store = SessionStore(str(root), durability="flush")
    for i in range(n):
        store.append_many(f"s{i}", [ChatMessage("user", f"hello {j}") for j in range(messages)])
        store.set_session_name(f"s{i}", f"name {i}")
        store.get_message_count(f"s{i}")  # the count cache now describes each transcript
    want = store.list_sessions_with_metadata()
    with SyscallProbe() as p:
        got = store.list_sessions_with_metadata()
    assert got == want and [m.message_count for m in got] == [messages] * n
    assert [m.name for m in got] == [f"name {i}" for i in sorted(range(n), key=lambda i: f"s{i}")]
    assert p.os["fcntl.flock"] == 0 and p.os["fcntl.fcntl"] == 0 and p.seam["try_lock"] == 0, "a listing locked"
    return {name: count for name, count in {**p.os, **{f"seam {k}": v for k, v in p.seam.items()}}.items() if count}


def test_listing_system_calls_grow_with_sessions_not_with_their_length(tmp_path: pathlib.Path) -> None:
    """O(1) per session in its transcript's length (the same calls for 1 and for 2,000
    messages a session), O(n) in sessions (twice the sessions: at most twice the calls)."""
    short = _listing_syscalls(tmp_path / "short", 10, 1)
    long = _listing_syscalls(tmp_path / "long", 10, 2000)
    assert long == short, "a listing's system calls depend on how long the transcripts are"
    double = _listing_syscalls(tmp_path / "double", 20, 1)
    assert sum(double.values()) <= 2 * sum(short.values()) + 4, (short, double)


def test_a_sidebar_page_reads_the_sidecars_and_counts_of_its_sessions_only(tmp_path: pathlib.Path) -> None:
    """By updated_at with a limit: two lstat a session give the order, and only the page
    (and the one session after it, for the cursor) is opened; by key, not even the lstat."""
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    n, limit = 30, 5
    for i in range(n):
        store.append(f"s{i:02}", ChatMessage("user", "hello"))
        store.set_session_name(f"s{i:02}", f"name {i}")
        store.get_message_count(f"s{i:02}")
    newest = store.list_sessions_with_metadata(sort="updated_at", descending=True)
    for arguments, stats in (({"sort": "updated_at", "descending": True}, 2 * n), ({}, 0)):
        with SyscallProbe() as p:
            got = store.list_sessions_with_metadata(limit=limit, **arguments)
        assert got == (newest[:limit] if arguments else store.list_sessions_with_metadata()[:limit])
        assert p.os["os.open"] == 2 * (limit + 1), p.os  # sidecar and control file of each looked at
        assert p.os["os.lstat"] == stats + limit + 1, p.os  # (a look: the transcript's lstat)
        assert p.os["fcntl.flock"] == 0 and p.os["fcntl.fcntl"] == 0, p.os


def test_a_stale_count_cache_still_gives_the_exact_count_in_a_listing(tmp_path: pathlib.Path) -> None:
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    store.append("k", ChatMessage("user", "one"))
    assert store.list_sessions_with_metadata()[0].message_count == 1
    path = tmp_path / "store" / (key_to_stem("k") + ".jsonl")
    line = path.read_bytes()
    with open(path, "ab") as f:  # another writer's line the cache does not know about
        f.write(line.replace(b'"one"', b'"two"').replace(line[7:33], b"Z" * 26))
    assert [m.message_count for m in store.list_sessions_with_metadata()] == [2]



def _python_calls_during(op: Callable[[], object]) -> tuple[object, int]:
    """``op()`` and how many Python functions it called (a profile hook: nothing is patched)."""
    calls = 0

    def hook(_frame: FrameType, event: str, _arg: object) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(hook)
    try:
        result = op()
    finally:
        sys.setprofile(None)
    return result, calls


def _listing_python_calls(root: pathlib.Path, n: int, messages: int) -> int:
    store = SessionStore(str(root), durability="flush")
    for i in range(n):
        store.append_many(f"s{i}", [ChatMessage("user", f"hi {j}") for j in range(messages)])
        store.set_session_name(f"s{i}", f"n{i}")
        store.get_message_count(f"s{i}")
    other = SessionStore(str(root), durability="flush")  # a fresh store: an empty cache
    want = other.list_sessions_with_metadata()
    got, calls = _python_calls_during(other.list_sessions_with_metadata)
    assert got == want and len(want) == n
    # a listing builds the session files it needs without filling the store's cache of
    # them (a listing of more sessions than it holds would evict every warm session)
    assert other._root.known == {}
    return calls


def test_listing_python_work_grows_with_sessions_not_with_their_length_and_leaves_the_cache_alone(
        tmp_path: pathlib.Path) -> None:
    """The Python calls of a listing: the same for sessions of 1 and of 2,000 messages,
    and at most twice as many for twice the sessions."""
    short = _listing_python_calls(tmp_path / "short", 20, 1)
    assert _listing_python_calls(tmp_path / "long", 20, 2000) == short
    assert _listing_python_calls(tmp_path / "double", 40, 1) <= 2 * short + 40


_UTC = timezone.utc
_NOTHING: dict[str, object] = {"name": None, "agent_alias": None, "principal_id": None, "state": None, "turn_id": None,
                               "created_at": None, "trim_breadcrumb": None, "context": {}, "parent": None,
                               "fork_point": None}
#: Sidecars as another version or tool may have left them, and the metadata each must read
#: as, written out by hand (a field of the wrong type reads as absent; a turn without a
#: valid run state too; the context keeps its string entries only).
_SIDECARS: list[tuple[dict[str, object] | None, dict[str, object]]] = [
    (None, {}),
    ({}, {}),
    ({"key": "k", "format": 1}, {}),
    ({"key": "k", "format": 1, "name": "n", "agent_alias": "a", "principal_id": "p", "state": "running",
      "turn_id": "t", "created_at": 1_700_000_000_123, "trim_breadcrumb": True, "context": {"a": "b", "c": 1},
      "parent": "p0", "fork_point": "f0"},
     {"name": "n", "agent_alias": "a", "principal_id": "p", "state": "running", "turn_id": "t",
      "created_at": datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=_UTC), "trim_breadcrumb": True,
      "context": {"a": "b"}, "parent": "p0", "fork_point": "f0"}),
    ({"name": 1, "agent_alias": [], "principal_id": None, "state": "asleep", "turn_id": "t", "created_at": "x",
      "trim_breadcrumb": 1, "context": [], "parent": {}, "fork_point": 2.5}, {}),
    ({"state": ["running"], "turn_id": 3, "created_at": True, "context": {}}, {}),
    ({"state": "idle", "turn_id": None, "created_at": -5, "trim_breadcrumb": False, "context": {1: "x", "y": "z"}},
     {"state": "idle", "created_at": datetime(1969, 12, 31, 23, 59, 59, 995000, tzinfo=_UTC),
      "trim_breadcrumb": False, "context": {"y": "z"}}),
]


@pytest.mark.parametrize(("meta", "fields"), _SIDECARS)
def test_a_listed_sessions_metadata_is_read_field_by_field(meta: dict[str, object] | None,
                                                           fields: dict[str, object]) -> None:
    want = SessionMetadata(key="k", updated_at=datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=_UTC),
                           message_count=3, size_bytes=9, **{**_NOTHING, **fields})  # type: ignore[arg-type]
    assert sidecar.describe("k", meta, 3, 9, 1_700_000_000_123_456_789) == want


# -- search: blocks ruled out by byte searches, results unchanged --------------------------
def _decodes_during(op: Callable[[], object]) -> tuple[object, int]:
    """``op()`` and how many lines it decoded (calls of ``codec.decode_record``, counted with
    a profile hook: nothing is patched)."""
    target = codec.decode_record.__code__
    calls = 0

    def hook(frame: FrameType, event: str, _arg: object) -> None:
        nonlocal calls
        if event == "call" and frame.f_code is target:
            calls += 1

    sys.setprofile(hook)
    try:
        result = op()
    finally:
        sys.setprofile(None)
    return result, calls


def test_search_decodes_no_line_of_a_block_that_cannot_hold_the_keyword(tmp_path: pathlib.Path) -> None:
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    texts = [f"héllo wörld, Grüße aus Köln {i} — ça va? 日本語 {i}" for i in range(3000)]
    store.append_many("k", [ChatMessage("user", t) for t in texts])
    store.append("other", ChatMessage("user", "the Zebra crossing"))

    found, decoded = _decodes_during(lambda: store.search(SessionQuery("zebra")))
    assert [m.key for m in found] == ["other"]  # type: ignore[attr-defined]
    assert decoded <= 1  # only the line that holds it; none of the 3,000 lines without it

    found, decoded = _decodes_during(lambda: store.search(SessionQuery("KÖLN 2999")))
    assert [m.key for m in found] == ["k"]  # type: ignore[attr-defined]



def test_ansi_escapes_and_a_folding_character_do_not_make_a_block_decode(tmp_path: pathlib.Path) -> None:
    # Tool output full of colour codes (stored as \u001b escapes), one ß among 3,000 lines:
    # only the lines that may hold the keyword are decoded, not every line of their block.
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    texts = [f"\x1b[32mok\x1b[0m test {i} passed" for i in range(3000)]
    texts[1500] = "Die Straße ist gesperrt"
    texts[2000] = "the \x1b[1mZebra\x1b[0m crossing"
    store.append_many("k", [ChatMessage("tool", t) for t in texts])

    found, decoded = _decodes_during(lambda: store.search_messages("zebra"))
    assert [h.snippet for h in found.hits] == [texts[2000]]  # type: ignore[attr-defined]
    assert decoded <= 1
    found, decoded = _decodes_during(lambda: store.search_messages("strasse"))
    assert [h.snippet for h in found.hits] == [texts[1500]]  # type: ignore[attr-defined]
    assert decoded <= 1  # the line with ß (it may fold to the keyword's letters)
    found, decoded = _decodes_during(lambda: store.search(SessionQuery("zebra")))
    assert [m.key for m in found] == ["k"]  # type: ignore[attr-defined]
    assert decoded <= 1


def test_search_hands_each_read_to_the_prefilter_as_it_was_read(tmp_path: pathlib.Path) -> None:
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    store.append_many("k", [ChatMessage("user", f"line {i} " + "wörds " * (i % 50)) for i in range(9000)])
    size = (tmp_path / "store" / (key_to_stem("k") + ".jsonl")).stat().st_size
    assert size > 2 * CHUNK_BYTES
    target = records.Prefilter.candidates.__code__
    handed: list[tuple[int, int]] = []

    def hook(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code is target:
            block = frame.f_locals["block"]
            end = frame.f_locals.get("end")
            handed.append((len(block), len(block) if end is None else end))

    sys.setprofile(hook)
    try:
        assert store.search(SessionQuery("absent")) == []
    finally:
        sys.setprofile(None)
    # every block but the last is a whole read of CHUNK_BYTES (not a copy cut at its last
    # newline and joined to the rest of the line by the next one); the complete lines of
    # each follow on
    assert len(handed) >= 3 and all(n == CHUNK_BYTES for n, _end in handed[:-1])
    assert sum(end for _n, end in handed) == size
    # each byte is read once, plus the part of a line a read ends in
    assert sum(n for n, _end in handed) < size + len(handed) * 400


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
       torn=st.binary(max_size=30).filter(lambda b: b"\n" not in b), block=st.integers(1, 64))
def test_search_blocks_are_the_complete_lines_in_order(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes],
                                                       torn: bytes, block: int) -> None:
    data = b"".join(line + b"\n" for line in lines) + torn
    path = tmp_path_factory.mktemp("blocks") / "t.jsonl"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = list(search.line_blocks(fd, len(data), block))
    finally:
        os.close(fd)
    assert b"".join(chunk[:end] for _start, chunk, end in got) == data[: len(data) - len(torn)]
    assert [start for start, _chunk, _end in got] == list(accumulate([0] + [end for _s, _c, end in got]))[:-1]
    assert all(chunk[end - 1 : end] == b"\n" for _start, chunk, end in got)


def _plain_mentions(lines: list[bytes], needle: str) -> bool:
    """The definition: some complete line decodes to a record with text containing needle."""
    for line in lines:
        record = records.decode_or_none(line)
        if record is not None and any(needle in t.casefold() for t in records.texts(record.get("content"))):
            return True
    return False


_ALPHABET = st.sampled_from(["\x1b", "\x00", "a", "b", "s", "S", "k", "K", "i", "I", "f", "t", "ß", "ẞ", "ſ", "İ", "ı", "K", "ﬁ",
                             "ﬆ", "é", "É", "e\u0301", "\"", "\\", "/", "\n", "\t", " ", "ö", "Ö", "日", "\U0001f600",
                             "ŉ", "ǰ", "ẖ", "Σ", "ς", "σ", "\x7f", "\u212b", "å", "x"])
_TEXT = st.lists(_ALPHABET, max_size=12).map("".join)
_CONTENT = st.one_of(_TEXT, st.lists(st.one_of(_TEXT, st.builds(lambda t: {"type": "text", "text": t}, _TEXT)),
                                    max_size=3),
                     st.builds(lambda t: {"text": t}, _TEXT), st.none(), st.integers(-5, 5))


def _encode(record: dict[str, object], how: int) -> bytes:
    if how == 0:
        return orjson.dumps(record)  # raw UTF-8, only the escapes JSON requires
    if how == 1:
        return json.dumps(record, ensure_ascii=True).encode()  # every non-ASCII character as \uXXXX
    if how == 2:
        return json.dumps(record, ensure_ascii=False).replace("/", "\\/").encode()  # escaped slashes
    return json.dumps(record).encode().replace(b"a", b"\\u0061")  # an ASCII letter escaped


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contents=st.lists(st.tuples(_CONTENT, st.integers(0, 3)), max_size=6),
       needle=st.one_of(_TEXT.filter(bool), st.sampled_from(["ss", "SS", "straße", "i̇", "k", "fi", "st", "a/b", 'a"',
                                                            "\\", "ﬁ", "σ", "ς", "ö", "x"])),
       junk=st.lists(st.sampled_from([b"garbage", b"", b"[1]", b'{"role":"user","content":"xa"}']), max_size=2))
def test_the_block_prefilter_never_changes_what_search_finds(contents: list[tuple[object, int]], needle: str,
                                                             junk: list[bytes]) -> None:
    lines = [_encode({"id": f"{i:03d}", "created_at": 1, "role": "user", "kind": "message", "content": c}, how)
             for i, (c, how) in enumerate(contents)] + junk
    folded = needle.casefold()
    block = b"".join(line + b"\n" for line in lines)
    want = _plain_mentions(lines, folded)
    assert search.block_mentions(block, folded, records.Prefilter(folded)) == want
    for tail in lines[:1] + junk[:1]:  # bytes after the end (the start of the next line) never count
        assert search.block_mentions(block + tail, folded, records.Prefilter(folded), len(block)) == want
    for line in lines:  # and line by line, each its own block
        one = search.block_mentions(line + b"\n", folded, records.Prefilter(folded))
        assert one == _plain_mentions([line], folded)


def test_the_table_of_non_ascii_characters_folding_to_ascii_is_this_pythons() -> None:
    found: dict[str, set[str]] = {}
    for cp in range(0x80, sys.maxunicode + 1):
        c = chr(cp)
        for ch in c.casefold():
            if ch.isascii():
                found.setdefault(ch, set()).add(c)
    assert {k: set(v) for k, v in records.FOLDS_TO_ASCII.items()} == found


# -- rewrite_messages: messages read back are encoded as they are, not copied --------------
def _record_by_fields(m: ChatMessage, message_id: str, created_at: int) -> list[tuple[str, object]]:
    """The record's definition (docs/format.md): id, created_at, role, kind, content, then the extras."""
    return [("id", message_id), ("created_at", created_at), ("role", m.role), ("kind", m.kind),
            ("content", m.content), *m.extra.items()]


def test_a_rewrite_of_loaded_messages_reuses_their_records_and_encodes_the_same_lines(tmp_path: pathlib.Path) -> None:
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    store.append_many("k", [ChatMessage("user", f"m{i}", extra={"name": f"n{i}"} if i % 2 else None)
                            for i in range(50)])
    path = tmp_path / "store" / (key_to_stem("k") + ".jsonl")
    before = path.read_bytes()
    loaded = store.try_load("k")

    got = ids.assign_ids("k", loaded, None, ids.now_ms())
    assert all(r is m._data for r, m in zip(got, loaded, strict=True))  # no dict built per message
    assert b"".join(codec.encode_records(got, "k", 1 << 20)) == before
    with SyscallProbe() as p:
        store.rewrite_messages("k", loaded)
    assert path.read_bytes() == before and store.try_load("k") == loaded
    assert store.get_message_count("k") == 50
    # writes are batched: a small transcript of 50 messages takes no more writes than one of 5
    store.append_many("five", loaded[:5])
    five = store.try_load("five")
    with SyscallProbe() as q:
        store.rewrite_messages("five", five)
    assert p.seam["write"] <= q.seam["write"], (p.seam["write"], q.seam["write"])


@pytest.mark.parametrize("message", [
    ChatMessage("user", "a", id="01J0000000000000000000000A", created_at=5),
    ChatMessage("user", "a", id="01J0000000000000000000000A", created_at=5, kind="note", extra={"x": [1.5]}),
    ChatMessage("user", "a", id="01J0000000000000000000000A"),  # no time: ``now`` is used
    ChatMessage("user", "a", created_at=5),  # no id: a new one
    ChatMessage.from_dict({"role": "tool", "content": None, "tool_call_id": "c", "id": "01J0000000000000000000000X", "created_at": 1}),
    # wrapped as they are, in orders and with values a record does not have
    from_record({"role": "user", "id": "01J0000000000000000000000A", "created_at": 5, "kind": "message",
                 "content": "a"}),
    from_record({"id": "01J0000000000000000000000A", "created_at": 5, "role": "user", "kind": "", "content": "a"}),
    from_record({"id": "01J0000000000000000000000A", "created_at": 5, "role": "user", "kind": "message"}),
    from_record({"id": "01J0000000000000000000000A", "created_at": None, "role": "user", "kind": "message",
                 "content": "a", "extra": 1}),
])
def test_a_record_is_the_one_its_fields_define(message: ChatMessage) -> None:
    for message_id, created_at in ((message.id or "01J0000000000000000000000B", message.created_at or 7),
                                   ("01J0000000000000000000000C", 9)):
        got = codec.record_of(message, message_id, created_at)
        assert list(got.items()) == _record_by_fields(message, message_id, created_at)
        assert orjson.dumps(got) == orjson.dumps(dict(_record_by_fields(message, message_id, created_at)))
    now = ids.timestamp_ms("01J0000000000000000000000A") or 0  # the ids here are from that millisecond
    [record] = ids.assign_ids("k", [message], None, now)
    assert list(record.items()) == _record_by_fields(message, record["id"], message.created_at or now)


def test_a_non_ascii_keyword_decodes_only_the_lines_holding_its_characters(tmp_path: pathlib.Path) -> None:
    # Agent text has a non-ASCII byte in nearly every line (accents, dashes, CJK, emoji): a
    # non-ASCII keyword decodes the lines holding each of its non-ASCII characters in some
    # case, not every line with a non-ASCII byte.
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    texts = [f"héllo wörld — grün in Köln {i}, ça va? 日本 🙂 {i}" for i in range(3000)]
    texts[700] = "Wo ist der SCHLÜSSEL?"
    texts[1400] = "東京の日本語"
    texts[2100] = "ΣΟΦΟΣ"
    store.append_many("k", [ChatMessage("user", t) for t in texts])

    for keyword, position in (("schlüssel", 700), ("日本語", 1400), ("σοφος", 2100), ("ΣΟΦΟΣ", 2100)):
        found, decoded = _decodes_during(lambda: store.search_messages(keyword))  # noqa: B023 - called at once
        assert [h.snippet for h in found.hits] == [texts[position]], keyword  # type: ignore[attr-defined]
        assert decoded <= 1, (keyword, decoded)
