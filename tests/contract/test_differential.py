"""The three backends side by side: the same random calls, the same answers.

A Hypothesis property runs one random sequence of calls on a JSONL ``SessionStore``, a
``SqliteSessionStore`` and a ``MemorySessionStore`` (same clock, the id generator
re-seeded before each call, so all three assign the same ids) and requires, call by
call, the same result or the same exception type, and the same observable state
afterwards. The arguments go for the edges: ``created_at`` across and past the 64-bit
range (and a bool), window offsets and limits past 2**63, negative and bool ones, page
limits of any size, empty and unknown cursors, hostile and invalid keys, empty names,
NUL and lone surrogates in text, unicode everywhere. (tests/contract/test_sqlite_cross.py holds
JSONL and SQLite to the same on the common mutations, then migrates between them.)
"""

from __future__ import annotations

import dataclasses
import pathlib
import random
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from _budget import sized
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonl_sessions import ChatMessage, Page, SessionMetadata, SessionQuery, SessionStore
from jsonl_sessions.sqlite import SqliteSessionStore
from jsonl_sessions.testing.memory import MemorySessionStore
from jsonl_sessions.testing.strategies import json_text

KEYS = ["a", "b", "\U0001f99c parrot/../x", "k" * 200, "CON", "A"]
BAD_KEYS = ["", "a\x00b", "\ud800"]
EDGE_INTS = [0, 1, 2, 3, -1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30, -(2**63), -(2**63) - 1]
UNKNOWN = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
#: Every store's max_message_bytes: small enough that the generated content crosses it.
LIMIT = 400

keys = st.sampled_from(KEYS * 8 + BAD_KEYS)
edge_ints = st.sampled_from(EDGE_INTS) | st.integers(min_value=-5, max_value=8)
texts = json_text(12)
created = st.one_of(st.none(), st.none(), st.none(), edge_ints, st.just(True),
                    st.integers(min_value=-(2**63), max_value=2**64 - 1))
