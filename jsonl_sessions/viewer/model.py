"""What the viewer and the exports show of a message, built once for every output (the
HTML pages, the HTML export, the Markdown export): the role, the time, the text parts,
the tool calls each with its result, a compaction mark. Pure Python, no dependency.

A tool result is a message with ``tool_call_id`` in its extras; its call is the entry
with that ``id`` in the ``tool_calls`` list of an earlier message (the OpenAI chat
format, :func:`jsonl_sessions.records.calls`). Content blocks in the Anthropic format (what
Claude Code transcripts and the Claude SDKs store) are read the same way: a ``tool_use``
block (``id``, ``name``, ``input``) is a tool call, a ``tool_result`` block
(``tool_use_id``, ``content``) its result. :func:`views` pairs each result with its call
when both are in the messages it is given; a result whose call is not among them stays
where it is (``result_for`` names the call, so the page can link or move it).

Message text has its terminal escape sequences taken out (:mod:`jsonl_sessions.ansi`):
tool output keeps its colours as styled runs (``Part.runs``), prose and arguments lose
them, and a carriage return (``\\r\\n``, or alone) is a line break. Every string meant to
be read then has its control characters made visible
(``\\x1b``, ``\\x00``...: a lone escape or NUL shows as text, by the command line's own
:func:`~jsonl_sessions.cli.output.clean`),
and a text longer than :data:`MAX_TEXT` characters is cut there (``omitted`` says how
much is left out; the message's raw JSON holds all of it). Cost: O(size of the messages).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import orjson

from .. import ansi
from ..cli.output import clean
from ..records import tool_call_id_of
from ..types import ChatMessage, datetime_of_ms

#: The longest text shown in full (characters); longer texts are cut, the rest is in the raw JSON.
MAX_TEXT = 20_000
#: The roles styled apart; any other role is shown as "other".
ROLES = frozenset({"user", "assistant", "system", "tool", "developer"})

#: Unicode's bidirectional embedding, override and isolate controls: shown as ``\\u202e``
#: and so on, so a message cannot reorder the text around it on screen ("Trojan Source").
_BIDI = {c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` as the viewer shows it: control characters as ``\\xNN`` (by the command
    line's :func:`~jsonl_sessions.cli.output.clean`; with ``one_line`` newlines and tabs
    too) and bidirectional controls as ``\\uNNNN``."""
    return clean(text, one_line=one_line).translate(_BIDI)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON (keys in their order), control characters escaped by JSON."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode("utf-8")
    except TypeError:
        return visible(repr(value))


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


def parts_of(content: Any, *, prose: bool = True, limit: int | None = MAX_TEXT) -> list[Part]:
    """The parts of a message's ``content``: a string; in a list, strings and objects with
    a ``text`` string as text, anything else as JSON labelled by its ``type``; an object
    with a ``text`` string as text. ``prose=False`` (tool output): text as code. Each text
    is cut at ``limit`` characters (None: never)."""
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
            parts.append(_part("json", pretty_json(item), label or type(item).__name__, limit))
    return parts


def _tool_calls(calls: Any, limit: int | None) -> list[ToolCall]:
    """The tool calls of an OpenAI ``tool_calls`` list or of Anthropic ``tool_use`` blocks."""
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        if not isinstance(call, dict):
            out.append(ToolCall("", "?", _cut(pretty_json(call), limit)[0]))
            continue
        function = call.get("function")
        fn: Mapping[str, Any] = function if isinstance(function, dict) else call
        name: str = fn["name"] if isinstance(fn.get("name"), str) else "?"
        args = fn.get("arguments", fn.get("input", ""))
        if isinstance(args, str):
            try:  # OpenAI sends the arguments as a JSON string: show them indented
                args = pretty_json(orjson.loads(args)) if args.strip() else ""
            except orjson.JSONDecodeError:
                pass
        else:
            args = pretty_json(args)
        ident = call["id"] if isinstance(call.get("id"), str) else ""
        out.append(ToolCall(visible(ident), visible(name), _cut(args, limit)[0]))
    return out


def view(message: ChatMessage, *, cut: bool = True) -> MessageView:
    """One message as shown, alone (its tool calls without results); ``cut=False``: no
    text is cut (the exports)."""
    limit = MAX_TEXT if cut else None
    extra = message.extra
    result_for = tool_call_id_of(extra)
    role = message.role
    name = extra.get("name")
    content, uses, results = _blocks(message.content)

    def shown(parts: list[Part], result_for: str | None) -> MessageView:
        return MessageView(
            id=message.id, role=visible(role), role_class=role if role in ROLES else "other",
            kind=visible(message.kind), created_at=message.created_at, time=utc_text(message.created_at),
            iso=iso_text(message.created_at), name=visible(name) if isinstance(name, str) else "",
            parts=parts, result_for=visible(result_for) if result_for is not None else None)

    main = shown(parts_of(content, prose=result_for is None and role != "tool", limit=limit), result_for)
    main.tool_calls = _tool_calls(extra.get("tool_calls"), limit) + _tool_calls(uses, limit)
    main.results = [shown(parts_of(block.get("content"), prose=False, limit=limit), block["tool_use_id"])
                    for block in results]
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


def views(messages: Iterable[ChatMessage], *, cut: bool = True) -> list[MessageView]:
    """The messages as shown, oldest first; each tool result whose call is among them is
    attached to that call (the last call with its id before it) and left out of the list."""
    out: list[MessageView] = []
    open_calls: dict[str, ToolCall] = {}
    for message in messages:
        shown = view(message, cut=cut)
        if shown.result_for is not None:
            call = open_calls.pop(shown.result_for, None)
            if call is not None:
                call.result = shown
                continue
        if shown.results:
            unpaired = []
            for result in shown.results:
                call = open_calls.pop(result.result_for or "", None)
                if call is not None:
                    call.result = result
                else:
                    unpaired.append(result)
            shown.results = unpaired
            if not (shown.parts or shown.tool_calls or unpaired):
                continue  # only results, each now inside its call
        for call in shown.tool_calls:
            if call.id:
                open_calls[call.id] = call
        out.append(shown)
    return out


def raw_json(message: ChatMessage) -> str:
    """The message as stored (every field), indented JSON."""
    return pretty_json(message.to_dict())


__all__ = ["MAX_TEXT", "ROLES", "MessageView", "Part", "ToolCall", "iso_text", "parts_of", "pretty_json",
           "raw_json", "utc_text", "view", "views", "visible"]
