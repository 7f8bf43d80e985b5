"""The message-history API on every backend: message counts, windows (``get_messages``),
revert (``truncate_messages``) and ``page``, against plain-list expectations and the
reference model's page (``jsonl_sessions.testing.reference.page``) on every cursor and
option, and forks in opposite directions at once (both guards taken in one order, never
crosswise). (What a JSONL transcript adds, corrupt lines, torn tails, a BOM, the bytes each
read costs, is in jsonl/test_history.py.)"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from stores import Backend

from jsonl_sessions import (
    ChatMessage,
    MessageNotFoundError,
    Page,
    SessionExistsError,
    SessionNotFoundError,
    SessionStore,
)
from jsonl_sessions.testing import reference

# What page() must return: the reference model's page.
model_page = reference.page


def msg(i: int, pad: int = 0, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": f"m{i}", **({"pad": "p" * pad} if pad else {}), **extra}


def make(store: SessionStore, key: str, n: int, *, seed: int = 0, max_pad: int = 0) -> list[str]:
    rng = random.Random(seed)
    return store.append_many(key, [msg(i, rng.randint(0, max_pad) if max_pad else 0) for i in range(n)])


def test_count_of_missing_session_raises_key_error(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError) as info:
        store.get_message_count("nope")
    assert isinstance(info.value, KeyError)
    store.append("k", msg(0))
    store.append_message("k", msg(1))
    assert store.get_message_count("k") == 2
    store.clear_messages("k")
    assert store.get_message_count("k") == 0


def test_get_messages_windows_equal_slices_of_load(store: SessionStore) -> None:
    make(store, "k", 500, max_pad=2000, seed=5)
    full = store.load("k")
    n = len(full)
    cases = [(0, None), (0, 0), (0, 1), (0, n), (0, n + 5), (n, None), (n, 3), (n + 10, 2), (n - 1, None),
             (n - 50, 50), (n - 50, 10), (249, 2), (250, 1), (251, 7), (1, n), (123, None)]
    rng = random.Random(1)
    cases += [(rng.randrange(n + 3), rng.choice([None, rng.randrange(60)])) for _ in range(60)]
    for offset, limit in cases:
        want = full[offset:] if limit is None else full[offset : offset + limit]
        assert store.get_messages("k", offset=offset, limit=limit) == want, (offset, limit)
    with pytest.raises(SessionNotFoundError):
        store.get_messages("missing")
    for bad in ({"limit": -1}, {"offset": -1}, {"limit": 1.5}, {"offset": None}):
        with pytest.raises(ValueError):
            store.get_messages("k", **bad)  # type: ignore[arg-type]


def test_copy_messages_refusals_create_nothing(store: SessionStore, backend: Backend) -> None:
    ids = make(store, "src", 5)
    store.append("taken", msg(0))
    before = backend.state(store, ("t1", "t2", "t3"))
    with pytest.raises(SessionExistsError):
        store.copy_messages("src", "taken")
    with pytest.raises(SessionExistsError):
        store.copy_messages("src", "src")
    with pytest.raises(SessionNotFoundError):
        store.copy_messages("missing", "t1")
    with pytest.raises(MessageNotFoundError):
        store.copy_messages("src", "t2", up_to_message_id="0" * 26)
    with pytest.raises(MessageNotFoundError):
        store.copy_messages("src", "t3", up_to_message_id=ids[2] + "x")
    backend.assert_unchanged(store, before, new_lock_ok=True)  # (JSONL: only lock files of the would-be targets)
    assert not any(store.session_exists(k) for k in ("t1", "t2", "t3"))


def test_truncate_messages_reverts_and_counts(store: SessionStore) -> None:
    ids = make(store, "k", 20)
    full = store.load("k")
    assert store.truncate_messages("k", ids[-1]) == 0
    assert store.truncate_messages("k", ids[11]) == 8
    assert store.load("k") == full[:12] and store.get_message_count("k") == 12
    new = store.append("k", msg(50))
    assert new > ids[11] and store.get_message_count("k") == 13
    assert store.truncate_messages("k", ids[0]) == 12
    assert store.load("k") == full[:1]
    with pytest.raises(SessionNotFoundError):
        store.truncate_messages("missing", ids[0])


def turn_session(store: SessionStore, key: str) -> list[ChatMessage]:
    """user, assistant(tool_calls a,b), tool a, tool b, assistant, user, compaction,
    assistant(tool_calls c), tool c, orphan tool result, user."""
    rows: list[dict[str, Any]] = [
        {"role": "user", "content": "do it", "created_at": 50},
        {"role": "assistant", "content": None, "created_at": 10,
         "tool_calls": [{"id": "a", "type": "function"}, {"id": "b", "type": "function"}]},
        {"role": "tool", "tool_call_id": "a", "content": "A", "created_at": 60},
        {"role": "tool", "tool_call_id": "b", "content": "B", "created_at": 20},
        {"role": "assistant", "content": "done", "created_at": 70},
        {"role": "user", "content": "more", "created_at": 30},
        {"role": "system", "kind": "compaction", "content": "summary", "created_at": 80},
        {"role": "assistant", "content": None, "created_at": 40, "tool_calls": [{"id": "c"}]},
        {"role": "tool", "tool_call_id": "c", "content": "C", "created_at": 90},
        {"role": "tool", "tool_call_id": "zzz", "content": "orphan", "created_at": 45},
        {"role": "user", "content": "end", "created_at": 100},
    ]
    store.append_many(key, rows)
    return store.load(key)


def all_page_calls(msgs: list[ChatMessage]) -> Iterator[dict[str, Any]]:
    cursors_b: list[str | None] = [None, *[m.id for m in msgs]]
    for limit in (1, 2, 3, 5, 100):
        for flags in ({}, {"breakpoint": True}, {"whole_turns": True}, {"breakpoint": True, "whole_turns": True}):
            for ts in (None, 0, 35, 65, 10**6):
                for b in cursors_b:
                    yield {"limit": limit, "before": b, "ts_before": ts, **flags}
                for a in ["", *[m.id for m in msgs]]:
                    yield {"limit": limit, "after": a, "ts_before": ts, **flags}


def test_page_agrees_with_the_model_on_every_cursor_and_option(store: SessionStore) -> None:
    msgs = turn_session(store, "k")
    checked = 0
    for call in all_page_calls(msgs):
        assert store.page("k", **call) == model_page(msgs, **call), call
        checked += 1
    assert checked > 2000


def test_page_examples(store: SessionStore) -> None:
    msgs = turn_session(store, "k")
    c = [m.content for m in msgs]
    p = store.page("k", limit=2)
    assert [m.content for m in p.messages] == c[-2:] and p.has_more and p.before == msgs[-2].id and p.after is None
    # the page [tool a, tool b] is widened to the assistant message that made both calls
    p = store.page("k", limit=2, before=msgs[4].id, whole_turns=True)
    assert [m.content for m in p.messages] == [None, "A", "B"] and p.before == msgs[1].id and p.after == msgs[3].id
    # an orphan tool result (no call anywhere) is left alone
    p = store.page("k", limit=1, before=msgs[10].id, whole_turns=True)
    assert [m.content for m in p.messages] == ["orphan"]
    # forward: the page is extended so the next one does not begin with a tool result
    p = store.page("k", limit=2, after=msgs[0].id, whole_turns=True)
    assert [m.content for m in p.messages] == [None, "A", "B"] and p.after == msgs[3].id
    # history since the last compaction
    p = store.page("k", limit=100, breakpoint=True)
    assert [m.content for m in p.messages] == c[6:] and p.has_more and p.before == msgs[6].id
    # created before t=35 (created_at is not monotonic here)
    p = store.page("k", limit=100, ts_before=35)
    assert [m.created_at for m in p.messages] == [10, 20, 30] and not p.has_more and p.after == msgs[5].id


def test_page_errors(store: SessionStore) -> None:
    store.append("k", msg(0))
    with pytest.raises(SessionNotFoundError):
        store.page("missing")
    with pytest.raises(MessageNotFoundError):
        store.page("k", before="0" * 26)
    with pytest.raises(MessageNotFoundError):
        store.page("k", after="Z" * 26)
    for bad in ({"limit": 0}, {"limit": -3}, {"limit": True}, {"before": "a", "after": "b"}, {"ts_before": 1.5}):
        with pytest.raises(ValueError):
            store.page("k", **bad)  # type: ignore[arg-type]
    store.clear_messages("k")
    assert store.page("k") == Page([], False, None, None)
    assert store.page("k", after="") == Page([], False, None, None)


def test_opposite_forks_do_not_deadlock(backend: Backend) -> None:
    """copy(a, b) and copy(b, a) both hold both guards: taken in one order, never crosswise."""
    store = backend.open(lock_timeout=20)
    store.append("a", msg(0))
    store.append("b", msg(1))
    errors: list[BaseException] = []

    def run(src: str, dst: str) -> None:
        for _ in range(150):
            try:
                store.copy_messages(src, dst)
            except SessionExistsError:
                pass
            except Exception as exc:  # noqa: BLE001 - a LockTimeoutError would be a deadlock
                errors.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in [("a", "b"), ("b", "a")] * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
