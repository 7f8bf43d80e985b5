"""Codex CLI rollout files -> transcript lines.

Codex CLI keeps each session in ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.
Two shapes are read (the ones the tests pin):

- current: every line is ``{"timestamp": ISO, "type": T, "payload": {...}}``. ``T`` is
  ``session_meta`` (the session id, cwd, CLI version...), ``response_item`` (a Responses
  API item: a message, a function call, its output, reasoning...), ``compacted`` (a
  compaction summary, ``payload.message``), ``turn_context`` or ``event_msg`` (UI events
  that repeat the items; not imported);
- older: the first line is the bare session meta (``{"id", "timestamp", ...}``), the
  others bare Responses items, with ``{"record_type": "state"}`` lines between them.

Each item becomes one line as :mod:`.responses` stores it (so the OpenAI Agents SDK
adapter reads it back as the same item, and an agent can carry on the conversation),
with ``created_at`` from the line's timestamp when it has one. A ``compacted`` line becomes
the item ``{"role": "user", "content": <the summary>}`` (as Codex hands the summary to the
model) on a line of kind ``compaction`` (so ``page(..., breakpoint=True)`` stops there)
whose ``codex`` field holds the rest of the payload. Lines of any other type, and unknown ones, are
counted in :attr:`CodexRollout.skipped`, never an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..types import ChatMessage
from .fields import split_field
from .files import JsonlRead, read_jsonl
from .responses import item_to_message

__all__ = ["CODEX_FIELD", "META_FIELDS", "CodexRollout", "parse_rollout", "read_rollout"]

#: The extra field of a compaction line (the ``compacted`` payload without its message).
CODEX_FIELD = "codex"
#: The session_meta fields kept (as ``codex.<name>``) in the session's context.
META_FIELDS = ("id", "timestamp", "cwd", "originator", "cli_version", "source", "model_provider")
#: The ``type`` of a Responses item in the older, bare shape.
ITEM_TYPES = frozenset({
    "message", "reasoning", "function_call", "function_call_output", "local_shell_call",
    "custom_tool_call", "custom_tool_call_output", "web_search_call",
})


@dataclass
class CodexRollout:
    """One rollout file, read: the session id (None when the file names none), the kept
    session_meta fields, the lines to store, and what was left out."""

    session_id: str | None = None
    meta: dict[str, str] = field(default_factory=dict)
    messages: list[ChatMessage] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    bad_lines: list[int] = field(default_factory=list)
    torn: bool = False


def read_rollout(path: str | os.PathLike[str]) -> CodexRollout:
    """The rollout at ``path``; OSError when it cannot be read. O(file)."""
    return parse_rollout(read_jsonl(path))


def parse_rollout(read: JsonlRead) -> CodexRollout:
    """The rollout whose lines ``read`` holds (see the module docstring)."""
    rollout = CodexRollout(bad_lines=read.bad_lines, torn=read.torn)
    for number, line in enumerate(read.objects):
        kind_of = line.get("type")
        payload = line.get("payload")
        if isinstance(payload, Mapping) and isinstance(kind_of, str):
            _take(rollout, kind_of, payload, _millis(line.get("timestamp")))
        elif number == 0 and "payload" not in line and isinstance(line.get("id"), str) and kind_of is None:
            _take_meta(rollout, line)  # the older shape's first line
        elif kind_of in ITEM_TYPES or (kind_of is None and isinstance(line.get("role"), str)):
            rollout.messages.append(item_to_message(line))
        else:
            name = line.get("record_type") if kind_of is None else kind_of
            _skip(rollout, name if isinstance(name, str) else "unknown")
    return rollout


def _take(rollout: CodexRollout, kind_of: str, payload: Mapping[str, Any], created_at: int | None) -> None:
    if kind_of == "response_item":
        rollout.messages.append(item_to_message(payload, created_at=created_at))
    elif kind_of == "session_meta":
        _take_meta(rollout, payload)
    elif kind_of == "compacted":
        summary, rest, _ = split_field(payload, "message")
        line = item_to_message({"role": "user", "content": summary}, created_at=created_at)
        rollout.messages.append(line.replace(kind="compaction", extra={**line.extra, CODEX_FIELD: rest}))
    else:
        _skip(rollout, kind_of)


def _take_meta(rollout: CodexRollout, meta: Mapping[str, Any]) -> None:
    if rollout.session_id is None and isinstance(meta.get("id"), str) and meta["id"]:
        rollout.session_id = meta["id"]
    for name in META_FIELDS:
        value = meta.get(name)
        if isinstance(value, str) and name not in rollout.meta:
            rollout.meta[name] = value


def _skip(rollout: CodexRollout, name: str) -> None:
    rollout.skipped[name] = rollout.skipped.get(name, 0) + 1


def _millis(timestamp: object) -> int | None:
    """Epoch milliseconds of an ISO-8601 time (``Z`` accepted); None when it is not one."""
    if not isinstance(timestamp, str):
        return None
    try:
        when = datetime.fromisoformat(timestamp[:-1] + "+00:00" if timestamp.endswith("Z") else timestamp)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return int(when.timestamp() * 1000)
