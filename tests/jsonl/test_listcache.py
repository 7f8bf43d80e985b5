"""A store object that lists again reuses what it read of each session whose transcript,
sidecar and control file kept the same stats (jsonl/listcache.py): three lstat a session,
nothing opened; and any change since, by this store, another one or another tool, is read."""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
from _budget import sized
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from syscalls import SyscallProbe

from jsonl_sessions import ChatMessage, SessionStore
from jsonl_sessions.jsonl import listcache
from jsonl_sessions.jsonl.control import RECORD_OFFSET, Moves, encode_record
from jsonl_sessions.jsonl.listcache import Seen
from jsonl_sessions.keys import key_to_stem
from jsonl_sessions.types import SessionMetadata

#: A settle time short enough for a test to wait out (the store's is 2 s).
SETTLE = 0.05


def _store(root: pathlib.Path, n: int, *, context: bool = False) -> SessionStore:
    store = SessionStore(str(root), durability="flush")
    for i in range(n):
        key = f"s{i:02}"
        store.append(key, ChatMessage("user", f"hello {i}"))
        store.set_session_name(key, f"name {i:02}")
        if context and i % 2:
            store.set_session_context(key, {"team": f"t{i}"})
        store.get_message_count(key)  # the count cache describes each transcript
    return store


def _settled(store: SessionStore) -> SessionStore:
    """A store object on the same root whose listings keep what they read once the files
    are :data:`SETTLE` old; listed twice, so the next listing reuses every session."""
    other = SessionStore(store.root, durability="flush")
    other._root.seen = Seen(settle_ns=int(SETTLE * 1e9))
    time.sleep(2 * SETTLE)
    other.list_sessions_with_metadata()  # the first listing of an object keeps nothing
    other.list_sessions_with_metadata()
    assert len(other._root.seen) == len(other.list_sessions())
    return other


def _fresh(store: SessionStore, **listing: Any) -> list[SessionMetadata]:
    """What a store object that never listed before lists."""
    return SessionStore(store.root, durability="flush").list_sessions_with_metadata(**listing)


def _calls(p: SyscallProbe) -> dict[str, int]:
    return {name: count for name, count in p.os.items() if count}


LISTINGS: list[dict[str, Any]] = [{}, {"sort": "name"}, {"name_prefix": "name"}, {"sort": "updated_at"},
                                  {"sort": "message_count", "descending": True}]


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "plain")
def test_a_repeated_listing_lstats_each_unchanged_session_three_times_and_opens_nothing(
        tmp_path: pathlib.Path, listing: dict[str, Any]) -> None:
    n = 12
    store = _settled(_store(tmp_path / "s", n))
    want = _fresh(store, **listing)
    with SyscallProbe() as p:
        got = store.list_sessions_with_metadata(**listing)
    assert got == want and len(got) == n
    # transcript, sidecar and control file: one lstat each (a sort by updated_at takes the
    # first two for its order and reuses them), plus the one scandir
    assert _calls(p) == {"os.scandir": 1, "os.lstat": 3 * n}, _calls(p)


def test_the_first_listing_of_a_store_object_costs_what_it_did_and_the_second_keeps(tmp_path: pathlib.Path) -> None:
    """A one-shot listing (the CLI's ``ls``) pays nothing for what a later one may reuse;
    the second listing of the same object also takes each control file's fstat."""
    n = 12
    _store(tmp_path / "s", n)
    store = SessionStore(str(tmp_path / "s"), durability="flush")
    store._root.seen = Seen(settle_ns=int(SETTLE * 1e9))
    time.sleep(2 * SETTLE)
    full = {"os.scandir": 1, "os.lstat": n, "os.open": 2 * n, "os.pread": 2 * n, "os.close": 2 * n}
    with SyscallProbe() as p:
        first = store.list_sessions_with_metadata()
    assert _calls(p) == full | {"os.fstat": n}, _calls(p)  # the sidecars' fstat (their mtime)
    with SyscallProbe() as p:
        second = store.list_sessions_with_metadata()
    assert _calls(p) == full | {"os.fstat": 2 * n}, _calls(p)  # and the control files'
    assert first == second == _fresh(store) and len(store._root.seen) == n


