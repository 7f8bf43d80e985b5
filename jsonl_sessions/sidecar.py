"""The sidecar: one small JSON object per session, ``<stem>.meta.json``.

It holds what is not a message: the original key (needed to list a session whose key
was too long for its file name), the format version, and the session's metadata
(docs/format.md, "Sidecar", lists every field). Unknown fields are kept when the store
rewrites it, so a newer writer's fields survive an older one.
It is always replaced atomically under the session's guard, and written *before* a new
transcript appears, so an existing transcript always has its key on disk.
The transcript, not the sidecar, is the truth about messages.
"""

from __future__ import annotations

import os
import stat
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
    :class:`CorruptMetadataError` when it exists but is not a sidecar (or is of a newer
    format version: refused rather than misread)."""
    return read_with_mtime(path, key)[0]


def read_with_mtime(path: str, key: str | None = None) -> tuple[dict[str, Any] | None, int | None]:
    """Like :func:`read`, with the file's modification time (ns since the epoch, from the
    same open file, so it belongs to the version read); ``(None, None)`` when there is none."""
    try:
        fd = _platform.open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno in _platform.SYMLINK_ERRNOS:
            raise CorruptMetadataError(key=key, path=path, reason="not a regular file (symlink?)") from None
        raise
    try:
        st = _platform.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptMetadataError(key=key, path=path, reason="not a regular file")
        raw = _platform.pread(fd, st.st_size + 1, 0)
    finally:
        _platform.close(fd)
    return _decode(raw, path, key), st.st_mtime_ns


def _decode(raw: bytes, path: str, key: str | None) -> dict[str, Any]:
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
