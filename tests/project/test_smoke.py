from __future__ import annotations

from jsonl_sessions import ChatMessage, SessionStore


def test_append_then_load_round_trips(store: SessionStore) -> None:
    first = store.append("k", {"role": "user", "content": "hi"})
    second = store.append("k", ChatMessage("assistant", [{"type": "text", "text": "yo"}], extra={"name": "bot"}))
    assert first < second
    loaded = store.try_load("k")
    assert [m.id for m in loaded] == [first, second]
    assert loaded[1].content == [{"type": "text", "text": "yo"}]
    assert loaded[1].extra == {"name": "bot"}
