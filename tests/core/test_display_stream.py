"""``display.stream_views``: tool calls paired with their results over a stream, holding back
a bounded number of messages, checked against a simple model of the pairing.

The model: walk the messages in order; a result (an OpenAI ``tool`` message or an
Anthropic ``tool_result`` block) goes to the last call with its id before it that no
result took yet. ``views`` (every message at once) must pair exactly so; ``stream_views``
with ``hold`` must give the same views whenever no result comes more than ``hold``
messages after its call, and whatever ``hold``, every message is shown, in order, and no
pairing is made up."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jsonl_sessions import display
from jsonl_sessions.types import ChatMessage

IDS = st.sampled_from(["a", "b", "c"])


def _openai_call(ids: list[str]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}


def _anthropic_call(ids: list[str]) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": "go"}] + [
        {"type": "tool_use", "id": i, "name": "g", "input": {"n": 1}} for i in ids]}


MESSAGE = st.one_of(
    st.just({"role": "user", "content": "hi"}),
    st.lists(IDS, min_size=1, max_size=2).map(_openai_call),
    st.lists(IDS, min_size=1, max_size=2).map(_anthropic_call),
    IDS.map(lambda i: {"role": "tool", "tool_call_id": i, "content": "out"}),
    st.lists(IDS, min_size=1, max_size=2).map(
        lambda ids: {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "r"}
                                                 for i in ids]}),
)
SESSIONS = st.lists(MESSAGE, max_size=40).map(
    lambda items: [ChatMessage.from_dict({**m, "id": f"m{n:03d}"}) for n, m in enumerate(items)])


def _calls(m: ChatMessage) -> list[str]:
    calls = m.extra.get("tool_calls") or []
    blocks = m.content if isinstance(m.content, list) else []
    return [c["id"] for c in calls] + [b["id"] for b in blocks if b.get("type") == "tool_use"]


def _results(m: ChatMessage) -> list[str]:
    blocks = m.content if isinstance(m.content, list) else []
    own = [m.extra["tool_call_id"]] if "tool_call_id" in m.extra else []
    return own + [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]


def model_pairs(messages: list[ChatMessage]) -> tuple[set[tuple[int, int]], int]:
    """(call message index, result message index) of every pairing, and the longest distance."""
    open_calls: dict[str, int] = {}
    pairs: set[tuple[int, int]] = set()
    for n, m in enumerate(messages):
        for ident in _results(m):
            if ident in open_calls:
                pairs.add((open_calls.pop(ident), n))
        for ident in _calls(m):
            open_calls[ident] = n
    return pairs, max((r - c for c, r in pairs), default=0)


def shown_pairs(views: list[display.MessageView]) -> tuple[set[tuple[int, int]], set[int]]:
    """The pairings the views show, and the index of every message they show."""
    pairs: set[tuple[int, int]] = set()
    shown: set[int] = set()

    def walk(m: display.MessageView) -> None:
        shown.add(int(m.id[1:]))
        for result in m.results:
            walk(result)
        for call in m.tool_calls:
            if call.result is not None:
                pairs.add((int(m.id[1:]), int(call.result.id[1:])))
                walk(call.result)

    for m in views:
        walk(m)
    return pairs, shown


@given(SESSIONS)
def test_views_pairs_each_result_with_the_last_open_call_before_it(messages: list[ChatMessage]) -> None:
    pairs, _ = model_pairs(messages)
    assert shown_pairs(display.views(messages, cut=False))[0] == pairs


@given(SESSIONS, st.integers(1, 6))
def test_a_stream_shows_every_message_once_in_order_and_equals_views_within_its_hold(
        messages: list[ChatMessage], hold: int) -> None:
    streamed = list(display.stream_views(iter(messages), cut=False, hold=hold))
    pairs, shown = shown_pairs(streamed)
    assert shown == set(range(len(messages)))  # every message (a message of results: inside the calls)
    tops = [int(m.id[1:]) for m in streamed]
    assert tops == sorted(set(tops))  # each at most once at the top, in order
    model, longest = model_pairs(messages)
    assert pairs <= model  # a pairing given up is shown apart, never made up
    if longest <= hold:
        assert streamed == display.views(messages, cut=False)


def test_a_result_later_than_the_hold_is_shown_on_its_own_naming_its_call() -> None:
    messages = [ChatMessage.from_dict({**m, "id": f"m{n:03d}"}) for n, m in enumerate(
        [_openai_call(["a"]), *({"role": "user", "content": "x"} for _ in range(3)),
         {"role": "tool", "tool_call_id": "a", "content": "late"}])]
    streamed = list(display.stream_views(iter(messages), cut=False, hold=2))
    assert streamed[0].tool_calls[0].result is None
    assert streamed[-1].result_for == "a" and streamed[-1].parts[0].text == "late"
    assert display.views(messages, cut=False)[0].tool_calls[0].result is not None  # unbounded: paired


@given(st.text(st.characters(codec=None, max_codepoint=0x20FF) | st.sampled_from("\u202a\u202e\u2066\u2069\ud800"),
               max_size=12), st.booleans())
def test_clean_and_visible_equal_their_plain_translation(text: str, one_line: bool) -> None:
    """The shortcuts (no control character found, ASCII) change nothing: the same text as
    translating every control character and escaping lone surrogates."""
    controls = display._CONTROLS_ONE_LINE if one_line else display._CONTROLS
    expected = text.translate(controls).encode("utf-8", "backslashreplace").decode("utf-8")
    assert display.clean(text, one_line=one_line) == expected
    assert display.visible(text, one_line=one_line) == expected.translate(display._BIDI)


@pytest.mark.parametrize("entry, want", [
    ({"timestamp": "2026-01-05T10:00:01.250Z"}, 1_767_607_201_250),  # a Claude Code entry: its own time
    ({"timestamp": "2026-01-05T11:00:01.250+01:00"}, 1_767_607_201_250),
    ({"timestamp": "2026-01-05T10:00:01"}, 1_767_607_201_000),  # no zone: UTC
    ({"timestamp": "yesterday"}, 42),  # not a time: the stored one
    ({"timestamp": 5}, 42),
    ({}, 42),
    ("not an entry", 42),
])
def test_a_claude_code_entry_shows_when_it_was_said(entry: object, want: int) -> None:
    message = ChatMessage("user", "hi", created_at=42, extra={"claude": entry})
    assert display.said_at(message) == want
    assert display.view(message).time == display.utc_text(want)
    assert display.said_at(ChatMessage("user", "hi", created_at=42)) == 42
