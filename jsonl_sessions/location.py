"""Where a store lives when nobody says: one answer for the command line and every adapter.

:func:`resolve_root` is ``--root`` (or an adapter's ``store`` path) when given, else
``$JSONL_SESSIONS_ROOT``, else :func:`default_root`, the per-user data directory. The
command line and every adapter in :mod:`jsonl_sessions.integrations` call it, so a
session an agent wrote with no store given is the one ``jsonl-sessions`` shows with no
``--root``. Nothing here touches the file system.
"""

from __future__ import annotations

import os

from ._platform import IS_DARWIN, IS_WINDOWS

__all__ = ["ENV_ROOT", "default_root", "resolve_root"]

#: The environment variable that overrides :func:`default_root`.
ENV_ROOT = "JSONL_SESSIONS_ROOT"


def default_root() -> str:
    """The per-user data directory: ``$XDG_DATA_HOME/jsonl-sessions`` (default
    ``~/.local/share/jsonl-sessions``) on Linux and other Unix, ``~/Library/Application
    Support/jsonl-sessions`` on macOS, ``%LOCALAPPDATA%\\jsonl-sessions`` on Windows."""
    home = os.path.expanduser("~")
    if IS_WINDOWS:
        base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    elif IS_DARWIN:
        base = os.path.join(home, "Library", "Application Support")
    else:
        xdg = os.environ.get("XDG_DATA_HOME", "")
        base = xdg if os.path.isabs(xdg) else os.path.join(home, ".local", "share")  # relative: ignored (XDG rule)
    return os.path.join(base, "jsonl-sessions")


def resolve_root(explicit: str | os.PathLike[str] | None = None) -> str:
    """The absolute store directory: ``explicit``, else ``$JSONL_SESSIONS_ROOT``, else
    :func:`default_root` (``~`` expanded; read from the environment at each call)."""
    chosen = os.fspath(explicit) if explicit is not None else ""
    chosen = chosen or os.environ.get(ENV_ROOT) or default_root()
    return os.path.abspath(os.path.expanduser(chosen))
