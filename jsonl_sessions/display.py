"""What is shown of a message, built once for every output: the viewer's HTML pages, the
HTML and Markdown exports, and the command line's ``show`` and ``tail``: the role, the
time, the text parts, the tool calls each with its result, a compaction mark. Pure
Python, no dependency, backend-neutral: the viewer and the command line both import it,
and it imports neither.

A tool result is a message with ``tool_call_id`` in its extras; its call is the entry
with that ``id`` in the ``tool_calls`` list of an earlier message (the OpenAI chat
format, :func:`jsonl_sessions.records.calls`). Content blocks in the Anthropic format (what
Claude Code transcripts and the Claude SDKs store) are read the same way: a ``tool_use``
block (``id``, ``name``, ``input``) is a tool call, a ``tool_result`` block
(``tool_use_id``, ``content``) its result. :func:`views` pairs each result with its call
when both are in the messages it is given; a result whose call is not among them stays
where it is (``result_for`` names the call, so the page can link or move it).
:func:`stream_views` does the same over a stream of any length, holding back at most
:data:`HOLD` messages.

Message text has its terminal escape sequences taken out (:mod:`jsonl_sessions.ansi`):
tool output keeps its colours as styled runs (``Part.runs``), prose and arguments lose
them, and a carriage return (``\\r\\n``, or alone) is a line break. Every string meant to
be read then has its control characters made visible
(``\\x1b``, ``\\x00``...: a lone escape or NUL shows as text, by :func:`clean`),
and a text longer than :data:`MAX_TEXT` characters is cut there (``omitted`` says how
much is left out; the message's raw JSON holds all of it). Cost: O(size of the messages).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import orjson

from . import ansi
from .records import tool_call_id_of
from .types import ChatMessage, datetime_of_ms

#: C0 controls but newline and tab, DEL, and C1 controls (0x80-0x9f: 0x9b is a CSI).
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)] if c not in (0x09, 0x0A)}
_CONTROLS_ONE_LINE = {**_CONTROLS, 0x0A: "\\n", 0x09: "\\t"}
# A search finds none in most texts, and costs a fraction of a translate that changes nothing.
_ANY_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_ANY_CONTROL_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f]")


def clean(text: str, *, one_line: bool = False) -> str:
    """``text`` with control characters shown as ``\\xNN`` (with ``one_line``, newlines and
    tabs as ``\\n`` / ``\\t`` too), so no text can repaint or hijack a terminal. Lone
    surrogates become ``\\udxxx``."""
    if (_ANY_CONTROL_ONE_LINE if one_line else _ANY_CONTROL).search(text) is None:
        out = text
    else:
        out = text.translate(_CONTROLS_ONE_LINE if one_line else _CONTROLS)
    if out.isascii():
        return out
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        out = out.encode("utf-8", "backslashreplace").decode("utf-8")
    return out


#: The longest text shown in full (characters); longer texts are cut, the rest is in the raw JSON.
MAX_TEXT = 20_000
#: The roles styled apart; any other role is shown as "other".
ROLES = frozenset({"user", "assistant", "system", "tool", "developer"})

#: Unicode's bidirectional embedding, override and isolate controls: shown as ``\\u202e``
#: and so on, so a message cannot reorder the text around it on screen ("Trojan Source").
_BIDI = {c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}
_ANY_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` as every output shows it: control characters as ``\\xNN`` (by
    :func:`clean`; with ``one_line`` newlines and tabs too) and bidirectional controls as
    ``\\uNNNN``."""
    shown = clean(text, one_line=one_line)
    return shown if shown.isascii() or _ANY_BIDI.search(shown) is None else shown.translate(_BIDI)


def pretty_json(value: Any, *, compact: bool = False) -> str:
    """``value`` as indented JSON (keys in their order; ``compact``: on one line), control
    characters escaped by JSON."""
    try:
        return orjson.dumps(value, option=0 if compact else orjson.OPT_INDENT_2).decode("utf-8")
    except TypeError:
        return visible(repr(value))


def said_at(message: ChatMessage) -> int | None:
    """When ``message`` was said (ms), the time every output shows: its ``created_at``, or,
    for a line holding a Claude Code entry (``extra["claude"]``, as ``import --from
    claude-code`` and the Claude Agent SDK adapter store them, whose ``created_at`` is the
    time the entry was stored), the entry's own ISO 8601 ``timestamp`` when it has one
    that parses."""
    entry = message.extra.get("claude")
    if isinstance(entry, dict):
        stamp = entry.get("timestamp")
        if isinstance(stamp, str):
            try:
                when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                return message.created_at
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return int(when.timestamp() * 1000)
    return message.created_at