caller_ids = st.sampled_from([""] * 12 + ["0" * 26, UNKNOWN, "01ARZ3NDEKTSV4RRFFQ69G5FAV", "x", "\u00e9"])
#: Around max_message_bytes (LIMIT): a line of about 100 bytes plus this text.
long_texts = st.integers(min_value=LIMIT - 130, max_value=LIMIT - 60).map(lambda n: "\u00e9" * (n // 2) + "x" * (n % 2))
contents = st.one_of(texts, texts, long_texts,
                     st.lists(texts | st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2))
messages = st.builds(
    lambda role, content, kind, at, mid, extra: {"role": role, "content": content, "kind": kind,
                                                 **({} if at is None else {"created_at": at}),
                                                 **({"id": mid} if mid else {}), **extra},
    st.sampled_from(["user", "assistant", "tool", "system"] * 4 + ["", "a\x00b", "\ud800"]),
    contents,
    st.sampled_from(["message", "message", "compaction"]),
    created,
    caller_ids,
    st.sampled_from([{}] * 8 + [{"tool_calls": [{"id": "t1"}]}, {"tool_call_id": "t1"}, {"name": "a\x00b"},
                                {"content": float("nan")}, {"meta": 2**70}]),
)
batches = st.lists(messages, max_size=3)
#: A message id named by position in the session ("first", "last"), or a literal.
refs = st.sampled_from([None, "first", "last", "middle", "", UNKNOWN, "\ud800"])
small = st.integers(min_value=0, max_value=5)
windows = st.one_of(st.none(), small, small, edge_ints, st.just(True))

Op = tuple[str, tuple[Any, ...]]
plain_ops = st.one_of(
    st.tuples(st.just("append"), st.tuples(keys, messages)),
    st.tuples(st.just("append_many"), st.tuples(keys, batches)),
    st.tuples(st.just("remove_last"), st.tuples(keys, refs)),
    st.tuples(st.just("update_last"), st.tuples(keys, messages, refs)),
    st.tuples(st.just("rewrite_messages"), st.tuples(keys, batches)),
    st.tuples(st.just("replace"), st.tuples(keys, batches, st.booleans(), st.booleans())),
    st.tuples(st.just("clear_messages"), st.tuples(keys)),
    st.tuples(st.just("delete_session"), st.tuples(keys)),
    st.tuples(st.just("copy_messages"), st.tuples(keys, keys, refs)),
    st.tuples(st.just("truncate_messages"), st.tuples(keys, refs)),
    st.tuples(st.just("get_messages"), st.tuples(keys, windows, windows)),
    st.tuples(st.just("page"), st.tuples(keys, st.one_of(small, small, edge_ints, st.just(True)), refs,
                                         st.sampled_from(["before", "after"]),
                                         st.one_of(st.none(), st.none(), edge_ints), st.booleans(), st.booleans())),
    st.tuples(st.just("get_message"), st.tuples(keys, refs)),
    st.tuples(st.just("meta"), st.tuples(keys, st.sampled_from(
        ["name", "alias", "principal", "state", "context", "crumb", "owned", "rename", "count"]), texts)),
    st.tuples(st.just("search"), st.tuples(keys, texts, st.none() | edge_ints)),
    st.tuples(st.just("compact"), st.tuples(keys)),
    st.tuples(st.just("load_with_timestamps"), st.tuples(keys)),
    st.tuples(st.just("as_message"), st.tuples(keys, messages)),
)
#: A plain op, or a few of them inside ``lock(key)`` (the block is not a transaction:
#: each call's result and effect must be the same as outside it).
ops = plain_ops | st.tuples(st.just("locked"), st.tuples(keys, st.lists(plain_ops, min_size=1, max_size=3)))


def resolve(store: Any, key: str, ref: str | None) -> str | None:
    """The id ``ref`` names in ``store``'s session ``key`` (the same in every store)."""
    if ref not in ("first", "last", "middle"):
        return ref
    try:
        ids = [m.id for m in store.load(key)]
    except Exception:  # noqa: BLE001 - an invalid key: any id will do, the call refuses the key
        return UNKNOWN
    if not ids:
        return UNKNOWN
    return {"first": ids[0], "last": ids[-1], "middle": ids[len(ids) // 2]}[ref]


META: dict[str, Callable[[Any, str, str], Any]] = {
    "name": lambda s, k, t: s.set_session_name(k, t),
    "alias": lambda s, k, t: s.set_session_agent_alias(k, t),
    "principal": lambda s, k, t: s.set_session_principal(k, t),
    "state": lambda s, k, t: s.set_session_state(k, t if t in ("", "\x00") else "running", t),
    "context": lambda s, k, t: s.set_session_context(k, {t: t}),
    "crumb": lambda s, k, t: s.set_session_trim_breadcrumb(k, bool(t)),
    "owned": lambda s, k, t: s.delete_session_owned(k, t),
    "rename": lambda s, _k, t: s.rename_agent_attribution(t, "renamed"),
    "count": lambda s, _k, t: s.count_agent_attribution(t),
}


def run(store: Any, op: Op) -> Any:
    name, args = op
    key = args[0]
    if name == "remove_last":
        return store.remove_last(key, expected_id=resolve(store, key, args[1]))
    if name == "update_last":
        return store.update_last(key, args[1], expected_id=resolve(store, key, args[2]))
    if name == "replace":
        if args[3]:
            return store.replace_conversation_state_if_exists(key, args[1], args[2])
        return store.replace_conversation_state(key, args[1], args[2])
    if name == "copy_messages":
        return store.copy_messages(key, args[1], up_to_message_id=resolve(store, key, args[2]))
    if name == "truncate_messages":
        return store.truncate_messages(key, resolve(store, key, args[1]))
    if name == "get_messages":
        return store.get_messages(key, offset=args[1], limit=args[2])
    if name == "page":
        _, limit, ref, side, ts_before, breakpoint, whole_turns = args
        cursor = {} if ref is None else {side: resolve(store, key, ref)}
        return store.page(key, limit=limit, ts_before=ts_before, breakpoint=breakpoint, whole_turns=whole_turns,
                          **cursor)
    if name == "get_message":
        return store.get_message(key, resolve(store, key, args[1]))
    if name == "meta":
        return META[args[1]](store, key, args[2])
    if name == "search":
        return sorted(md.key for md in store.search(SessionQuery(args[1], limit=args[2])))
    if name == "as_message":  # the same message handed over as a ChatMessage
        return store.append(key, ChatMessage.from_dict(args[1]))
    if name in ("append", "append_many", "rewrite_messages"):
        return getattr(store, name)(key, args[1])
    return getattr(store, name)(key)


def plain(value: Any) -> Any:
    """A comparable form of a result: messages as dicts, activity times dropped."""
    if isinstance(value, ChatMessage):
        return value.to_dict()
    if isinstance(value, Page):
        return (plain(value.messages), value.has_more, value.before, value.after)
    if isinstance(value, SessionMetadata):
        return dataclasses.replace(value, updated_at=None)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def call(store: Any, op: Op, seed: int) -> Any:
    random.seed(seed)
    if op[0] == "locked":
        try:
            with store.lock(op[1][0]):
                return [call(store, inner, seed * 10 + i) for i, inner in enumerate(op[1][1])]
        except Exception as exc:  # noqa: BLE001 - an invalid key
            return type(exc).__name__
    try:
        return plain(run(store, op))
    except Exception as exc:  # noqa: BLE001 - the type is what every backend must agree on
        return type(exc).__name__


def observe(store: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"sessions": store.list_sessions()}
    for key in KEYS:
        out[key] = (store.session_exists(key), plain(store.load(key)), plain(store.get_session_metadata(key)),
                    plain(store.get_session_state(key)), store.get_session_trim_breadcrumb(key))
    out["running"] = sorted(md.key for md in store.list_running_sessions())
    return out


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


@settings(max_examples=sized(25, 300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(program=st.lists(ops, min_size=1, max_size=25))
def test_three_backends_agree_call_by_call(program: list[Op]) -> None:
    program = [("append_many", (KEYS[0], [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                                          {"role": "user", "content": "more"}])), *program]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="jsonl-diff-"))
    clock = Clock()
    stores: dict[str, Any] = {
        "jsonl": SessionStore(tmp / "jsonl", durability="flush", clock=clock, lock_timeout=5,
                              max_message_bytes=LIMIT),
        "sqlite": SqliteSessionStore(tmp / "s.db", durability="flush", clock=clock, lock_timeout=5,
                                     max_message_bytes=LIMIT),
        "memory": MemorySessionStore(clock=clock, lock_timeout=5, max_message_bytes=LIMIT),
    }
    try:
        for step, op in enumerate(program):
            clock.now += 7
            got = {name: call(store, op, step) for name, store in stores.items()}
            assert got["jsonl"] == got["sqlite"] == got["memory"], f"step {step} {op!r}: {got!r}"
            seen = {name: observe(store) for name, store in stores.items()}
            assert seen["jsonl"] == seen["sqlite"] == seen["memory"], f"after step {step} {op!r}"
        assert stores["sqlite"].verify().ok, stores["sqlite"].verify().findings
    finally:
        for store in stores.values():
            store.close()
        shutil.rmtree(tmp, ignore_errors=True)
