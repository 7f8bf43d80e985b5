"""Bad input and hostile files on the JSONL store: every refusal is a typed error and
leaves the disk unchanged. (The refusals of bad keys, messages and ids on every backend,
with this root check on the JSONL store: contract/test_refusals.py.)

"Unchanged" is checked on the whole root: the directory listing and the bytes of every
file (transcripts, sidecars, lock/control files), before and after. The one allowed
difference is an empty ``<stem>.lock`` appearing for a session that did not exist:
the guard (and so its lock file) is taken before a message can be given its id and
encoded; a lock file is never a session (docs/format.md).
"""

from __future__ import annotations

import logging
import os
import pathlib
import pickle
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from jsonl_sessions import (
    CorruptMetadataError,
    CorruptTranscriptError,
    LockTimeoutError,
    SessionStore,
    UnsafePathError,
)
from jsonl_sessions.keys import key_to_stem

Snapshot = dict[str, Any]
BOM = b"\xef\xbb\xbf"


# -- helpers -------------------------------------------------------------------------


def snapshot(root: str | pathlib.Path) -> Snapshot:
    """Every entry of root: bytes of regular files, the target of symlinks, dirs marked."""
    out: Snapshot = {}
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_symlink():
                out[entry.name] = ("symlink", os.readlink(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                out[entry.name] = ("dir",)
            else:
                out[entry.name] = pathlib.Path(entry.path).read_bytes()
    return out


def assert_unchanged(root: str | pathlib.Path, before: Snapshot, *, new_lock_ok: bool = False) -> None:
    after = snapshot(root)
    if new_lock_ok:
        for name in set(after) - set(before):
            if name.endswith(".lock") and after[name] == b"":
                del after[name]
    assert after == before


def transcript(store: SessionStore, key: str) -> pathlib.Path:
    return pathlib.Path(store.root) / (key_to_stem(key) + ".jsonl")


def two_lines(store: SessionStore, key: str) -> tuple[bytes, bytes]:
    """Append two messages; return their transcript lines (with newlines)."""
    store.append(key, {"role": "user", "content": "first"})
    store.append(key, {"role": "assistant", "content": "second"})
    l1, l2 = transcript(store, key).read_bytes().splitlines(keepends=True)
    return l1, l2


def user(content: Any = "hi", **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **fields}


# -- session keys ---------------------------------------------------------------------

STORED_SAFELY = [
    "/", "//", "a/b", "..", ".", "...", "../x", "../../etc/passwd", "..\\..\\windows\\system32", "C:\\x", "a:b",
    "CON", "con", "Con", "nul", "NUL", "com1", "COM1", "lpt9", "con.txt", "aux.", "a.b", ".hidden", ".", "-rf", "--",
    "~", "x~y", "%", "%2e%2e", "a%2fb", "*?<>|\"'", " ", "  lead", "trail ", "\n", "\t", "line\nbreak",
    "k" * 5000, "\u200f", "a\u200fb\u202ec", "\U0001f99c", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "Ab", "ab", "AB", "aB", "\u00e9", "e\u0301", "x" * 130 + "1", "x" * 130 + "2", "y" * 119, "y" * 120, "y" * 121,
    "\u0130", "i\u0307", "\ufeffbom", "\x7f", "\x01\x02",
]
STORED_SAFELY = list(dict.fromkeys(STORED_SAFELY))  # unique, order kept


def test_hostile_keys_are_stored_safely_inside_root(store: SessionStore, tmp_path: pathlib.Path) -> None:
    root = pathlib.Path(store.root)
    for key in STORED_SAFELY:
        store.append(key, user(key))
    store.set_session_trim_breadcrumb("CON", True)

    # Nothing escaped root; every entry is a plain file directly inside it.
    assert sorted(os.listdir(tmp_path)) == ["store"]
    names = os.listdir(root)
    for name in names:
        path = root / name
        assert path.is_file() and not path.is_symlink(), name
        assert os.path.realpath(path) == os.path.join(os.path.realpath(root), name)
        assert len(name.encode()) <= 255
        assert re.fullmatch(r"[a-z0-9_%~-]+\.(jsonl|meta\.json|lock)", name), name
        stem = name.split(".")[0]
        assert not stem.startswith("-")
        assert stem not in {"con", "prn", "aux", "nul", "com1", "lpt9"}
    transcripts = [n for n in names if n.endswith(".jsonl")]
    assert len(transcripts) == len(set(transcripts)) == len(STORED_SAFELY)
    stems = {n[: -len(".jsonl")] for n in transcripts}
    assert len({s.lower() for s in stems}) == len(stems), "names must not collide on a case-insensitive FS"

    # Original keys come back, from this store and from a fresh one.
    fresh = SessionStore(root)
    assert store.list_sessions() == fresh.list_sessions() == sorted(STORED_SAFELY)
    for key in STORED_SAFELY:
        assert fresh.session_exists(key)
        [m] = fresh.try_load(key)
        assert m.content == key
    assert fresh.get_session_trim_breadcrumb("CON") is True
    assert fresh.get_session_trim_breadcrumb("con") is None

    for key in STORED_SAFELY:
        assert fresh.delete_session(key) is True
    assert store.list_sessions() == []
    assert all(n.endswith(".lock") for n in os.listdir(root))


# -- ids ----------------------------------------------------------------------------


# -- corrupt files planted by hand ------------------------------------------------------


def test_torn_tail_is_ignored_by_reads_and_removed_by_the_next_append(store: SessionStore) -> None:
    l1, l2 = two_lines(store, "k")
    path = transcript(store, "k")
    for torn in (b'{"id":"01J', b"\x00" * 4096, b'{"role":"user","content":"no newline"}'):
        path.write_bytes(l1 + l2 + torn)
        before = snapshot(store.root)
        assert [m.content for m in store.load("k")] == ["first", "second"]
        assert [m.content for m in store.try_load("k")] == ["first", "second"]
        assert len(store.load_with_timestamps("k")) == 2
        assert store.session_exists("k") and store.list_sessions() == ["k"]
        store.get_session_trim_breadcrumb("k")
        fresh = SessionStore(store.root)
        assert [m.content for m in fresh.try_load("k")] == ["first", "second"]
        assert_unchanged(store.root, before)  # reads never remove it

        new_id = store.append("k", user("third"))
        data = path.read_bytes()
        assert data.startswith(l1 + l2) and torn not in data
        assert [m.id for m in store.try_load("k")][-1] == new_id
        assert [m.content for m in fresh.try_load("k")] == ["first", "second", "third"]
        store.remove_last("k")


def test_a_file_holding_only_a_torn_fragment_is_a_session_without_messages(store: SessionStore) -> None:
    path = transcript(store, "t")
    path.write_bytes(b'{"id":"01HZ","role":"us')
    assert store.session_exists("t")
    assert store.load("t") == [] and store.try_load("t") == []
    store.append("t", user("now"))
    assert [m.content for m in store.try_load("t")] == ["now"]
    assert path.read_bytes().count(b"\n") == 1


BAD_LINES = [
    b"garbage",
    b"\x00\x00\x00\x00",
    b"",
    b"[1, 2]",
    b'"a string"',
    b"42",
    b"null",
    b'{"content": "no role"}',
    b'{"role": 5}',
    b'{"role": "user", "id": 7}',
    b'{"role": "user", "created_at": 1.5}',
    b'{"role": "user", "created_at": "now"}',
    b'{"role": "user", "kind": null}',
    b'{"role": "user", "content": "unterminated',
    b"\xff\xfe not utf-8",
]


@pytest.mark.parametrize("bad", BAD_LINES, ids=repr)
def test_mid_file_corrupt_line(store: SessionStore, bad: bytes, caplog: pytest.LogCaptureFixture) -> None:
    l1, l2 = two_lines(store, "k")
    path = transcript(store, "k")
    path.write_bytes(l1 + bad + b"\n" + l2)
    before = snapshot(store.root)

    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load("k")
    err = info.value
    assert (err.line, err.offset, err.key, err.path) == (2, len(l1), "k", str(path))
    assert "line 2" in str(err) and f"byte offset {len(l1)}" in str(err)

    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        loaded = store.load("k")
    assert [m.content for m in loaded] == ["first", "second"]
    assert any("corrupt" in r.getMessage() and "line 2" in r.getMessage() for r in caplog.records)
    assert [t.message.content for t in store.load_with_timestamps("k")] == ["first", "second"]
    assert_unchanged(store.root, before)

    # Whole-file writers refuse: they would destroy the line they cannot parse.
    for refused in (
        lambda: store.rewrite_messages("k", [user("new")]),
        lambda: store.replace_conversation_state("k", [user("new")], True),
        lambda: store.replace_conversation_state_if_exists("k", [user("new")], True),
        lambda: store.clear_messages("k"),
    ):
        with pytest.raises(CorruptTranscriptError) as refusal:
            refused()
        assert (refusal.value.line, refusal.value.offset) == (2, len(l1))
        assert_unchanged(store.root, before)

    # append checks only the tail: it works and keeps the corrupt line.
    new_id = store.append("k", user("third"))
    assert path.read_bytes().startswith(l1 + bad + b"\n" + l2)
    assert [m.content for m in store.load("k")] == ["first", "second", "third"]
    assert store.load("k")[-1].id == new_id
    with pytest.raises(CorruptTranscriptError) as again:
        store.try_load("k")
    assert (again.value.line, again.value.offset) == (2, len(l1))


def test_corrupt_first_line_and_offsets_after_a_bom(store: SessionStore) -> None:
    l1, l2 = two_lines(store, "k")
    path = transcript(store, "k")
    path.write_bytes(b"garbage\n" + l1)
    with pytest.raises(CorruptTranscriptError) as first:
        store.try_load("k")
    assert (first.value.line, first.value.offset) == (1, 0)
    path.write_bytes(BOM + l1 + b"garbage\n" + l2)
    with pytest.raises(CorruptTranscriptError) as after_bom:
        store.try_load("k")
    assert (after_bom.value.line, after_bom.value.offset) == (2, len(BOM) + len(l1))


def test_nul_bytes_followed_by_newline_are_corruption_not_a_torn_tail(store: SessionStore) -> None:
    l1, l2 = two_lines(store, "k")
    path = transcript(store, "k")
    path.write_bytes(l1 + l2 + b"\x00" * 100 + b"\n")
    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load("k")
    assert (info.value.line, info.value.offset) == (3, len(l1) + len(l2))
    assert [m.content for m in store.load("k")] == ["first", "second"]


@pytest.mark.parametrize("bad", [b"garbage", b"", b"\x00" * 8, b'{"id": "zzz"}'], ids=repr)
def test_remove_and_update_last_refuse_a_corrupt_last_line(store: SessionStore, bad: bytes) -> None:
    l1, l2 = two_lines(store, "k")
    last_id = store.try_load("k")[-1].id
    path = transcript(store, "k")
    path.write_bytes(l1 + l2 + bad + b"\n")
    before = snapshot(store.root)
    attempts: list[Callable[[], bool]] = [
        lambda: store.remove_last("k"),
        lambda: store.remove_last("k", expected_id=last_id),
        lambda: store.update_last("k", user("new")),
        lambda: store.update_last("k", user("new"), expected_id=last_id),
    ]
    for attempt in attempts:
        with pytest.raises(CorruptTranscriptError) as info:
            attempt()
        assert (info.value.line, info.value.offset, info.value.key) == (3, len(l1) + len(l2), "k")
        assert_unchanged(store.root, before)

    # append never hides or removes it, and still orders after the last good id.
    new_id = store.append("k", user("third"))
    assert new_id > last_id
    assert path.read_bytes() == l1 + l2 + bad + b"\n" + path.read_bytes().splitlines(keepends=True)[-1]
    assert [m.content for m in store.load("k")] == ["first", "second", "third"]


def test_utf8_bom_at_start_is_tolerated(store: SessionStore) -> None:
    l1, l2 = two_lines(store, "k")
    path = transcript(store, "k")
    path.write_bytes(BOM + l1 + l2)
    assert [m.content for m in store.try_load("k")] == ["first", "second"]
    store.append("k", user("third"))
    assert store.remove_last("k") is True
    assert store.update_last("k", user("SECOND")) is True
    assert [m.content for m in SessionStore(store.root).try_load("k")] == ["first", "SECOND"]
    path.write_bytes(BOM + l1)
    assert store.remove_last("k") is True
    assert store.try_load("k") == []
    assert store.remove_last("k") is False


def test_empty_file_is_a_session_with_no_messages(store: SessionStore) -> None:
    path = transcript(store, "empty")
    path.write_bytes(b"")
    assert store.session_exists("empty")
    assert store.list_sessions() == ["empty"]
    assert store.load("empty") == store.try_load("empty") == store.load_with_timestamps("empty") == []
    assert store.get_session_trim_breadcrumb("empty") is None
    assert store.remove_last("empty") is False
    assert store.update_last("empty", user()) is False
    assert store.clear_messages("empty") == 0
    assert path.read_bytes() == b""
    store.append("empty", user("first"))
    assert [m.content for m in SessionStore(store.root).try_load("empty")] == ["first"]


def test_one_corrupt_session_never_breaks_the_others(store: SessionStore, caplog: pytest.LogCaptureFixture) -> None:
    root = pathlib.Path(store.root)
    long_key = "L" * 300
    for key in ("good", "bad", "badmeta", long_key, "nometa" * 30):
        store.append(key, user(key))
    transcript(store, "bad").write_bytes(b"\x00garbage\n{not json\n")
    (root / (key_to_stem("badmeta") + ".meta.json")).write_bytes(b"{corrupt")
    (root / (key_to_stem(long_key) + ".meta.json")).write_bytes(b"[]")  # a hashed key needs its sidecar
    (root / (key_to_stem("nometa" * 30) + ".meta.json")).unlink()
    # Stray entries that are not sessions.
    (root / "README.txt").write_text("hello")
    (root / "UPPER.jsonl").write_text("{}\n")
    (root / "%zz.jsonl").write_text("{}\n")
    (root / ".hidden.jsonl").write_text("{}\n")
    (root / "orphan.meta.json").write_text("{}")
    (root / "dir.jsonl").mkdir()
    (root / ".junk.jsonl.tmp").write_text("x")

    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        fresh = SessionStore(root)
        listed = fresh.list_sessions()
    assert listed == ["bad", "badmeta", "good"]
    assert fresh.load("bad") == []
    with pytest.raises(CorruptTranscriptError):
        fresh.try_load("bad")
    with pytest.raises(CorruptMetadataError):
        fresh.get_session_trim_breadcrumb("badmeta")
    assert [m.content for m in fresh.try_load("badmeta")] == ["badmeta"]
    assert [m.content for m in fresh.try_load(long_key)] == [long_key]
    fresh.append("good", user("more"))
    assert [m.content for m in fresh.try_load("good")] == ["good", "more"]
    fresh.append("other", user("new session"))
    assert fresh.list_sessions() == ["bad", "badmeta", "good", "other"]


# -- file modes -----------------------------------------------------------------------


def test_files_are_0600_and_a_created_root_is_0700(tmp_path: pathlib.Path, durability: str) -> None:
    old = os.umask(0)  # prove the store sets the modes itself
    try:
        root = tmp_path / "fresh-root"
        store = SessionStore(root, durability=durability)  # type: ignore[arg-type]
        long_key = "q" * 400
        for key in ("k", long_key):
            store.append(key, user())
            store.set_session_trim_breadcrumb(key, True)
            store.update_last(key, user("updated"))
            store.rewrite_messages(key, [user("rewritten")])
            store.replace_conversation_state(key, [user("replaced")], False)
        store.replace_conversation_state("created-by-replace", [user()], True)
        store.rewrite_messages("created-by-rewrite", [user()])
        store.clear_messages("k")
    finally:
        os.umask(old)
    assert (root.stat().st_mode & 0o777) == 0o700
    names = sorted(os.listdir(root))
    assert any(n.endswith(".lock") for n in names) and any(n.endswith(".meta.json") for n in names)
    for name in names:
        assert ((root / name).stat().st_mode & 0o777) == 0o600, name


# -- symlinks planted in root -----------------------------------------------------------


def test_a_symlinked_transcript_is_never_followed(
    store: SessionStore, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    store.append("real", user("real"))
    outside = tmp_path / "outside.jsonl"
    secret = b'{"id":"01HZZZZZZZZZZZZZZZZZZZZZZZ","role":"user","content":"secret"}\n'
    outside.write_bytes(secret)
    root = pathlib.Path(store.root)
    (root / "s.jsonl").symlink_to(outside)
    (root / "d.jsonl").symlink_to(tmp_path, target_is_directory=True)

    with pytest.raises(UnsafePathError) as info:
        store.try_load("s")
    assert info.value.key == "s" and info.value.path == str(root / "s.jsonl")
    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        assert store.load("s") == []
    assert any("s.jsonl" in r.getMessage() for r in caplog.records)
    assert store.load_with_timestamps("s") == []
    assert store.session_exists("s") is False
    assert store.list_sessions() == ["real"]

    before = snapshot(root)
    for attempt in (
        lambda: store.append("s", user("x")),
        lambda: store.append_many("s", [user("x")]),
        lambda: store.remove_last("s"),
        lambda: store.update_last("s", user("x")),
        lambda: store.clear_messages("s"),
    ):
        with pytest.raises(UnsafePathError):
            attempt()
        assert_unchanged(root, before, new_lock_ok=True)
    assert outside.read_bytes() == secret

    # Whole-file writers may refuse, or replace the link itself (a rename does not follow
    # it); either way the file outside root is untouched.
    whole_file_writers: list[Callable[[], None]] = [
        lambda: store.rewrite_messages("s", [user("mine")]),
        lambda: store.replace_conversation_state("s", [user("mine")], True),
    ]
    for whole in whole_file_writers:
        (root / "s.jsonl").unlink()
        (root / "s.jsonl").symlink_to(outside)
        try:
            whole()
        except UnsafePathError:
            assert (root / "s.jsonl").is_symlink()
        else:
            assert not (root / "s.jsonl").is_symlink()
            assert [m.content for m in store.try_load("s")] == ["mine"]
        assert outside.read_bytes() == secret


# -- the guard ---------------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from jsonl_sessions import SessionStore
    store = SessionStore(sys.argv[1])
    with store.lock(sys.argv[2]):
        print("held", flush=True)
        time.sleep(60)
    """
)


def test_lock_timeout_names_the_session_and_the_holder_process(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "s"
    key = "team/alpha \U0001f99c"
    SessionStore(root).append(key, user("before"))
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(root), key], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        store = SessionStore(root, lock_timeout=0.2)
        before = snapshot(root)
        with pytest.raises(LockTimeoutError) as info:
            store.append(key, user("blocked"))
        err = info.value
        assert isinstance(err, TimeoutError)
        assert err.key == key and err.timeout == 0.2 and str(err.path).endswith(".lock")
        assert repr(key) in str(err)
        if sys.platform.startswith("linux"):
            assert err.holder_pid == holder.pid
            assert str(holder.pid) in str(err)
        for attempt in (
            lambda: store.remove_last(key),
            lambda: store.rewrite_messages(key, [user()]),
            lambda: store.delete_session(key),
        ):
            with pytest.raises(LockTimeoutError):
                attempt()
        assert [m.content for m in store.try_load(key)] == ["before"]  # readers take no lock
        assert_unchanged(root, before)
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    store.append(key, user("after"))  # the kernel released the dead holder's lock
    assert [m.content for m in store.try_load(key)] == ["before", "after"]


def test_a_raised_corrupt_transcript_error_pickles(store: SessionStore) -> None:
    l1, _ = two_lines(store, "k")
    transcript(store, "k").write_bytes(l1 + b"oops\n")
    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load("k")
    back = pickle.loads(pickle.dumps(info.value))
    assert (back.key, back.path, back.line, back.offset, back.reason) == (
        "k", str(transcript(store, "k")), 2, len(l1), info.value.reason)