def utc_text(ms: int | None) -> str:
    """``created_at`` as ``YYYY-MM-DD HH:MM:SS UTC``; "" when unknown or out of range."""
    when = datetime_of_ms(ms)
    return "" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_text(when: datetime | int | None) -> str:
    """An ISO 8601 UTC time (for ``<time datetime>``), "" when unknown."""
    if isinstance(when, int):
        when = datetime_of_ms(when)
    if when is None:
        return ""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Part:
    """One piece of a message's content: ``text`` (prose, rendered as Markdown), ``code``
    (shown as it is: tool output) or ``json`` (a structured part, shown as JSON under
    ``label``). ``text`` has no terminal escape sequence left. ``runs``: a code part's
    ``text`` cut where its colours change, each piece with its ``ansi-*`` classes ("" for
    none; see :func:`jsonl_sessions.ansi.runs`), empty for other kinds. ``omitted``:
    characters cut off the end (see :data:`MAX_TEXT`)."""

    kind: Literal["text", "code", "json"]
    text: str
    label: str = ""
    omitted: int = 0
    runs: list[ansi.Run] = field(default_factory=list)


@dataclass
class ToolCall:
    """A tool call of an assistant message, with its result when it is in the same view."""

    id: str
    name: str
    arguments: str
    result: MessageView | None = None


@dataclass
class MessageView:
    """A message as it is shown. ``role_class`` is one of :data:`ROLES` or ``other``."""

    id: str
    role: str
    role_class: str
    kind: str
    created_at: int | None
    time: str
    iso: str
    name: str
    parts: list[Part]
    tool_calls: list[ToolCall] = field(default_factory=list)
    result_for: str | None = None
    #: The message's ``tool_result`` content blocks, each shown as a result of its own
    #: (same id, role and time), those whose call is in the same view taken out by :func:`views`.
    results: list[MessageView] = field(default_factory=list)

    @property
    def compaction(self) -> bool:
        return self.kind == "compaction"


def _cut(text: str, limit: int | None = MAX_TEXT) -> tuple[str, int]:
    text = visible(ansi.plain(text))
    if limit is None or len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def _cut_runs(text: str, limit: int | None) -> tuple[list[ansi.Run], int]:
    """The styled runs of ``text`` made visible, cut after ``limit`` characters in all."""
    shown: list[ansi.Run] = []
    room = limit
    omitted = 0
    for piece, classes in ansi.runs(text):
        piece = visible(piece)
        if room is not None and len(piece) > room:
            omitted += len(piece) - room
            piece = piece[:room]
        if piece:
            shown.append((piece, classes))
        if room is not None:
            room -= len(piece)
    return shown, omitted


def _part(kind: Literal["text", "code", "json"], text: str, label: str = "", limit: int | None = MAX_TEXT) -> Part:
    if kind != "json":  # JSON escapes its own; in text, a carriage return ends a line
        text = ansi.line_breaks(text)
    if kind == "code":
        runs, omitted = _cut_runs(text, limit)
        return Part(kind, "".join(piece for piece, _ in runs), visible(label), omitted, runs)
    shown, omitted = _cut(text, limit)
    return Part(kind, shown, visible(label), omitted)


def parts_of(content: Any, *, prose: bool = True, limit: int | None = MAX_TEXT, compact: bool = False) -> list[Part]:
    """The parts of a message's ``content``: a string; in a list, strings and objects with
    a ``text`` string as text, anything else as JSON labelled by its ``type``; an object
    with a ``text`` string as text. ``prose=False`` (tool output): text as code. Each text
    is cut at ``limit`` characters (None: never). ``compact``: JSON on one line."""
    text_kind: Literal["text", "code"] = "text" if prose else "code"
    if content is None:
        return []
    if isinstance(content, str):
        return [_part(text_kind, content, limit=limit)] if content else []
    items: Sequence[Any] = content if isinstance(content, list) else [content]
    parts = []
    for item in items:
        if isinstance(item, str):
            parts.append(_part(text_kind, item, limit=limit))
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            parts.append(_part(text_kind, item["text"], limit=limit))
        else:
            label = item.get("type") if isinstance(item, dict) and isinstance(item.get("type"), str) else ""
            parts.append(_part("json", pretty_json(item, compact=compact), label or type(item).__name__, limit))
    return parts


def _tool_calls(calls: Any, limit: int | None, compact: bool) -> list[ToolCall]:
    """The tool calls of an OpenAI ``tool_calls`` list or of Anthropic ``tool_use`` blocks."""
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        if not isinstance(call, dict):
            out.append(ToolCall("", "?", _cut(pretty_json(call, compact=compact), limit)[0]))
            continue
        function = call.get("function")
        fn: Mapping[str, Any] = function if isinstance(function, dict) else call
        name: str = fn["name"] if isinstance(fn.get("name"), str) else "?"
        args = fn.get("arguments", fn.get("input", ""))
        if isinstance(args, str):
            try:  # OpenAI sends the arguments as a JSON string: show them indented
                args = pretty_json(orjson.loads(args), compact=compact) if args.strip() else ""
            except orjson.JSONDecodeError:
                pass
        else:
            args = pretty_json(args, compact=compact)
        ident = call["id"] if isinstance(call.get("id"), str) else ""
        out.append(ToolCall(visible(ident), visible(name), _cut(args, limit)[0]))
    return out


