"""A session as Markdown that reads well in a code review or a pull request: a heading
with the session's metadata, then each message under a heading of its own (role, time,
id), its content inside a fenced block, its tool calls (name, arguments) with their
results, compaction summaries marked.

Content always sits inside a fence, so nothing a message holds (a heading, a stray fence,
HTML) can change the document around it: each fence is longer than the longest run of
backticks in what it holds (at least three). Inline values (key, name, ids) are code spans
built the same way. Control characters are shown as ``\\xNN``, as everywhere else; text
is never cut. :func:`iter_markdown` gives the document a piece at a time, holding a
bounded number of messages (:func:`jsonl_sessions.display.stream_views`), for a session
of any length. Cost: O(size of the messages).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from .. import display
from ..display import visible
from ..types import ChatMessage, SessionMetadata

_BACKTICKS = re.compile(r"`+")


def fence(text: str, info: str = "") -> str:
    """``text`` in a fenced code block whose fence is longer than any backtick run in it."""
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    bar = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{bar}{info}\n{body}{bar}\n"


def code(text: str) -> str:
    """``text`` (one line) as an inline code span that no backtick in it can end."""
    text = visible(text, one_line=True)
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    bar = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) or not text else ""
    return f"{bar}{pad}{text}{pad}{bar}"


def _parts(m: display.MessageView) -> list[str]:
    out = []
    for p in m.parts:
        if p.kind == "json":
            out.append(f"*{p.label}*\n\n" + fence(p.text, "json"))
        else:
            out.append(fence(p.text, "text" if p.kind == "code" else "markdown"))
    return out


def _heading(m: display.MessageView, level: str) -> str:
    bits = [f"{level} {m.role}"]
    if m.name:
        bits.append(code(m.name))
    if m.compaction:
        bits.append("(compaction summary)")
    elif m.kind != "message":
        bits.append(f"({code(m.kind)})")
    if m.time:
        bits.append(f"· {m.time}")
    bits.append(f"· {code(m.id)}")
    return " ".join(bits) + "\n"


def _message(m: display.MessageView, level: str = "###") -> list[str]:
    out = [_heading(m, level)]
    if m.result_for is not None:
        out.append(f"Result of tool call {code(m.result_for)}\n")
    out.extend(_parts(m))
    if not m.parts and not m.tool_calls and not m.results:
        out.append("*(no content)*\n")
    for result in m.results:  # a tool_result block whose call is not in this export
        out.extend(_message(result, "####"))
    for call in m.tool_calls:
        out.append(f"**Tool call** {code(call.name)}" + (f" {code(call.id)}" if call.id else "") + "\n")
        if call.arguments:
            out.append(fence(call.arguments, "json"))
        if call.result is not None:
            out.extend(_message(call.result, "####"))
        else:
            out.append("*(no result in this export)*\n")
    return out


def _metadata(meta: SessionMetadata) -> list[str]:
    title = meta.name or meta.key
    out = [f"# {visible(title, one_line=True)}\n",
           f"- key: {code(meta.key)}", f"- messages: {meta.message_count:,}"]
    if meta.state:
        out.append(f"- state: {code(meta.state)}")
    if meta.agent_alias:
        out.append(f"- agent: {code(meta.agent_alias)}")
    if meta.created_at is not None:
        out.append(f"- created: {display.iso_text(meta.created_at)}")
    if meta.updated_at is not None:
        out.append(f"- last activity: {display.iso_text(meta.updated_at)}")
    if meta.parent is not None:
        point = f" at message {code(meta.fork_point)}" if meta.fork_point else ""
        out.append(f"- forked from: {code(meta.parent)}{point}")
    return ["\n".join(out) + "\n"]


def iter_markdown(meta: SessionMetadata, messages: Iterable[ChatMessage], *,
                  hold: int | None = display.HOLD) -> Iterator[str]:
    """The session as Markdown (uncut: every character of every text), a piece at a time
    as ``messages`` are read: their concatenation is :func:`to_markdown`'s document when
    no tool result comes more than ``hold`` messages after its call (such a late result
    is shown on its own, naming its call; see
    :func:`jsonl_sessions.display.stream_views`). Memory: the views of at most ``hold``
    messages waiting for results, never the session."""
    yield "\n".join(_metadata(meta))
    for m in display.stream_views(messages, cut=False, hold=hold):
        yield "\n---\n"
        for block in _message(m):
            yield "\n" + block


def to_markdown(meta: SessionMetadata, messages: Iterable[ChatMessage]) -> str:
    """The session as one Markdown document (uncut: every character of every text)."""
    return "".join(iter_markdown(meta, messages, hold=None))


__all__ = ["code", "fence", "iter_markdown", "to_markdown"]
