"""The sidecar: one small JSON object per session, ``<stem>.meta.json``.

It holds what is not a message: the original key (needed to list a session whose key
was too long for its file name), the format version, and the session's metadata
(docs/format.md, "Sidecar", lists every field). Unknown fields are kept when the store
rewrites it, so a newer writer's fields survive an older one. Reading the file is
:func:`jsonl_sessions.jsonl.layout.read_sidecar`. It is always replaced atomically under the
session's guard, and written *before* a new
transcript appears, so an existing transcript always has its key on disk.
The transcript, not the sidecar, is the truth about messages.

The same object is a session's metadata in every backend (the SQLite backend keeps it
in a column), so what it says is read here once: typed fields (a field of the wrong type
reads as absent), the run state, and the public :class:`SessionMetadata`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from .errors import CorruptMetadataError
from .types import SESSION_STATES, SessionMetadata, SessionState

FORMAT_VERSION = 1
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def new_sidecar(key: str, now_ms: int, breadcrumb: bool | None = None) -> dict[str, Any]:
    """The metadata object of a new session ``key`` created at ``now_ms``."""
    return {"format": FORMAT_VERSION, "key": key, "created_at": now_ms, "updated_at": now_ms,
            "trim_breadcrumb": breadcrumb}


def encode(sidecar: dict[str, Any]) -> bytes:
    return orjson.dumps(sidecar, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_INDENT_2)


def decode(raw: bytes, path: str, key: str | None = None) -> dict[str, Any]:
    """The sidecar in ``raw`` (the bytes of ``path``). Raises :class:`CorruptMetadataError`
    when it is not a sidecar, or is of a newer format version (refused rather than misread)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptMetadataError(key=key, path=path, reason=f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("key"), str):
        raise CorruptMetadataError(key=key, path=path, reason="not a sidecar object with a 'key'")
    version = data.get("format")
    if type(version) is not int or version < 1:
        raise CorruptMetadataError(key=key, path=path, reason=f"unsupported format {version!r}")
    if version > FORMAT_VERSION:
        raise CorruptMetadataError(key=key, path=path, reason=f"written in format {version}, newer than this "
                                   f"version of jsonl_sessions reads ({FORMAT_VERSION}); upgrade to read it")
    return data


# -- typed access to fields (a field of the wrong type reads as absent) -------------------
def text(sidecar: Mapping[str, Any] | None, name: str) -> str | None:
    """Field ``name`` when it is a string, else None."""
    value = None if sidecar is None else sidecar.get(name)
    return value if type(value) is str else None


def millis(sidecar: Mapping[str, Any] | None, name: str) -> int | None:
    """Field ``name`` when it is an integer (ms since the epoch), else None."""
    value = None if sidecar is None else sidecar.get(name)
    return value if type(value) is int else None


def context(sidecar: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``context`` object's string entries (a copy; ``{}`` when absent)."""
    value = None if sidecar is None else sidecar.get("context")
    if type(value) is not dict:
        return {}
    return {k: v for k, v in value.items() if type(k) is str and type(v) is str}


def state(sidecar: Mapping[str, Any] | None) -> str | None:
    """The run state ("idle", "running", "error"); None when absent or not one of them."""
    value = text(sidecar, "state")
    return value if value in SESSION_STATES else None


def set_state(sidecar: dict[str, Any], new_state: str, turn: str | None, now_ms: int) -> None:
    """Enter run state ``new_state`` for ``turn`` (both already checked). ``state_since``
    moves to ``now_ms`` only when the state or the turn changes (or it is missing)."""
    same = sidecar.get("state") == new_state and sidecar.get("turn_id") == turn
    if not (same and millis(sidecar, "state_since") is not None):
        sidecar["state_since"] = now_ms
    sidecar["state"] = new_state
    sidecar["turn_id"] = turn


def run_state(sidecar: Mapping[str, Any] | None) -> SessionState | None:
    """The run state with its turn and since when (``state_since``, else ``updated_at``);
    None when there is no valid state."""
    current = state(sidecar)
    if sidecar is None or current is None:
        return None
    since = millis(sidecar, "state_since")
    if since is None:
        since = millis(sidecar, "updated_at") or 0
    return SessionState(current, text(sidecar, "turn_id"), EPOCH + timedelta(milliseconds=since))


def from_ms(ms: int | None) -> datetime | None:
    """Milliseconds since the epoch as an aware UTC datetime (None stays None)."""
    return None if ms is None else EPOCH + timedelta(0, 0, 0, ms)  # (positional: no keyword parsing per call)


def from_ns(ns: int) -> datetime:
    """Nanoseconds since the epoch as an aware UTC datetime (microsecond precision)."""
    return EPOCH + timedelta(0, 0, ns // 1000)


def describe(key: str, sidecar: Mapping[str, Any] | None, count: int, size: int, activity_ns: int) -> SessionMetadata:
    """The public metadata of session ``key`` from its metadata object (None: unreadable
    or absent, then only the stats are known), message count, size in bytes and last
    activity (ns since the epoch). A field of the wrong type reads as absent."""
    if sidecar is None:
        return SessionMetadata(key, None, None, None, None, None, None, from_ns(activity_ns), count, size, None, {},
                               None, None)
    # The typed reads of text(), millis(), state() and context(), inlined: a listing
    # describes every session. Positional, in field order (key, name, agent_alias,
    # principal_id, state, turn_id, created_at, updated_at, message_count, size_bytes,
    # trim_breadcrumb, context, parent, fork_point): keywords cost more to match.
    get = sidecar.get
    name, alias, principal, run_state, turn, created, crumb, ctx, parent, fork = (
        get("name"), get("agent_alias"), get("principal_id"), get("state"), get("turn_id"), get("created_at"),
        get("trim_breadcrumb"), get("context"), get("parent"), get("fork_point"))
    if type(run_state) is not str or run_state not in SESSION_STATES:
        run_state = None
    return SessionMetadata(
        key,
        name if type(name) is str else None,
        alias if type(alias) is str else None,
        principal if type(principal) is str else None,
        run_state,
        turn if run_state is not None and type(turn) is str else None,
        None if type(created) is not int else EPOCH + timedelta(0, 0, 0, created),
        EPOCH + timedelta(0, 0, activity_ns // 1000),
        count,
        size,
        crumb if isinstance(crumb, bool) else None,
        context(sidecar) if ctx else {},
        parent if type(parent) is str else None,
        fork if type(fork) is str else None,
    )
