"""Appending another tool's lines to a session the safe way: :func:`append_lines`.

A tool that produces transcript lines itself (a hook, a logger, a bridge from another
agent) may append them to ``<stem>.jsonl`` directly, but the store cannot tell a line
such a tool is still writing from what a crash left of one unless the tool takes the
session's lock (docs/format.md, "Other writers"). :func:`append_lines` does that for a
Python process: it hands the lines to the store, which appends them under the session's
guard like any other append. A tool in another language pipes its lines into
``jsonl-sessions import KEY - --append`` (the same thing from the command line), or takes
the ``flock`` of ``<stem>.lock`` itself as docs/format.md describes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import orjson

from .errors import InvalidMessageError
from .types import ChatMessage

if TYPE_CHECKING:
    from .protocol import SessionBackend


def append_lines(store: SessionBackend, key: str, lines: Iterable[bytes | str]) -> list[str]:
    """Append complete JSONL lines (each one JSON object with a string ``role``: a message
    as docs/format.md describes it; a final ``\\n`` or ``\\r\\n`` is optional) to session
    ``key`` of ``store``, creating it if needed; their ids, in order.

    The lines are checked first and appended as one ``append_many``: under the session's
    guard (the lock other writers of the store take too), in one write, all or none (also
    after a crash), durable when the store is. Every field of a line is kept, and so is
    its ``id`` and ``created_at`` when it has them (the id must sort after the session's
    last one: :class:`DuplicateMessageError` / :class:`InvalidMessageError` otherwise); a
    line without an id gets one. The store encodes each line again, so its bytes may
    differ (field order, spacing) while its JSON value is the same.

    Raises :class:`InvalidMessageError` naming the line (1-based) for one that is not a
    JSON object with a ``role``, holds a newline inside, or is empty, and the errors of
    ``append_many``; nothing is written then. Cost: O(bytes of the lines) and one append."""
    messages = []
    for number, line in enumerate(lines, 1):
        raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
        raw = raw.removesuffix(b"\n").removesuffix(b"\r")
        if b"\n" in raw:
            raise _refused(key, number, "it holds a newline: one line per item")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _refused(key, number, f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _refused(key, number, f"a line must be a JSON object, not {type(data).__name__}")
        try:
            messages.append(ChatMessage.from_dict(data))
        except InvalidMessageError as exc:
            raise _refused(key, number, exc.reason or str(exc)) from None
    return store.append_many(key, messages)


def _refused(key: str, number: int, reason: str) -> InvalidMessageError:
    return InvalidMessageError(f"session {key!r}: line {number} cannot be appended: {reason}", key=key,
                               reason=f"line {number}: {reason}")


__all__ = ["append_lines"]
