"""The two backends side by side, and ``migrate`` between them.

A Hypothesis property: the same random sequence of operations (every mutation of the
contract, with bad arguments, stale ``expected_id`` s, unknown ids, forks, reverts,
metadata, ownership) on a JSONL store and on a SQLite store gives the same result (or
the same exception type) for every call, and the same observable state after every
call: sessions, messages, metadata, run state, pages, windows, search. Both stores run on
the same clock with the id generator's randomness re-seeded before each call, so they
assign the same ids.

Then ``migrate`` both ways: JSONL -> SQLite -> JSONL gives back byte-identical
transcripts and equal sidecars, every copy is observably equal to its source (activity
times included), and a session that exists in the target is refused, untouched.
"""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonl_sessions import SessionExistsError, SessionQuery, SessionStore
from jsonl_sessions.sqlite import SqliteSessionStore, export_session, migrate

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
KEYS = ["a", "b", "c/d \U0001f99c"]

texts = st.sampled_from(["hello", "Straße", "tool output", "", "HELLO world", "\u00e9t\u00e9"])
messages = st.builds(
    lambda role, content, kind, extra: {"role": role, "content": content, "kind": kind, **extra},
    st.sampled_from(["user", "assistant", "tool", "system"]),
    st.one_of(texts, st.lists(st.one_of(texts, st.builds(lambda t: {"type": "text", "text": t}, texts)), max_size=2)),
    st.sampled_from(["message", "message", "compaction"]),
    st.sampled_from([{}, {}, {"tool_calls": [{"id": "t1"}]}, {"tool_call_id": "t1"}, {"name": "x"},
                     {"id": "00000000000000000000000001"}, {"content": float("nan")}]),
)
batches = st.lists(messages, max_size=4)
refs = st.sampled_from([None, "first", "last", "unknown"])
Op = tuple[str, tuple[Any, ...]]
ops = st.one_of(
    st.tuples(st.just("append"), st.tuples(st.sampled_from(KEYS), messages)),
    st.tuples(st.just("append_many"), st.tuples(st.sampled_from(KEYS), batches)),
    st.tuples(st.just("remove_last"), st.tuples(st.sampled_from(KEYS), refs)),
    st.tuples(st.just("update_last"), st.tuples(st.sampled_from(KEYS), messages, refs)),
    st.tuples(st.just("rewrite_messages"), st.tuples(st.sampled_from(KEYS), batches)),
    st.tuples(st.just("replace"), st.tuples(st.sampled_from(KEYS), batches, st.booleans(), st.booleans())),
    st.tuples(st.just("clear_messages"), st.tuples(st.sampled_from(KEYS))),
    st.tuples(st.just("delete_session"), st.tuples(st.sampled_from(KEYS))),
    st.tuples(st.just("copy_messages"), st.tuples(st.sampled_from(KEYS), st.sampled_from(KEYS), refs)),
    st.tuples(st.just("truncate_messages"), st.tuples(st.sampled_from(KEYS), refs)),
    st.tuples(st.just("meta"), st.tuples(st.sampled_from(KEYS), st.sampled_from(
        ["name", "alias", "principal", "running", "idle", "context", "crumb", "owned", "rename", "clear"]))),
    st.tuples(st.just("compact"), st.tuples(st.sampled_from(KEYS))),
)


def resolve(store: Any, key: str, ref: str | None) -> str | None:
    """A message id named by ``ref`` in ``store``'s session ``key`` (the same in both stores)."""
    if ref is None:
        return None
    ids = [m.id for m in store.load(key)]
    if ref == "unknown" or not ids:
        return "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
    return ids[0] if ref == "first" else ids[-1]


META: dict[str, Callable[[Any, str], Any]] = {
    "name": lambda s, k: s.set_session_name(k, f"name of {k}"),
    "alias": lambda s, k: s.set_session_agent_alias(k, "planner"),
    "principal": lambda s, k: s.set_session_principal(k, "alice"),
    "running": lambda s, k: s.set_session_state(k, "running", "turn-1"),
    "idle": lambda s, k: s.set_session_state(k, "idle"),
    "context": lambda s, k: s.set_session_context(k, {"cwd": "/tmp", "k": k}),
    "crumb": lambda s, k: s.set_session_trim_breadcrumb(k, True),
    "owned": lambda s, k: s.delete_session_owned(k, "alice"),
    "rename": lambda s, _k: s.rename_agent_attribution("planner", "builder"),
    "clear": lambda s, _k: s.clear_agent_attribution("builder"),
}


