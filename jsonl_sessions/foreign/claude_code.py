"""Claude Code transcript entries <-> transcript lines, and the store keys of Claude sessions.

An entry is one line of a Claude Code transcript: a JSON object with a ``type``
(``"user"``, ``"assistant"``, ``"system"``, ``"summary"``, ``"custom-title"``...), usually
a ``uuid``, a ``parentUuid``, a ``timestamp``, a ``sessionId`` and, for conversation
turns, a ``message`` (``{"role": ..., "content": ...}``). It is stored as one line:

- ``role``: the entry's ``type`` (``"entry"`` when it has none);
- ``kind``: ``"compaction"`` for a ``system`` entry of subtype ``compact_boundary``, so
  ``page(..., breakpoint=True)`` stops at the last compaction; else ``"message"``;
- ``content``: ``entry["message"]["content"]`` when the entry has one (so ``search``
  finds the conversation text), else null;
- ``claude``: the entry without that content; ``content_at``: the position of
  ``"content"`` among the keys of ``message`` (absent when the content is not there).

:func:`message_to_entry` rebuilds the entry, equal to the one stored, key order included.

Keys: a Claude session is named by ``project_key``, ``session_id`` and, for a subagent
transcript, a ``subpath`` (``"subagents/agent-1"``). Each is one session of the store,
keyed ``<prefix><project>/<session>`` or ``<prefix><project>/<session>/<subpath>``, with
project and session percent-encoded (so ``/`` inside them is unambiguous) and the subpath
as it is. The default prefix is ``"claude/"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from ..errors import InvalidSessionKeyError
from ..types import ChatMessage
from .fields import join_field, split_field

__all__ = [
    "CONTENT_AT_FIELD",
    "DEFAULT_PREFIX",
    "ENTRY_FIELD",
    "ClaudeKey",
    "entry_to_message",
    "message_to_entry",
]

#: The extra fields of a line holding a Claude Code entry.
ENTRY_FIELD = "claude"
CONTENT_AT_FIELD = "content_at"
#: The key prefix of Claude sessions in a store.
DEFAULT_PREFIX = "claude/"


def entry_to_message(entry: Mapping[str, Any], *, created_at: int | None = None) -> ChatMessage:
    """The line that stores ``entry`` (see the module docstring). TypeError for a
    non-mapping; JSON-serialisability is checked when the line is written."""
    if not isinstance(entry, Mapping):
        raise TypeError(f"a transcript entry must be a mapping (a dict), not {type(entry).__name__}")
    kind_of = entry.get("type")
    role = kind_of if isinstance(kind_of, str) and kind_of else "entry"
    kind = "compaction" if kind_of == "system" and entry.get("subtype") == "compact_boundary" else "message"
    rest = dict(entry)
    extra: dict[str, Any] = {ENTRY_FIELD: rest}
    content: Any = None
    message = entry.get("message")
    if isinstance(message, Mapping) and "content" in message:
        content, rest["message"], extra[CONTENT_AT_FIELD] = split_field(message, "content")
    return ChatMessage(role, content, created_at=created_at, kind=kind, extra=extra)


def message_to_entry(message: ChatMessage) -> dict[str, Any] | None:
    """The entry stored as ``message`` (the inverse of :func:`entry_to_message`); None
    for a line that holds no Claude Code entry (written by other code)."""
    extra = message.extra
    stored = extra.get(ENTRY_FIELD)
    if not isinstance(stored, dict):
        return None
    entry = dict(stored)
    inner = entry.get("message")
    if isinstance(inner, dict) and CONTENT_AT_FIELD in extra:
        entry["message"] = join_field(inner, "content", message.content, extra[CONTENT_AT_FIELD])
    return entry


@dataclass(frozen=True)
class ClaudeKey:
    """A Claude session (``subpath`` None) or one of its subagent transcripts, and its
    store key (:meth:`store_key`). Raises :class:`InvalidSessionKeyError` for an empty or
    non-string part."""

    project_key: str
    session_id: str
    subpath: str | None = None

    def __post_init__(self) -> None:
        for name in ("project_key", "session_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidSessionKeyError(f"{name} must be a non-empty string, not {value!r}", key=value)
        if self.subpath is not None and (not isinstance(self.subpath, str) or not self.subpath):
            raise InvalidSessionKeyError(f"subpath must be a non-empty string when given, not {self.subpath!r}", key=self.subpath)

    @classmethod
    def of(cls, key: Mapping[str, Any]) -> ClaudeKey:
        """From the SDK's ``{"project_key", "session_id", "subpath"?}`` mapping."""
        if not isinstance(key, Mapping):
            raise InvalidSessionKeyError(f"a Claude session key is a mapping, not {type(key).__name__}", key=key)
        return cls(key.get("project_key"), key.get("session_id"), key.get("subpath"))  # type: ignore[arg-type]

    @property
    def main(self) -> ClaudeKey:
        """The session's main transcript."""
        return ClaudeKey(self.project_key, self.session_id)

    def store_key(self, prefix: str = DEFAULT_PREFIX) -> str:
        key = f"{project_prefix(self.project_key, prefix)}{quote(self.session_id, safe='')}"
        return key if self.subpath is None else f"{key}/{self.subpath}"

    @classmethod
    def parse(cls, store_key: str, prefix: str = DEFAULT_PREFIX) -> ClaudeKey | None:
        """The Claude key of a store key; None when ``store_key`` is not one."""
        if not store_key.startswith(prefix):
            return None
        parts = store_key[len(prefix):].split("/", 2)
        if len(parts) < 2 or not parts[0] or not parts[1] or (len(parts) == 3 and not parts[2]):
            return None
        subpath = parts[2] if len(parts) == 3 else None
        try:
            return cls(unquote(parts[0], errors="strict"), unquote(parts[1], errors="strict"), subpath)
        except (UnicodeDecodeError, InvalidSessionKeyError):
            return None


def project_prefix(project_key: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The start of the store keys of every session of ``project_key``."""
    return f"{prefix}{quote(project_key, safe='')}/"