def test_sessions_changed_within_the_settle_time_are_read_in_full_every_time(tmp_path: pathlib.Path) -> None:
    """With the store's own settle time (2 s), sessions written just now are never kept:
    a change in the file system clock's tick of a read could keep every stat the same."""
    n = 6
    store = _store(tmp_path / "s", n)
    for _ in range(3):
        assert store.list_sessions_with_metadata() == _fresh(store)
    assert len(store._root.seen) == 0
    with SyscallProbe() as p:
        store.list_sessions_with_metadata()
    assert p.os["os.open"] == 2 * n and p.os["os.pread"] == 2 * n, _calls(p)


def _root(store: SessionStore) -> pathlib.Path:
    return pathlib.Path(store.root)


def _path(store: SessionStore, key: str, suffix: str) -> pathlib.Path:
    return _root(store) / (key_to_stem(key) + suffix)


def _edit_in_place_keeping_the_mtime(path: pathlib.Path, old: bytes, new: bytes) -> None:
    """Another tool rewrites bytes of ``path`` in place (same inode, same size) and sets the
    modification time back: only the ctime tells."""
    assert len(old) == len(new)
    st = path.stat()
    data = path.read_bytes()
    assert old in data
    with open(path, "r+b") as f:
        f.write(data.replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def _plant_moves(other: SessionStore, key: str) -> None:
    """What a writer of ``replace_conversation_state`` that died right after committing its
    record leaves: complete temp files and the ``moves`` record; nothing renamed yet."""
    stem = key_to_stem(key)
    root = _root(other)
    (root / f".{stem}.jsonl.tmp").write_bytes(_path(other, key, ".jsonl").read_bytes() * 3)
    meta = _path(other, key, ".meta.json").read_bytes().replace(b'"name 03"', b'"name ZZ"')
    (root / f".{stem}.meta.json.tmp").write_bytes(meta)
    record = Moves(((f".{stem}.jsonl.tmp", f"{stem}.jsonl"), (f".{stem}.meta.json.tmp", f"{stem}.meta.json")))
    lock = _path(other, key, ".lock")
    raw = lock.read_bytes()
    lock.write_bytes(raw[:RECORD_OFFSET].ljust(RECORD_OFFSET, b"\0") + encode_record(record))


#: Changes made after a store object kept every session, by another store object or another
#: tool; each must show in that object's next listing.
CHANGES: dict[str, Callable[[SessionStore], None]] = {
    "renamed, same length": lambda o: o.set_session_name("s03", "name XX"),
    "sidecar edited in place, mtime set back": lambda o: _edit_in_place_keeping_the_mtime(
        _path(o, "s03", ".meta.json"), b'"name 03"', b'"name YY"'),
    "transcript edited in place, mtime set back": lambda o: _edit_in_place_keeping_the_mtime(
        _path(o, "s03", ".jsonl"), b"hello 3", b"HELLO 3"),
    "appended by the store": lambda o: o.append("s03", ChatMessage("user", "more")),
    "appended by another tool": lambda o: _path(o, "s03", ".jsonl").write_bytes(
        _path(o, "s03", ".jsonl").read_bytes() * 2),
    "rewritten, same size": lambda o: o.rewrite_messages("s03", [ChatMessage("user", "hello 9")]),
    "deleted and made again, same bytes": lambda o: (o.delete_session("s03"),
                                                     o.append("s03", ChatMessage("user", "hello 3")),
                                                     o.set_session_name("s03", "name 03")),
    "deleted": lambda o: o.delete_session("s03"),
    "run state": lambda o: o.set_session_state("s03", "running", "turn-1"),
    "context": lambda o: o.set_session_context("s03", {"a": "b"}),
    "cleared": lambda o: o.clear_messages("s03"),
    "a dead writer's committed record": lambda o: _plant_moves(o, "s03"),
    "a new session": lambda o: o.append("s99", ChatMessage("user", "new")),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_listing_sees_every_change_made_since_the_last_one(tmp_path: pathlib.Path, change: str) -> None:
    store = _store(tmp_path / "s", 6)
    kept = _settled(store)
    before = kept.list_sessions_with_metadata()
    CHANGES[change](SessionStore(store.root, durability="flush"))
    got = kept.list_sessions_with_metadata()
    if change == "a dead writer's committed record":
        # completed before it was counted (its sidecar was read just before: the next listing has it)
        assert [md.message_count for md in got if md.key == "s03"] == [3]
        got = kept.list_sessions_with_metadata()
    assert got == _fresh(store)
    if change != "transcript edited in place, mtime set back":  # (same size, lines and times)
        assert got != before
    assert [md for md in got if md.key != "s03" and md.key != "s99"] == [
        md for md in before if md.key != "s03"], "an unchanged session listed differently"


def test_a_caller_changing_a_listed_context_never_changes_the_next_listing(tmp_path: pathlib.Path) -> None:
    store = _settled(_store(tmp_path / "s", 6, context=True))
    want = _fresh(store)
    for _ in range(2):
        got = store.list_sessions_with_metadata()
        assert got == want
        for md in got:
            md.context["mine"] = "x"  # the dict of a frozen dataclass is still a dict
            md.context.pop("team", None)
    assert store.list_sessions_with_metadata() == want


# -- property: a store object that lists again lists what a new one lists --------------------
KEYS = ("a", "b", "c")
STEP_SETTLE = 0.02  # far above this file system's clock tick (a few ms at most)


def _tool_edit_name(writer: SessionStore, key: str, letter: str) -> None:
    path = _path(writer, key, ".meta.json")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    at = data.find(b'"name": "n-')
    if at != -1:
        old = data[at:at + 12]
        _edit_in_place_keeping_the_mtime(path, old, old[:11] + letter.encode())


def _tool_append(writer: SessionStore, key: str) -> None:
    path = _path(writer, key, ".jsonl")
    if path.exists():
        with open(path, "ab") as f:  # another tool's line (no id): the count cache no longer matches
            f.write(b'{"role": "user", "content": "from a tool"}\n')


STEPS: dict[str, Callable[[SessionStore, str, str], object]] = {
    "append": lambda w, k, x: w.append(k, ChatMessage("user", f"hi {x}")),
    "name": lambda w, k, x: w.session_exists(k) and w.set_session_name(k, f"n-{x}"),
    "context": lambda w, k, x: w.session_exists(k) and w.set_session_context(k, {"x": x}),
    "state": lambda w, k, x: w.session_exists(k) and w.set_session_state(k, "running" if x < "n" else "idle"),
    "delete": lambda w, k, x: w.delete_session(k),
    "clear": lambda w, k, x: w.session_exists(k) and w.clear_messages(k),
    "tool edits the name in place": lambda w, k, x: _tool_edit_name(w, k, x),
    "tool appends": lambda w, k, x: _tool_append(w, k),
}


@settings(max_examples=sized(10, 100), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(sorted(STEPS)), st.sampled_from(KEYS),
                                st.sampled_from("abcdefghijklmnopqrstuvwxyz"), st.booleans()),
                      min_size=1, max_size=8))