def call(store: Any, op: Op, seed: int) -> Any:
    """Run ``op`` on ``store`` with the id generator seeded; its result, or its exception type."""
    name, args = op
    key = args[0]
    random.seed(seed)
    try:
        if name == "append":
            return store.append(key, args[1])
        if name == "append_many":
            return store.append_many(key, args[1])
        if name == "remove_last":
            return store.remove_last(key, expected_id=resolve(store, key, args[1]))
        if name == "update_last":
            expected = resolve(store, key, args[2])
            random.seed(seed)
            return store.update_last(key, args[1], expected_id=expected)
        if name == "rewrite_messages":
            return store.rewrite_messages(key, args[1])
        if name == "replace":
            if args[3]:
                return store.replace_conversation_state_if_exists(key, args[1], args[2])
            return store.replace_conversation_state(key, args[1], args[2])
        if name == "copy_messages":
            return store.copy_messages(key, args[1], up_to_message_id=resolve(store, key, args[2]))
        if name == "truncate_messages":
            return store.truncate_messages(key, resolve(store, key, args[1]) or "x")
        if name == "meta":
            return META[args[1]](store, key)
        return getattr(store, name)(key)
    except Exception as exc:  # noqa: BLE001 - the type is what both must agree on
        return type(exc).__name__


def observe(store: Any, *, times: bool = False) -> dict[str, Any]:
    """Everything the API shows (activity times only with ``times``: they come from the file
    system in one backend and from the wall clock in the other)."""
    out: dict[str, Any] = {"sessions": store.list_sessions()}
    for key in KEYS:
        md = store.get_session_metadata(key)
        if md is not None and not times:
            md = md.__class__(**{**{f: getattr(md, f) for f in md.__slots__}, "updated_at": None})
        out[key] = (store.session_exists(key), [m.to_dict() for m in store.load(key)], md,
                    store.get_session_state(key), store.get_session_trim_breadcrumb(key))
        if out[key][0]:
            out[key] += (store.page(key, limit=2), store.page(key, limit=2, after="", whole_turns=True),
                         store.page(key, limit=3, breakpoint=True), store.get_messages(key, offset=1, limit=2),
                         store.get_message_count(key))
            ids = [m["id"] for m in out[key][1]]
            if ids:
                out[key] += (store.page(key, limit=1, after=ids[0]), store.page(key, limit=2, before=ids[-1],
                             whole_turns=True), store.page(key, ts_before=1_800_000_000_050, limit=2),
                             store.get_message(key, ids[len(ids) // 2]))
    out["search"] = sorted(md.key for md in store.search(SessionQuery("hello")))
    out["search-alias"] = sorted(md.key for md in store.search(SessionQuery("", agent_alias="planner")))
    out["running"] = [md.key for md in store.list_running_sessions()]
    return out


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


def transcripts(root: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.jsonl"))}


def sidecars(root: pathlib.Path) -> dict[str, Any]:
    return {p.name: orjson.loads(p.read_bytes()) for p in sorted(root.glob("*.meta.json"))}


@settings(max_examples=300 if SOAK else 20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=st.lists(ops, min_size=1, max_size=20))
def test_same_operations_same_results_then_migrate_both_ways(program: list[Op]) -> None:
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="jsonl-cross-"))
    clock = Clock()
    jsonl = SessionStore(tmp / "jsonl", durability="flush", clock=clock)
    db = SqliteSessionStore(tmp / "s.db", durability="flush", clock=clock)
    stores: list[Any] = [jsonl, db]
    try:
        for step, op in enumerate(program):
            clock.now += 7
            got_jsonl, got_db = call(jsonl, op, step), call(db, op, step)
            assert got_jsonl == got_db, f"step {step} {op}: JSONL {got_jsonl!r}, SQLite {got_db!r}"
            assert observe(jsonl) == observe(db), f"after step {step} {op}"
        assert db.verify().ok, db.verify().findings  # index columns, counters, positions agree with the rows
        # migrate both ways, and back
        into_db = SqliteSessionStore(tmp / "copy.db")
        into_jsonl = SessionStore(tmp / "copy")
        back = SessionStore(tmp / "back")
        stores += [into_db, into_jsonl, back]
        assert migrate(jsonl, into_db).copied == jsonl.list_sessions()
        assert migrate(db, into_jsonl).copied == db.list_sessions()
        assert migrate(into_db, back).ok
        assert observe(into_db, times=True) == observe(jsonl, times=True)
        assert observe(into_jsonl, times=True) == observe(db, times=True)
        assert observe(back, times=True) == observe(jsonl, times=True)
        assert transcripts(tmp / "back") == transcripts(tmp / "jsonl")
        assert sidecars(tmp / "back") == sidecars(tmp / "jsonl")
        for key in jsonl.list_sessions():
            assert export_session(db, key) == export_session(into_jsonl, key)
    finally:
        for store in stores:
            store.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_migrate_refuses_an_existing_session_and_reports_progress(tmp_path: pathlib.Path) -> None:
    jsonl = SessionStore(tmp_path / "jsonl")
    for key in ("a", "b", "c"):
        jsonl.append(key, {"role": "user", "content": key})
    jsonl.copy_messages("a", "fork of a")
    db = SqliteSessionStore(tmp_path / "s.db")
    db.append("b", {"role": "user", "content": "already here"})
    seen: list[tuple[int, int, str]] = []
    report = migrate(jsonl, db, progress=lambda done, total, key: seen.append((done, total, key)))
    assert report.copied == ["a", "c", "fork of a"] and list(report.failed) == ["b"]
    assert isinstance(report.failed["b"], SessionExistsError)
    assert [m.content for m in db.load("b")] == ["already here"]
    assert seen == [(1, 4, "a"), (2, 4, "b"), (3, 4, "c"), (4, 4, "fork of a")]
    md = db.get_session_metadata("fork of a")
    assert md is not None and md.parent == "a" and md.fork_point == jsonl.load("a")[-1].id
    db.close()


def test_migrate_copies_corrupt_lines_verbatim(tmp_path: pathlib.Path) -> None:
    """Nothing is dropped or re-encoded: a corrupt line stays corrupt (and refused) in the copy."""
    jsonl = SessionStore(tmp_path / "jsonl")
    jsonl.append("k", {"role": "user", "content": "ok"})
    with open(tmp_path / "jsonl" / "k.jsonl", "ab") as f:
        f.write(b"not json\n")
    db = SqliteSessionStore(tmp_path / "s.db")
    assert migrate(jsonl, db).ok
    assert [m.content for m in db.load("k")] == ["ok"]
    with pytest.raises(Exception, match="line 2"):
        db.try_load("k")
    back = SessionStore(tmp_path / "back")
    assert migrate(db, back).ok
    assert (tmp_path / "back" / "k.jsonl").read_bytes() == (tmp_path / "jsonl" / "k.jsonl").read_bytes()
    db.close()


def test_migrate_keeps_created_at_across_the_whole_64_bit_range(tmp_path: pathlib.Path) -> None:
    """A ``created_at`` one backend accepted moves to the other and back byte for byte
    (SQLite's index column holds it clamped, the line the exact value; verify agrees)."""
    edges = [-(2**63), -1, 0, 2**63 - 1, 2**63, 2**64 - 1]
    jsonl = SessionStore(tmp_path / "jsonl")
    jsonl.append_many("k", [{"role": "user", "content": str(v), "created_at": v} for v in edges])
    db = SqliteSessionStore(tmp_path / "s.db")
    report = migrate(jsonl, db)
    assert report.ok, report.failed
    assert [m.created_at for m in db.load("k")] == edges
    assert db.verify().ok, db.verify().findings
    db.append("k", {"role": "user", "content": "more", "created_at": 2**64 - 1})
    back = SessionStore(tmp_path / "back")
    assert migrate(db, back).ok
    raw = (tmp_path / "back" / "k.jsonl").read_bytes()
    assert raw.startswith((tmp_path / "jsonl" / "k.jsonl").read_bytes())
    assert raw.endswith(b'"created_at":18446744073709551615,"role":"user","kind":"message","content":"more"}\n')
    db.close()
