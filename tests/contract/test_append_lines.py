"""``append_lines``: another tool's JSONL lines appended through the store, on every backend."""

from __future__ import annotations

from typing import Any

import pytest
from stores import Backend

from jsonl_sessions import InvalidMessageError
from jsonl_sessions.ids import next_id, now_ms
from jsonl_sessions.outside import append_lines


def test_lines_become_messages_with_every_field(store: Any) -> None:
    first = store.append("k", {"role": "user", "content": "hi"})
    own = next_id(None, now_ms() + 3_600_000)  # a caller's ULID an hour ahead: after the ids made meanwhile
    assert own is not None
    ids = append_lines(store, "k", [
        b'{"role":"tool","content":{"out":1},"tool_call_id":"c1"}\n',
        '{"role": "assistant", "content": "\u00e9t\u00e9", "created_at": 5}\r\n',
        b'{"role":"assistant","content":"no newline","id":"' + own.encode() + b'"}',
    ])
    assert ids[-1] == own and ids[0] > first
    loaded = store.try_load("k")
    assert [m.id for m in loaded] == [first, *ids]
    assert loaded[1].extra == {"tool_call_id": "c1"} and loaded[1].content == {"out": 1}
    assert loaded[2].created_at == 5 and loaded[2].content == "\u00e9t\u00e9"


def test_a_bad_line_is_refused_by_number_and_nothing_is_written(backend: Backend, store: Any) -> None:
    store.append("k", {"role": "user", "content": "hi"})
    before = backend.state(store)
    for bad in [b"", b"[1]", b"{not json", b'{"content":"no role"}', b'{"role":"a"}\n{"role":"b"}']:
        with pytest.raises(InvalidMessageError) as caught:
            append_lines(store, "k", [b'{"role":"user","content":"fine"}\n', bad])
        assert caught.value.key == "k" and "line 2" in str(caught.value), bad
    backend.assert_unchanged(store, before)
