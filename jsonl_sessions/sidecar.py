"""The sidecar: one small JSON object per session, ``<stem>.meta.json``.

It holds what is not a message: the original key (needed to list a session whose key
was too long for its file name), the format version, creation and last-metadata-change
times, and the trim-breadcrumb flag (later: name, alias, owner, state...). Unknown fields
are kept when the store rewrites it, so a newer writer's fields survive an older one.
It is always replaced atomically under the session's guard, and written *before* a new
transcript appears, so an existing transcript always has its key on disk.
The transcript, not the sidecar, is the truth about messages.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from . import _platform
from .errors import CorruptMetadataError

FORMAT_VERSION = 1


def new_sidecar(key: str, now_ms: int) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, "key": key, "created_at": now_ms, "updated_at": now_ms, "trim_breadcrumb": None}


def encode(sidecar: dict[str, Any]) -> bytes:
    return orjson.dumps(sidecar, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_INDENT_2)


def read(path: str, key: str | None = None) -> dict[str, Any] | None:
    """The sidecar at ``path``; None when there is none. Raises
    :class:`CorruptMetadataError` when it exists but is not a sidecar."""
    try:
        fd = _platform.open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in _platform.SYMLINK_ERRNOS:
            raise CorruptMetadataError(key=key, path=path, reason="not a regular file (symlink?)") from None
        raise
    try:
        size = _platform.fstat(fd).st_size
        raw = _platform.pread(fd, size + 1, 0)
    finally:
        _platform.close(fd)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptMetadataError(key=key, path=path, reason=f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("key"), str):
        raise CorruptMetadataError(key=key, path=path, reason="not a sidecar object with a 'key'")
    if not isinstance(data.get("format"), int) or data["format"] > FORMAT_VERSION:
        raise CorruptMetadataError(key=key, path=path, reason=f"unsupported format {data.get('format')!r}")
    return data
