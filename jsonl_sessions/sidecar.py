"""The sidecar: one small JSON object per session, ``<stem>.meta.json``.

It holds what is not a message: the original key (needed to list a session whose key
was too long for its file name), the format version, and the session's metadata
(docs/format.md, "Sidecar", lists every field). Unknown fields are kept when the store
rewrites it, so a newer writer's fields survive an older one. Reading the file is
:func:`jsonl_sessions.layout.read_sidecar`. It is always replaced atomically under the
session's guard, and written *before* a new
transcript appears, so an existing transcript always has its key on disk.
The transcript, not the sidecar, is the truth about messages.
"""

from __future__ import annotations

from typing import Any

import orjson

from .errors import CorruptMetadataError

FORMAT_VERSION = 1


def new_sidecar(key: str, now_ms: int) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, "key": key, "created_at": now_ms, "updated_at": now_ms, "trim_breadcrumb": None}


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
def text(sidecar: dict[str, Any] | None, name: str) -> str | None:
    """Field ``name`` when it is a string, else None."""
    value = None if sidecar is None else sidecar.get(name)
    return value if type(value) is str else None


def millis(sidecar: dict[str, Any] | None, name: str) -> int | None:
    """Field ``name`` when it is an integer (ms since the epoch), else None."""
    value = None if sidecar is None else sidecar.get(name)
    return value if type(value) is int else None


def context(sidecar: dict[str, Any] | None) -> dict[str, str]:
    """The ``context`` object's string entries (a copy; ``{}`` when absent)."""
    value = None if sidecar is None else sidecar.get("context")
    if type(value) is not dict:
        return {}
    return {k: v for k, v in value.items() if type(k) is str and type(v) is str}