def view(message: ChatMessage, *, cut: bool = True, compact: bool = False) -> MessageView:
    """One message as shown, alone (its tool calls without results); ``cut=False``: no
    text is cut (the exports); ``compact``: JSON (arguments, structured parts) on one line
    (the command line)."""
    limit = MAX_TEXT if cut else None
    extra = message.extra
    result_for = tool_call_id_of(extra)
    role = message.role
    name = extra.get("name")
    content, uses, results = _blocks(message.content)

    said = said_at(message)

    def shown(parts: list[Part], result_for: str | None) -> MessageView:
        return MessageView(
            id=message.id, role=visible(role), role_class=role if role in ROLES else "other",
            kind=visible(message.kind), created_at=message.created_at, time=utc_text(said),
            iso=iso_text(said), name=visible(name) if isinstance(name, str) else "",
            parts=parts, result_for=visible(result_for) if result_for is not None else None)

    main = shown(parts_of(content, prose=result_for is None and role != "tool", limit=limit, compact=compact),
                 result_for)
    main.tool_calls = _tool_calls(extra.get("tool_calls"), limit, compact) + _tool_calls(uses, limit, compact)
    main.results = [shown(parts_of(block.get("content"), prose=False, limit=limit, compact=compact),
                          block["tool_use_id"]) for block in results]
    return main


def _blocks(content: Any) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """``content`` without its Anthropic ``tool_use`` and ``tool_result`` blocks, and those
    blocks (only a list content has them)."""
    if not isinstance(content, list):
        return content, [], []
    rest, uses, results = [], [], []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use" and isinstance(block.get("id"), str):
            uses.append(block)
        elif kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
            results.append(block)
        else:
            rest.append(block)
    return (rest if uses or results else content), uses, results


#: :func:`stream_views`: how many messages a view may wait for the results of its tool
#: calls before it is given out without them (as :data:`jsonl_sessions.pagination.TURN_SEARCH_LINES`
#: bounds how far back ``page(whole_turns=True)`` looks for a call).
HOLD = 1024


class _Waiting:
    """A view given out once none of its tool calls waits for a result (``open`` of them do)."""

    __slots__ = ("open", "shown")

    def __init__(self, shown: MessageView) -> None:
        self.shown = shown
        self.open = 0


def stream_views(messages: Iterable[ChatMessage], *, cut: bool = True,
                 hold: int | None = HOLD) -> Iterator[MessageView]:
    """The messages as shown, oldest first, as they come: each tool result whose call is
    among the messages before it is attached to that call (the last call with its id
    before it) and left out of the stream. A view is given out once every tool call
    (with an id) of it and of the views before it has its result, or once ``hold``
    messages wait behind it (None: never; then this is :func:`views`): its calls still
    without a result stay so, and a result that comes later is given out on its own
    (``result_for`` names its call), as on a page of the viewer.

    Memory: the views of at most ``hold`` messages waiting (with the results attached to
    them) and the one being read. Cost: O(size of the messages)."""
    waiting: deque[_Waiting] = deque()
    # call id -> (the call, the view waiting for its result)
    open_calls: dict[str, tuple[ToolCall, _Waiting]] = {}

    def attach(result: MessageView) -> bool:
        found = open_calls.pop(result.result_for or "", None)
        if found is None:
            return False
        call, owner = found
        call.result = result
        owner.open -= 1
        return True

    def release(entry: _Waiting) -> MessageView:
        for call in entry.shown.tool_calls:
            found = open_calls.get(call.id) if call.id and call.result is None else None
            if found is not None and found[0] is call:
                del open_calls[call.id]  # given out without its result: a later one stands alone
        return entry.shown

    for message in messages:
        shown = view(message, cut=cut)
        keep = not (shown.result_for is not None and attach(shown))
        if keep and shown.results:
            shown.results = [result for result in shown.results if not attach(result)]
            keep = bool(shown.parts or shown.tool_calls or shown.results)  # else: only results, each in its call
        if keep:
            entry = _Waiting(shown)
            for call in shown.tool_calls:
                if call.id:
                    replaced = open_calls.get(call.id)
                    if replaced is not None:
                        replaced[1].open -= 1  # an earlier call with that id gets no result now
                    open_calls[call.id] = (call, entry)
                    entry.open += 1
            waiting.append(entry)
        while waiting and (waiting[0].open <= 0 or (hold is not None and len(waiting) > hold)):
            yield release(waiting.popleft())
    while waiting:
        yield release(waiting.popleft())


def views(messages: Iterable[ChatMessage], *, cut: bool = True) -> list[MessageView]:
    """The messages as shown, oldest first; each tool result whose call is among them is
    attached to that call (the last call with its id before it) and left out of the list.
    Memory: every view at once (see :func:`stream_views` for a stream)."""
    return list(stream_views(messages, cut=cut, hold=None))


def raw_json(message: ChatMessage) -> str:
    """The message as stored (every field), indented JSON."""
    return pretty_json(message.to_dict())


__all__ = ["HOLD", "MAX_TEXT", "ROLES", "MessageView", "Part", "ToolCall", "clean", "iso_text", "parts_of",
           "pretty_json", "raw_json", "said_at", "stream_views", "utc_text", "view", "views", "visible"]
