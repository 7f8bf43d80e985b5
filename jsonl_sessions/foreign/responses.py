"""Responses API items (the ``TResponseInputItem`` dicts of the OpenAI Agents SDK, the
``response_item`` payloads of Codex CLI rollouts) <-> transcript lines.

An item is stored as one line: ``content`` is the item's ``"content"`` (so the store's
search sees message text), ``item`` holds every other field of the item, ``content_at``
the position of ``"content"`` among the item's keys (absent when the item has none).
``role`` is the item's ``role``, else its ``type`` (``"function_call"``,
``"reasoning"``...), else ``"item"``: for reading and filtering only, never used to
rebuild the item. An item of type ``"compaction"`` gets ``kind="compaction"``, so
``page(..., breakpoint=True)`` stops at it. The item's own ``id`` (``"msg_..."``,
``"fc_..."``) stays in ``item``; the line's ``id`` is the store's ULID. A line written by
other code (no ``item`` field) reads back as ``{"role": ..., "content": ..., **its other
fields}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..types import ChatMessage
from .fields import join_field, split_field

__all__ = ["CONTENT_AT_FIELD", "ITEM_FIELD", "item_to_message", "message_to_item"]

#: The extra fields of a line holding an item.
ITEM_FIELD = "item"
CONTENT_AT_FIELD = "content_at"


def item_to_message(item: Mapping[str, Any], *, created_at: int | None = None) -> ChatMessage:
    """The line that stores ``item``. TypeError for a non-mapping; JSON-serialisability is
    checked when the line is written."""
    if not isinstance(item, Mapping):
        raise TypeError(f"a session item must be a mapping (a dict), not {type(item).__name__}")
    role = item.get("role")
    if not isinstance(role, str):
        role = item.get("type")
        if not isinstance(role, str):
            role = "item"
    kind = "compaction" if item.get("type") == "compaction" else "message"
    content, rest, position = split_field(item, "content")
    extra: dict[str, Any] = {ITEM_FIELD: rest}
    if position is not None:
        extra[CONTENT_AT_FIELD] = position
    return ChatMessage(role, content, created_at=created_at, kind=kind, extra=extra)


def message_to_item(message: ChatMessage) -> dict[str, Any]:
    """The item stored as ``message`` (the inverse of :func:`item_to_message`)."""
    extra = message.extra
    rest = extra.get(ITEM_FIELD)
    if not isinstance(rest, dict):
        # Not written as an item: an easy input message from the line's fields.
        return {"role": message.role, "content": message.content, **extra}
    return join_field(rest, "content", message.content, extra.get(CONTENT_AT_FIELD))
