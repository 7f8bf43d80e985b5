"""The state machine's rules for metadata (every setter, owner-checked delete,
attribution, run-state listings, cleanup, search) and for the history reads (get_message,
get_messages windows, page with every option, whole page walks), each checked against
the reference model."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ..types import ChatMessage, SessionQuery
from .machine_base import ALIASES, KEYS, KEYWORDS, NAMES, OWNERS, REFUSED, MachineBase, pick, to_ms
from .reference import EPOCH, texts_of

#: Setter calls with a value every store refuses (before looking for the session): the
#: call and the error.
INVALID_SETTERS: tuple[tuple[str, tuple[Any, ...], type[Exception]], ...] = (
    ("set_session_name", (5,), TypeError),
    ("set_session_name", ("lone \ud800",), ValueError),
    ("set_session_agent_alias", (None,), TypeError),
    ("set_session_context", (["not", "a", "mapping"],), TypeError),
    ("set_session_context", ({"k": 1},), TypeError),
    ("set_session_principal", ("",), ValueError),
    ("set_session_state", ("done",), ValueError),
    ("set_session_state", ("Running",), ValueError),
    ("set_session_state", ("",), ValueError),
    ("set_session_state", (None,), ValueError),
)
_contexts = st.dictionaries(st.sampled_from(["cwd", "model", "\u00e9"]), st.text(max_size=5), max_size=2)


class ReadRules(MachineBase):
    """Rules for metadata and the history reads."""

    # -- metadata ---------------------------------------------------------------------
    @rule(key=KEYS, data=st.data())
    def set_metadata(self, key: str, data: st.DataObject) -> None:
        """One setter, on an existing or a missing session (SessionNotFoundError, nothing
        created), sometimes with a value it must refuse (TypeError / ValueError, also on a
        missing session)."""
        if data.draw(st.integers(0, 6), label="invalid?") == 0:
            method, args, error = data.draw(st.sampled_from(INVALID_SETTERS), label="invalid call")
            with pytest.raises(error):
                getattr(self.store, method)(key, *args)
            self.stats["errors checked"] += 1
            return
        which = data.draw(st.sampled_from(["name", "alias", "context", "owner", "breadcrumb", "state"]),
                          label="setter")
        if which == "state":
            self._set_state(key, data.draw(st.sampled_from(["idle", "running", "error"]), label="state"),
                            data.draw(st.none() | st.sampled_from(["t1", "t2"]), label="turn"))
            return
        value: Any = data.draw({
            "name": st.sampled_from(NAMES) | st.text(max_size=8), "alias": st.sampled_from(ALIASES),
            "context": _contexts, "owner": st.sampled_from(OWNERS), "breadcrumb": st.booleans(),
        }[which], label=which)
        method = {"name": "set_session_name", "alias": "set_session_agent_alias", "context": "set_session_context",
                  "owner": "set_session_principal", "breadcrumb": "set_session_trim_breadcrumb"}[which]
        self.same_outcome(lambda: getattr(self.store, method)(key, value), lambda: self.ref.set_fields(key, **{
            which: value}))

    def _set_state(self, key: str, state: str, turn: str | None) -> None:
        """``since`` is the store's clock when the (state, turn) pair changes: read back."""
        session = self.model.get(key)
        with self.window() as w:
            got = self.same_outcome(lambda: self.store.set_session_state(key, state, turn),
                                    lambda: self.ref.session(key) and None)
        if got is REFUSED or session is None:
            return
        if (session.state, session.turn) != (state, None if state == "idle" else turn) or session.since is None:
            read = self.store.get_session_state(key)
            assert read is not None
            since = w.check(to_ms(read.since), f"since of {key!r}")
        else:
            since = 0  # unchanged: the model keeps its own
        self.ref.set_session_state(key, state, turn, since)

    @rule(key=KEYS, owner=st.sampled_from([*OWNERS, ""]))
    def delete_session_owned(self, key: str, owner: str) -> None:
        done = self.store.delete_session_owned(key, owner)
        assert done is self.ref.delete_session_owned(key, owner), f"delete_session_owned returned {done!r}"
        if done:
            self.forget(key)
            self.stats["owner-checked deletions"] += 1

    @rule(op=st.sampled_from(["count", "rename", "clear"]), old=st.sampled_from(ALIASES),
          new=st.sampled_from(ALIASES))
    def attribution(self, op: str, old: str, new: str) -> None:
        if op == "count":
            assert self.store.count_agent_attribution(old) == self.ref.count_agent_attribution(old)
        elif op == "rename":
            assert self.store.rename_agent_attribution(old, new) == self.ref.rename_agent_attribution(old, new)
        else:
            assert self.store.clear_agent_attribution(old) == self.ref.rename_agent_attribution(old, None)

    @rule(ttl=st.sampled_from([10**6] * 6 + [0, 2]))
    def cleanup_stale(self, ttl: int) -> None:
        """A huge TTL deletes nothing; 2 hours deletes the sessions aged past it; zero
        deletes every session. Never a ``running`` one."""
        doomed = [k for k, s in self.model.items() if s.state != "running" and (ttl == 0 or (
            ttl == 2 and k in self.aged))]
        assert self.store.cleanup_stale(ttl) == len(doomed)
        for k in doomed:
            self.ref.delete_session(k)
            self.forget(k)
        self.stats["sessions deleted by cleanup_stale"] += len(doomed)
        self.stats["aged sessions deleted by cleanup_stale"] += len(doomed) if ttl == 2 else 0

    @rule(threshold=st.sampled_from([0, 1, 30, 3600]))
    def list_running_and_stuck(self, threshold: int) -> None:
        assert [m.key for m in self.store.list_running_sessions()] == self.ref.list_running_sessions()
        with self.window() as w:
            stuck = [m.key for m in self.store.list_stuck_sessions(threshold)]
        sure = self.ref.list_stuck_sessions(threshold, w.lo - w.slack)
        maybe = self.ref.list_stuck_sessions(threshold, w.hi + w.slack)
        assert set(sure) <= set(stuck) <= set(maybe) and stuck == sorted(stuck), (stuck, sure, maybe)

    @rule(keyword=st.sampled_from(KEYWORDS), alias=st.none() | st.sampled_from(ALIASES),
          limit=st.none() | st.integers(min_value=0, max_value=3), data=st.data())
    def search(self, keyword: str, alias: str | None, limit: int | None, data: st.DataObject) -> None:
        texts = [t for s in self.model.values() for m in s.messages for t in texts_of(m.content) if t]
        texts += [s.name for s in self.model.values() if s.name]
        if texts and data.draw(st.booleans(), label="from a message or name") is True:
            text = data.draw(st.sampled_from(texts), label="text")
            start = data.draw(st.integers(0, len(text) - 1), label="start")
            keyword = text[start : start + data.draw(st.integers(1, 6), label="length")]
        # Matching ignores case: look for the text in other cases too.
        keyword = data.draw(st.sampled_from([keyword, keyword.upper(), keyword.lower(), keyword.swapcase()]),
                            label="case")
        expected = set(self.ref.search(keyword, agent_alias=alias))
        got = self.store.search(SessionQuery(keyword, limit=limit, agent_alias=alias))
        keys = [m.key for m in got]
        assert len(keys) == len(set(keys)), keys
        assert set(keys) <= expected, (keyword, keys, expected)
        assert len(keys) == (len(expected) if limit is None else min(limit, len(expected))), (keyword, keys, expected)
        stamps = [m.updated_at or EPOCH for m in got]
        assert all(a >= b for a, b in itertools.pairwise(stamps)), "search: newest activity first"
        for md in got:
            self.check_metadata(self.store, md, md.key)
        self.stats["search results checked"] += len(keys)

    # -- reads ------------------------------------------------------------------------
    @rule(key=KEYS, data=st.data())
    def get_message(self, key: str, data: st.DataObject) -> None:
        if self.intact(key):
            mid = self.pick_id(data, key, "id")
            assert self.store.get_message(key, mid) == self.ref.get_message(key, mid)

    @rule(key=KEYS, offset=st.integers(0, 30), limit=st.none() | st.integers(0, 30))
    def get_messages(self, key: str, offset: int, limit: int | None) -> None:
        if self.intact(key):
            self.same_outcome(lambda: self.store.get_messages(key, offset=offset, limit=limit),
                              lambda: self.ref.get_messages(key, offset=offset, limit=limit))
            self.same_outcome(lambda: self.store.get_message_count(key), lambda: self.ref.get_message_count(key))

    @rule(key=KEYS, data=st.data(), limit=st.integers(1, 12), breakpoint=st.booleans(), whole_turns=st.booleans(),
          direction=st.sampled_from(["newest", "before", "after", "after-start"]))
    def page(self, key: str, data: st.DataObject, limit: int, breakpoint: bool, whole_turns: bool,
             direction: str) -> None:
        if not self.intact(key):
            return
        session = self.model.get(key)
        options: dict[str, Any] = {"limit": limit, "breakpoint": breakpoint, "whole_turns": whole_turns}
        stamps = sorted({m.created_at for m in session.messages if m.created_at is not None}) if session else []
        if data.draw(st.booleans(), label="ts_before?"):
            options["ts_before"] = pick(data, stamps, "ts_before") if stamps else data.draw(st.integers(0, 2**47))
        if direction == "before":
            options["before"] = self.pick_id(data, key, "cursor")
        elif direction == "after":
            options["after"] = self.pick_id(data, key, "cursor")
        elif direction == "after-start":
            options["after"] = ""
        got = self.same_outcome(lambda: self.store.page(key, **options), lambda: self.ref.page(key, **options))
        self.stats["pages checked"] += got is not REFUSED

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), limit=st.integers(1, 5), filtered=st.booleans())
    def walk_both_ways(self, data: st.DataObject, limit: int, filtered: bool) -> None:
        """Pages walked to the beginning (and from it to the end) concatenate to the
        history (or the part created before ts_before): no gap, no duplicate."""
        key = data.draw(st.sampled_from(sorted(self.model)), label="key")
        if not self.intact(key):
            return
        msgs = self.model[key].messages
        stamps = sorted({m.created_at for m in msgs if m.created_at is not None})
        ts_before = pick(data, stamps, "ts_before") if filtered and stamps else None
        want = [m for m in msgs if ts_before is None or (m.created_at is not None and m.created_at < ts_before)]
        for direction in ("older", "newer"):
            assert self._walk(key, direction, limit, ts_before, len(msgs) + 2) == want, (
                f"{key!r}: pages walked {direction} do not make up the history")
        self.stats["page walks"] += 1

    def _walk(self, key: str, direction: str, limit: int, ts_before: int | None, most: int) -> list[ChatMessage]:
        got: list[ChatMessage] = []
        cursor: str | None = None if direction == "older" else ""
        step: Callable[[str | None], Any] = (
            (lambda c: self.store.page(key, limit=limit, before=c, ts_before=ts_before)) if direction == "older"
            else (lambda c: self.store.page(key, limit=limit, after=c, ts_before=ts_before)))
        for _ in range(most):
            p = step(cursor)
            if direction == "older":
                got[:0] = p.messages
                cursor = p.before
            else:
                got.extend(p.messages)
                cursor = p.after
            assert len(p.messages) <= limit
            if not p.has_more:
                assert cursor is None
                break
        return got


__all__ = ["INVALID_SETTERS", "ReadRules"]