def test_a_store_object_that_lists_again_lists_what_a_new_one_lists(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, str, bool]]) -> None:
    """Changes by another store object and by other tools, between listings of one store
    object that keeps what it reads (the files settle before each of its listings, so it
    keeps nearly everything): each listing equals a new store object's first listing."""
    root = tmp_path_factory.mktemp("kept")
    writer = SessionStore(str(root), durability="flush")
    for key in KEYS:
        writer.append(key, ChatMessage("user", "hello"))
        writer.set_session_name(key, "n-a")
    lister = SessionStore(str(root), durability="flush")
    lister._root.seen = Seen(settle_ns=int(STEP_SETTLE * 1e9 / 2))
    lister.list_sessions_with_metadata()
    reused = 0
    for step, key, letter, then_list in [*steps, ("name", "a", "z", True)]:
        STEPS[step](writer, key, letter)
        if then_list:
            time.sleep(STEP_SETTLE)
            with SyscallProbe() as p:
                got = lister.list_sessions_with_metadata(sort="name")
            reused += len(got) - p.os["os.open"] // 2
            assert got == _fresh(writer, sort="name"), step
            assert lister.list_sessions_with_metadata() == _fresh(writer)
    event(f"sessions reused: {min(reused, 3)}+")


def test_the_memory_kept_is_bounded_by_max_entries() -> None:
    # A store of more sessions than MAX_ENTRIES keeps nothing, and a cache that fills up
    # starts over instead of growing.
    seen = Seen()
    assert not seen.begin(10).keeping  # the first listing of a store object keeps nothing
    assert seen.begin(10).keeping and seen.begin(listcache.MAX_ENTRIES).keeping
    assert not seen.begin(listcache.MAX_ENTRIES + 1).keeping
    entry = cast(listcache.Entry, object())
    for i in range(3):
        seen.put(f"s{i}", entry)
    seen.replace({f"s{i}": entry for i in range(listcache.MAX_ENTRIES + 1)})
    assert len(seen) == 0
