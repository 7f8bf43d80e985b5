"""A Hypothesis state machine over the history API together with the mutations it must
stay right across, checked against a plain model: a dict ``key -> list[ChatMessage]``
(a session exists iff its key is in the dict) plus each fork's ``(parent, fork_point)``.

Rules: append / append_many (messages with tool calls, tool results, compaction
summaries and caller-chosen, non-monotonic created_at), remove_last, update_last,
rewrite_messages, delete_session, copy_messages (forks of forks, every refusal),
truncate_messages (revert, then append), and the reads get_message, get_message_count,
get_messages windows, page with every option (against ``model_page`` from
test_history.py) and whole walks in both directions (the concatenated pages equal the
history: no gap, no duplicate). The clock is the machine's (frozen, stepped, stepped
back). After every step a *fresh* store on the same root must agree with the model.

Budget: ~20-30 s by default; ``JSONL_SESSIONS_SOAK=1`` runs ten times the examples.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from test_history import model_page

from jsonl_sessions import (
    ChatMessage,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStore,
)
from jsonl_sessions.keys import key_to_stem

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
EXAMPLES = 150  # per durability mode
STEPS = 40
START_MS = 1_700_000_000_000
KEYS = ["a", "b", "fork/1", "\u00fcber", "k" * 130]  # the last one has a hashed file name
TOOL_IDS = ["t1", "t2", "t3", ""]
UNKNOWN_ID = "0" * 26


@dataclass(frozen=True)
class Spec:
    role: str
    content: Any
    kind: str
    created_at: int | None
    calls: tuple[str, ...]  # tool_calls ids (assistant tool call) or ()
    result_of: str | None  # tool_call_id (tool result) or None

    def build(self, message_id: str = "") -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content, "kind": self.kind}
        if self.created_at is not None:
            d["created_at"] = self.created_at
        if message_id:
            d["id"] = message_id
        d.update(self.extra())
        return d

    def extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.calls:
            extra["tool_calls"] = [{"id": c, "type": "function", "function": {"name": "f"}} for c in self.calls]
        if self.result_of is not None:
            extra["tool_call_id"] = self.result_of
        return extra

    def expected(self, message_id: str, created_at: int) -> ChatMessage:
        return ChatMessage(self.role, self.content, id=message_id, created_at=created_at, kind=self.kind,
                           extra=self.extra())


specs = st.one_of(
    st.builds(Spec, role=st.sampled_from(["user", "assistant", "system"]),
              content=st.text(max_size=8) | st.none() | st.lists(st.integers(-5, 5), max_size=2),
              kind=st.sampled_from(["message", "message", "compaction"]),
              created_at=st.none() | st.integers(START_MS - 10_000, START_MS + 10_000),
              calls=st.just(()), result_of=st.none()),
    st.builds(Spec, role=st.just("assistant"), content=st.none(), kind=st.just("message"),
              created_at=st.none() | st.integers(START_MS - 10_000, START_MS + 10_000),
              calls=st.lists(st.sampled_from(TOOL_IDS), min_size=1, max_size=2, unique=True).map(tuple),
              result_of=st.none()),
    st.builds(Spec, role=st.just("tool"), content=st.text(max_size=4), kind=st.just("message"),
              created_at=st.none() | st.integers(START_MS - 10_000, START_MS + 10_000),
              calls=st.just(()), result_of=st.sampled_from(TOOL_IDS)),
)
keys = st.sampled_from(KEYS)
page_options = st.fixed_dictionaries({
    "limit": st.integers(1, 12),
    "ts_before": st.none() | st.integers(START_MS - 12_000, START_MS + 12_000),
    "breakpoint": st.booleans(),
    "whole_turns": st.booleans(),
})


class HistoryMachine(RuleBasedStateMachine):
    durability = "fsync"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="jsonl-hm-")
        self.root = os.path.join(self.tmp, "store")
        self.now = START_MS
        self.store = self._open()
        self.sessions: dict[str, list[ChatMessage]] = {}
        self.forks: dict[str, tuple[str, str | None]] = {}  # key -> (parent, fork_point)

    def _open(self) -> SessionStore:
        return SessionStore(self.root, durability=self.durability, clock=lambda: self.now)  # type: ignore[arg-type]

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _created(self, spec: Spec) -> int:
        return self.now if spec.created_at is None else spec.created_at

    def _pick_id(self, data: st.DataObject, key: str, label: str) -> str:
        """An id of the session (when it has any) or an unknown one."""
        ids = [m.id for m in self.sessions.get(key, [])]
        return data.draw(st.sampled_from(ids) if ids and data.draw(st.integers(0, 5), label) else
                         st.sampled_from([UNKNOWN_ID, "Z" * 26]), label)

    def _forget(self, key: str) -> None:
        self.sessions.pop(key, None)
        self.forks.pop(key, None)

    # -- clock and reopening ----------------------------------------------------------
    @rule(delta=st.sampled_from([0, 0, 1, 7, 1000, -3000]))
    def step_clock(self, delta: int) -> None:
        self.now += delta

    @rule()
    def reopen(self) -> None:
        self.store = self._open()

    # -- mutations ---------------------------------------------------------------------
    @rule(key=keys, spec=specs)
    def append(self, key: str, spec: Spec) -> None:
        new = self.store.append_message(key, spec.build())
        msgs = self.sessions.setdefault(key, [])
        assert not msgs or new > msgs[-1].id
        msgs.append(spec.expected(new, self._created(spec)))

    @rule(key=keys, batch=st.lists(specs, min_size=1, max_size=6))
    def append_many(self, key: str, batch: list[Spec]) -> None:
        got = self.store.append_many(key, [s.build() for s in batch])
        self.sessions.setdefault(key, []).extend(s.expected(i, self._created(s)) for s, i in zip(batch, got))

    @rule(key=keys)
    def remove_last(self, key: str) -> None:
        msgs = self.sessions.get(key)
        assert self.store.remove_last(key) is bool(msgs)
        if msgs:
            msgs.pop()

    @rule(key=keys, spec=specs)
    def update_last(self, key: str, spec: Spec) -> None:
        msgs = self.sessions.get(key)
        assert self.store.update_last(key, spec.build()) is bool(msgs)
        if msgs:
            old = msgs[-1]
            msgs[-1] = spec.expected(old.id, old.created_at if spec.created_at is None else spec.created_at)  # type: ignore[arg-type]

    @rule(key=keys, keep=st.lists(st.booleans(), max_size=30), new=st.lists(specs, max_size=3))
    def rewrite_messages(self, key: str, keep: list[bool], new: list[Spec]) -> None:
        old = self.sessions.get(key, [])
        kept = [m for m, k in zip(old, keep) if k]
        self.store.rewrite_messages(key, [*kept, *(s.build() for s in new)])
        loaded = self.store.try_load(key)
        assert loaded[: len(kept)] == kept and len(loaded) == len(kept) + len(new)
        if key not in self.sessions:
            self.forks.pop(key, None)
        self.sessions[key] = kept + [s.expected(m.id, self._created(s)) for s, m in zip(new, loaded[len(kept):])]

    @rule(key=keys)
    def delete_session(self, key: str) -> None:
        assert self.store.delete_session(key) is (key in self.sessions)
        self._forget(key)

    @rule(source=keys, dest=keys, data=st.data())
    def copy_messages(self, source: str, dest: str, data: st.DataObject) -> None:
        target = dest  # ("target" is a reserved rule argument)
        up_to: str | None = None if data.draw(st.booleans(), "all") else self._pick_id(data, source, "up_to")
        src = self.sessions.get(source)
        if src is None:
            with pytest.raises(SessionNotFoundError):
                self.store.copy_messages(source, target, up_to_message_id=up_to)
            return
        if target in self.sessions:
            with pytest.raises(SessionExistsError):
                self.store.copy_messages(source, target, up_to_message_id=up_to)
            return
        ids = [m.id for m in src]
        if up_to is not None and up_to not in ids:
            with pytest.raises(MessageNotFoundError):
                self.store.copy_messages(source, target, up_to_message_id=up_to)
            assert not self.store.session_exists(target)
            return
        end = len(src) if up_to is None else ids.index(up_to) + 1
        fork_point = src[end - 1].id if end else None
        assert self.store.copy_messages(source, target, up_to_message_id=up_to) == fork_point
        self.sessions[target] = list(src[:end])
        self.forks[target] = (source, fork_point)

    @rule(key=keys, data=st.data())
    def truncate_messages(self, key: str, data: st.DataObject) -> None:
        up_to = self._pick_id(data, key, "up_to")
        msgs = self.sessions.get(key)
        if msgs is None:
            with pytest.raises(SessionNotFoundError):
                self.store.truncate_messages(key, up_to)
            return
        ids = [m.id for m in msgs]
        if up_to not in ids:
            with pytest.raises(MessageNotFoundError):
                self.store.truncate_messages(key, up_to)
            return
        keep = ids.index(up_to) + 1
        assert self.store.truncate_messages(key, up_to) == len(msgs) - keep
        del msgs[keep:]

    # -- reads -------------------------------------------------------------------------
    @rule(key=keys, data=st.data())
    def get_message(self, key: str, data: st.DataObject) -> None:
        mid = self._pick_id(data, key, "id")
        want = next((m for m in self.sessions.get(key, []) if m.id == mid), None)
        assert self.store.get_message(key, mid) == want

    @rule(key=keys, offset=st.integers(0, 40), limit=st.none() | st.integers(0, 40))
    def get_messages(self, key: str, offset: int, limit: int | None) -> None:
        msgs = self.sessions.get(key)
        if msgs is None:
            with pytest.raises(SessionNotFoundError):
                self.store.get_messages(key, offset=offset, limit=limit)
            with pytest.raises(SessionNotFoundError):
                self.store.get_message_count(key)
            return
        want = msgs[offset:] if limit is None else msgs[offset : offset + limit]
        assert self.store.get_messages(key, offset=offset, limit=limit) == want
        assert self.store.get_message_count(key) == len(msgs)

    @rule(key=keys, options=page_options, data=st.data())
    def page(self, key: str, options: dict[str, Any], data: st.DataObject) -> None:
        msgs = self.sessions.get(key)
        if msgs is None:
            with pytest.raises(SessionNotFoundError):
                self.store.page(key, **options)
            return
        ids = [m.id for m in msgs]
        direction = data.draw(st.sampled_from(["newest", "before", "after", "after-start"]), "direction")
        if direction == "before":
            options["before"] = self._pick_id(data, key, "cursor")
        elif direction == "after":
            options["after"] = self._pick_id(data, key, "cursor")
        elif direction == "after-start":
            options["after"] = ""
        cursor = options.get("before") or options.get("after")
        if cursor and cursor not in ids:
            with pytest.raises(MessageNotFoundError):
                self.store.page(key, **options)
            return
        assert self.store.page(key, **options) == model_page(msgs, **options)

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), limit=st.integers(1, 7), ts_before=st.none() | st.integers(START_MS - 5000, START_MS + 5000))
    def walk_both_ways(self, data: st.DataObject, limit: int, ts_before: int | None) -> None:
        """Pages walked to the beginning (and from it to the end) concatenate to the
        history, or to the part created before ts_before: no gap, no duplicate."""
        key = data.draw(st.sampled_from(sorted(self.sessions)), "key")
        msgs = self.sessions[key]
        want = [m for m in msgs if ts_before is None or (m.created_at is not None and m.created_at < ts_before)]
        for direction in ("older", "newer"):
            got: list[ChatMessage] = []
            cursor: str | None = None if direction == "older" else ""
            for _ in range(len(msgs) + 2):
                if direction == "older":
                    p = self.store.page(key, limit=limit, before=cursor, ts_before=ts_before)
                    got[:0] = p.messages
                    cursor = p.before
                else:
                    p = self.store.page(key, limit=limit, after=cursor, ts_before=ts_before)
                    got.extend(p.messages)
                    cursor = p.after
                assert len(p.messages) <= limit
                if not p.has_more:
                    assert cursor is None
                    break
            assert got == want, direction

    # -- invariants --------------------------------------------------------------------
    @invariant()
    def fresh_store_agrees_with_model(self) -> None:
        fresh = self._open()
        assert fresh.list_sessions() == sorted(self.sessions)
        for key in KEYS:
            msgs = self.sessions.get(key)
            if msgs is None:
                assert not fresh.session_exists(key)
                continue
            assert fresh.load(key) == msgs, key
            assert fresh.get_message_count(key) == len(msgs)
            assert fresh.page(key, limit=3) == model_page(msgs, limit=3)
            meta = json.loads(pathlib.Path(self.root, key_to_stem(key) + ".meta.json").read_bytes())
            assert (meta.get("parent"), meta.get("fork_point")) == self.forks.get(key, (None, None)), key

    @invariant()
    def only_session_files_in_root(self) -> None:
        for entry in os.scandir(self.root):
            assert entry.is_file(follow_symlinks=False) and not entry.name.endswith(".tmp"), entry.name


def _machine(durability: str) -> type[HistoryMachine]:
    return type(f"HistoryMachine_{durability}", (HistoryMachine,), {"durability": durability})


@pytest.mark.parametrize("durability", ["fsync", "flush"])
def test_history_agrees_with_model(durability: str) -> None:
    run_state_machine_as_test(_machine(durability), settings=settings(
        max_examples=EXAMPLES * (10 if SOAK else 1),
        stateful_step_count=STEPS * (2 if SOAK else 1),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    ))
