"""The message-history API on JSONL transcripts: count, get_message, get_messages,
copy_messages (fork), truncate_messages (revert) and page over corrupt lines, torn tails,
a BOM and lines written by other tools; their costs measured by the bytes they read
through the platform seam (never by time); and staleness: other store instances and
another process change the session in between. (The same API on every backend, against
plain lists and the reference model's page: contract/test_message_history.py.)

``model_page`` is the reference semantics of ``page``, from the harness's reference model
(``jsonl_sessions.testing.reference``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from jsonl_sessions import (
    ChatMessage,
    CorruptTranscriptError,
    MessageNotFoundError,
    SessionStore,
    _platform,
)
from jsonl_sessions.jsonl import lines
from jsonl_sessions.keys import key_to_stem
from jsonl_sessions.testing import reference

BOM = b"\xef\xbb\xbf"

# What page() must return for a clean transcript: the reference model's page.
model_page = reference.page


def walk(store: SessionStore, key: str, direction: str, limit: int, **options: Any) -> tuple[list[ChatMessage], int]:
    """Every message by paging from the newest back (``older``) or from the first on
    (``newer``), and the number of pages; checks the cursors on the way."""
    out: list[ChatMessage] = []
    pages = 0
    cursor: str | None = None if direction == "older" else ""
    while True:
        if direction == "older":
            p = store.page(key, limit=limit, before=cursor, **options)
            out[:0] = p.messages
        else:
            p = store.page(key, limit=limit, after=cursor, **options)
            out.extend(p.messages)
        pages += 1
        assert pages < 100_000
        if not p.has_more:
            assert (p.before if direction == "older" else p.after) is None
            return out, pages
        cursor = p.before if direction == "older" else p.after
        assert cursor is not None and cursor == (p.messages[0].id if direction == "older" else p.messages[-1].id)


# -- helpers ----------------------------------------------------------------------------------


def transcript(store: SessionStore, key: str) -> pathlib.Path:
    return pathlib.Path(store.root) / (key_to_stem(key) + ".jsonl")


def sidecar(store: SessionStore, key: str) -> dict[str, Any]:
    return json.loads((pathlib.Path(store.root) / (key_to_stem(key) + ".meta.json")).read_text())  # type: ignore[no-any-return]


def msg(i: int, pad: int = 0, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": f"m{i}", **({"pad": "p" * pad} if pad else {}), **extra}


def make(store: SessionStore, key: str, n: int, *, seed: int = 0, max_pad: int = 0, batch: int = 5000) -> list[str]:
    rng = random.Random(seed)
    ids: list[str] = []
    for lo in range(0, n, batch):
        ids += store.append_many(key, [msg(i, rng.randint(0, max_pad) if max_pad else 0)
                                       for i in range(lo, min(n, lo + batch))])
    return ids


@dataclass
class Reads:
    """Reads through the platform seam: (file name, bytes) per call."""

    calls: list[tuple[str, int]] = field(default_factory=list)

    def clear(self) -> None:
        self.calls.clear()

    def of(self, name: str) -> tuple[int, int]:
        """(pread calls, bytes read) on the file ``name``."""
        mine = [n for f, n in self.calls if f == name]
        return len(mine), sum(mine)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    seen = Reads()
    real = _platform.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        data = real(fd, size, offset)
        seen.calls.append((os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), len(data)))
        return data

    monkeypatch.setattr(_platform, "pread", pread)
    yield seen


# -- get_message_count ---------------------------------------------------------------------------


def test_count_counts_complete_lines_not_a_torn_tail(store: SessionStore) -> None:
    make(store, "k", 3)
    with open(transcript(store, "k"), "ab") as f:
        f.write(b"not json\n" + b'{"id":"7ZZZZZZZZZZZZZZZZZZZZZZZZZ","ro')
    assert store.get_message_count("k") == 4  # a corrupt line is a line; a torn tail is not
    assert len(store.get_messages("k")) == 3


# -- get_message -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "max_pad"), [(0, 0), (1, 0), (2, 10), (50, 3000), (3000, 400), (400, 40_000)])
def test_get_message_finds_every_id_and_nothing_else(tmp_path: pathlib.Path, n: int, max_pad: int) -> None:
    store = SessionStore(tmp_path / "s", durability="flush")
    ids = make(store, "k", n, seed=n, max_pad=max_pad)
    for i, mid in enumerate(ids):
        got = store.get_message("k", mid)
        assert got is not None and got.id == mid and got.content == f"m{i}"
    probes = ["", "0", "0" * 26, "Z" * 26, "\uffff", "\ud800", "a\"b", "\\"]
    probes += [mid[:-1] + chr(ord(mid[-1]) + 1) for mid in ids[:50] if mid[-1] != "Z"]  # between neighbours
    for probe in probes:
        if probe not in ids:
            assert store.get_message("k", probe) is None
    assert store.get_message("missing", ids[0] if ids else "x") is None
    assert store.get_message("k", 12345) is None  # type: ignore[arg-type]


def test_get_message_steps_over_corrupt_lines_and_ignores_a_torn_tail(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    ids = make(store, "k", 400, max_pad=300, seed=3)
    path = transcript(store, "k")
    lines = path.read_bytes().splitlines(keepends=True)
    # Corrupt lines in the middle (one with a readable id, one without), then a torn tail.
    lines[200] = lines[200][:40] + b" garbage\n"  # id prefix intact, JSON broken
    lines[100:101] = [b"{{{{ not json at all }}}}\n" * 30, lines[100]]
    torn_id = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
    path.write_bytes(b"".join(lines) + b'{"id":"' + torn_id.encode() + b'","created_at":1,"role":"user"}')
    for i, mid in enumerate(ids):
        got = store.get_message("k", mid)
        if i == 200:
            assert got is None
        else:
            assert got is not None and got.content == f"m{i}", i
    assert store.get_message("k", torn_id) is None
    assert "corrupt" in caplog.text


def test_get_message_reads_lines_written_by_other_tools(store: SessionStore) -> None:
    """Lines whose id is not the first field (a hand-edited file), a BOM, long custom ids."""
    path = transcript(store, "k")
    store.append("k", msg(0))
    records = [{"role": "user", "content": i, "id": f"custom-{i:05d}-" + "x" * (i % 7), "created_at": i}
               for i in range(2000)]
    path.write_bytes(BOM + b"".join(orjson.dumps(r) + b"\n" for r in records))
    for r in records[::37] + records[-3:]:
        got = store.get_message("k", r["id"])
        assert got is not None and got.content == r["content"]
    assert store.get_message("k", "custom-00005") is None
    assert store.get_messages("k", offset=1998) == [ChatMessage.from_dict(r) for r in records[1998:]]


# -- get_messages -------------------------------------------------------------------------------------


def test_get_messages_skips_corrupt_lines_and_never_parses_lines_before_the_window(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    make(store, "k", 300)
    path = transcript(store, "k")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[5] = b"CORRUPT-EARLY\n"
    lines[295] = b"CORRUPT-LATE\n"
    path.write_bytes(BOM + b"".join(lines))
    full = store.load("k")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        assert store.get_messages("k", offset=280, limit=10) == [m for m in full if m.content in
                                                                  {f"m{i}" for i in range(280, 290)}]
        assert caplog.text == "", "a window near the end must not parse the lines before it"
        window = store.get_messages("k", offset=290, limit=10)
        assert [m.content for m in window] == [f"m{i}" for i in range(290, 300) if i != 295]
        assert "CORRUPT" not in caplog.text and "line 296" in caplog.text
        caplog.clear()
        assert [m.content for m in store.get_messages("k", limit=8)] == [f"m{i}" for i in range(8) if i != 5]
        assert "line 6," in caplog.text  # line numbers count from the file start, BOM and all
    assert store.get_messages("k") == full  # concatenated windows equal load


# -- copy_messages ----------------------------------------------------------------------------------


def test_copy_messages_forks_with_same_ids_times_and_bytes(store: SessionStore) -> None:
    ids = make(store, "src", 30, max_pad=50)
    store.set_session_trim_breadcrumb("src", True)
    full = store.load("src")
    assert store.copy_messages("src", "fork", up_to_message_id=ids[9]) == ids[9]
    assert store.load("fork") == full[:10]
    src_bytes = transcript(store, "src").read_bytes()
    assert transcript(store, "fork").read_bytes() == src_bytes[: src_bytes.index(ids[10].encode()) - len(b'{"id":"')]
    meta = sidecar(store, "fork")
    assert (meta["parent"], meta["fork_point"], meta["trim_breadcrumb"], meta["key"]) == ("src", ids[9], True, "fork")
    assert store.get_message_count("fork") == 10
    # the whole source; forks of forks; forks are independent of each other
    assert store.copy_messages("src", "all") == ids[-1]
    assert store.load("all") == full
    assert store.copy_messages("fork", "fork2", up_to_message_id=ids[3]) == ids[3]
    assert sidecar(store, "fork2")["parent"] == "fork"
    new = store.append("fork2", msg(99))
    assert new > ids[3]
    assert store.load("fork2") == [*full[:4], store.get_message("fork2", new)]
    assert store.load("src") == full and store.load("fork") == full[:10]
    assert sorted(store.list_sessions()) == ["all", "fork", "fork2", "src"]


def test_copy_of_empty_source_and_of_torn_or_corrupt_sources(store: SessionStore) -> None:
    store.rewrite_messages("empty", [])
    assert store.copy_messages("empty", "e2") is None
    assert store.session_exists("e2") and store.load("e2") == []
    assert sidecar(store, "e2")["fork_point"] is None
    ids = make(store, "src", 5)
    path = transcript(store, "src")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = b"corrupt\n"
    path.write_bytes(b"".join(lines) + b'{"id":"torn')
    assert store.copy_messages("src", "c") == ids[-1]
    assert transcript(store, "c").read_bytes() == b"".join(lines)  # verbatim, without the torn tail
    with pytest.raises(CorruptTranscriptError):
        store.try_load("c")
    assert store.copy_messages("src", "d", up_to_message_id=ids[0]) == ids[0]
    lines[3] = lines[3][:35] + b"}}}\n"
    path.write_bytes(b"".join(lines))
    with pytest.raises(CorruptTranscriptError) as info:  # the named message's line does not parse
        store.copy_messages("src", "e", up_to_message_id=ids[3])
    assert info.value.line == 4 and not store.session_exists("e")


# -- truncate_messages ------------------------------------------------------------------------------


def test_truncate_refusals_leave_the_file_unchanged(store: SessionStore) -> None:
    ids = make(store, "k", 10)
    path = transcript(store, "k")
    before = path.read_bytes()
    for bad in ("0" * 26, ids[3] + "0", "", None):
        with pytest.raises(MessageNotFoundError):
            store.truncate_messages("k", bad)  # type: ignore[arg-type]
    assert path.read_bytes() == before
    lines = before.splitlines(keepends=True)
    lines[7] = b'{"id":"not-even-json\n'
    lines[2] = b"corrupt but kept\n"
    corrupt = b"".join(lines)
    path.write_bytes(corrupt)
    with pytest.raises(CorruptTranscriptError) as info:
        store.truncate_messages("k", ids[4])  # would destroy line 8
    assert (info.value.line, info.value.offset) == (8, len(b"".join(lines[:7])))
    assert path.read_bytes() == corrupt
    assert store.truncate_messages("k", ids[8]) == 1  # the corrupt line 3 is kept, not destroyed
    assert path.read_bytes() == b"".join(lines[:9])


def test_truncate_removes_a_torn_tail_too(store: SessionStore) -> None:
    ids = make(store, "k", 4)
    path = transcript(store, "k")
    clean = path.read_bytes()
    path.write_bytes(clean + b'{"id":"7ZZ')
    assert store.truncate_messages("k", ids[-1]) == 0
    assert path.read_bytes() == clean


# -- page ---------------------------------------------------------------------------------------


def test_pages_walked_both_ways_equal_load_despite_corrupt_lines_and_a_bom(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    make(store, "k", 120, max_pad=100)
    path = transcript(store, "k")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[0] = BOM + lines[0]
    lines[40] = b"corrupt\n"
    lines[41] = b"\n"
    path.write_bytes(b"".join(lines) + b"torn")
    full = store.load("k")
    assert len(full) == 118
    for limit in (1, 7, 50, 500):
        for direction in ("older", "newer"):
            got, pages = walk(store, "k", direction, limit)
            assert got == full and pages == max(1, math.ceil(118 / limit))
    assert "2 corrupt line(s)" in caplog.text


# -- costs (bytes read through the seam, never time) ---------------------------------------------


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[SessionStore, list[str], list[str]]:
    """A 200,000-message session (~20 MB) and a 2,000-message one, same message sizes."""
    store = SessionStore(tmp_path_factory.mktemp("big") / "s", durability="flush")
    big_ids = make(store, "big", 200_000, batch=20_000)
    small_ids = make(store, "small", 2_000)
    return store, big_ids, small_ids


def test_paging_the_newest_50_reads_the_end_only(big: tuple[SessionStore, list[str], list[str]], reads: Reads) -> None:
    store, big_ids, small_ids = big
    cost = {}
    for key, ids in (("big", big_ids), ("small", small_ids)):
        reads.clear()
        p = store.page(key, limit=50)
        assert [m.id for m in p.messages] == ids[-50:]
        cost[key] = reads.of(key + ".jsonl")
    size = transcript(store, "big").stat().st_size
    print(f"page(50): {cost} of a {size:,}-byte transcript")
    # Beyond the end of the file, one binary search (O(log n)): the page's ``before`` cursor
    # is its oldest id only after checking that the id names that line (no copy elsewhere).
    search = 2 * math.ceil(math.log2(size / lines.SCAN_BYTES)) + 4
    assert cost["big"][1] <= 64 * 1024 + search * 2 * lines.PROBE_BYTES, "page(50) read more than the end and a search"
    assert cost["big"][0] <= cost["small"][0] + search, "the cost may grow with log n only"


def test_cursor_pages_and_get_message_read_log_n_blocks(big: tuple[SessionStore, list[str], list[str]],
                                                       reads: Reads) -> None:
    store, big_ids, _small_ids = big
    size = transcript(store, "big").stat().st_size
    bound_calls = 2 * math.ceil(math.log2(size / lines.SCAN_BYTES)) + 4
    rng = random.Random(7)
    worst = (0, 0)
    for mid in [big_ids[0], big_ids[-1], *rng.sample(big_ids, 40)]:
        reads.clear()
        assert store.get_message("big", mid) is not None
        calls, nbytes = reads.of("big.jsonl")
        worst = max(worst, (calls, nbytes))
        assert calls <= bound_calls and nbytes <= bound_calls * 2 * lines.PROBE_BYTES + lines.SCAN_BYTES
    reads.clear()
    # (an id that is not a ULID is looked for by reading every line: only another tool writes one)
    assert store.get_message("big", "0" * 26) is None and store.get_message("big", "7" + "Z" * 25) is None
    assert reads.of("big.jsonl")[0] <= 2 * bound_calls
    reads.clear()
    cursor = big_ids[100_000]
    p = store.page("big", limit=50, before=cursor)
    assert [m.id for m in p.messages] == big_ids[99_950:100_000]
    page_calls, page_bytes = reads.of("big.jsonl")
    print(f"get_message worst: {worst[0]} preads / {worst[1]:,} bytes (bound {bound_calls} preads); "
          f"page(50, before=middle): {page_calls} preads / {page_bytes:,} bytes; file {size:,} bytes")
    assert page_bytes <= bound_calls * 2 * lines.PROBE_BYTES + 128 * 1024


def test_window_at_the_end_reads_the_end_only(big: tuple[SessionStore, list[str], list[str]], reads: Reads) -> None:
    store, big_ids, _small = big
    n = len(big_ids)
    reads.clear()
    got = store.get_messages("big", offset=n - 50, limit=50)
    assert [m.id for m in got] == big_ids[-50:]
    calls, nbytes = reads.of("big.jsonl")
    print(f"get_messages(offset=n-50, limit=50): {calls} preads / {nbytes:,} bytes")
    assert nbytes <= 256 * 1024  # newline counting backwards from the end, then the window
    reads.clear()
    assert store.get_message_count("big") == n
    assert reads.of("big.jsonl")[1] == 0


# -- staleness: other instances and processes ----------------------------------------------------


def test_other_instances_and_a_same_size_swap_never_fool_count_pages_or_lookup(tmp_path: pathlib.Path) -> None:
    a = SessionStore(tmp_path / "s")
    b = SessionStore(tmp_path / "s")
    ids = a.append_many("k", [{"role": "user", "content": "x" * 10} for _ in range(10)])
    assert a.get_message_count("k") == 10 and a.page("k", limit=3).messages[-1].id == ids[-1]
    # b removes two short lines and appends one exactly as long as both: same byte size
    lines = transcript(a, "k").read_bytes().splitlines(keepends=True)
    two = len(lines[-1]) + len(lines[-2])
    assert b.truncate_messages("k", ids[7]) == 2
    new = b.append("k", {"role": "user", "content": "y" * (two - (len(lines[-1]) - 10))})
    assert transcript(a, "k").stat().st_size == sum(map(len, lines))
    assert a.get_message_count("k") == 9
    assert a.page("k", limit=2).messages == b.load("k")[-2:]
    assert a.get_message("k", ids[9]) is None and a.get_message("k", new) is not None
    assert a.get_messages("k", offset=7) == b.load("k")[7:]
    # a deleted session recreated by a fork with fewer messages
    b.delete_session("k")
    b.append_many("src", [msg(i) for i in range(3)])
    b.copy_messages("src", "k")
    assert a.get_message_count("k") == 3 and a.load("k") == b.load("src")


def test_another_process_mutates_between_reads(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "s"
    store = SessionStore(root)
    ids = make(store, "k", 300)
    assert store.get_message_count("k") == 300
    script = textwrap.dedent("""
        import sys
        from jsonl_sessions import SessionStore
        s = SessionStore(sys.argv[1])
        op = sys.argv[2]
        if op == "truncate":
            print(s.truncate_messages("k", sys.argv[3]))
        elif op == "append":
            print(" ".join(s.append_many("k", [{"role": "user", "content": f"p{i}"} for i in range(int(sys.argv[3]))])))
        elif op == "fork":
            print(s.copy_messages("k", sys.argv[3], up_to_message_id=sys.argv[4]))
    """)

    def other(*args: str) -> str:
        done = subprocess.run([sys.executable, "-c", script, str(root), *args], capture_output=True, text=True,
                              check=True, timeout=60)
        return done.stdout.strip()

    assert other("truncate", ids[149]) == "150"
    assert store.get_message_count("k") == 150 and store.get_message("k", ids[200]) is None
    assert store.page("k", limit=5).messages[-1].id == ids[149]
    added = other("append", "40").split()
    assert store.get_message_count("k") == 190
    assert [m.id for m in store.page("k", limit=40).messages] == added
    assert [m.id for m in store.get_messages("k", offset=148, limit=4)] == [*ids[148:150], *added[:2]]
    assert other("fork", "f", added[0]) == added[0]
    assert store.get_message_count("f") == 151 and store.get_message("f", added[0]) is not None
    assert store.page("f", limit=1, before=added[0]).messages[0].id == ids[149]


# -- the benchmark script runs ---------------------------------------------------------------------


def test_history_benchmark_quick_run(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                    untimed: None) -> None:
    root = pathlib.Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from benchmarks import history as bench

    out_json = tmp_path / "r.json"
    assert bench.main(["--quick", "--scale", "0.01", "--dir", str(tmp_path), "--json", str(out_json),
                       "--markdown"]) == 0
    data = json.loads(out_json.read_text())
    assert {g["id"].split(":")[0] for g in data["groups"]} == {"count", "get_message", "window_end", "page",
                                                                "page_before", "copy_fsync", "copy_flush"}
    assert len(data["groups"]) == 5 * 3 + 2  # five reads on three session sizes, copy in two modes
    for group in data["groups"]:
        for row in group["rows"]:
            assert row["samples"] > 0 and 0 < row["median_ns"] <= row["p95_ns"]
    assert {t["id"] for t in data["targets"]} == {"page_flat", "count_flat", "copy_vs_raw"}
    text = capsys.readouterr().out
    assert "goals (" in text and "| operation |" in text
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
