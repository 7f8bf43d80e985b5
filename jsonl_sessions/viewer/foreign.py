"""Read-only views of other tools' session folders: Claude Code transcripts and Codex CLI
rollouts, read by the importers of :mod:`jsonl_sessions.foreign` into an in-memory store
(:class:`~jsonl_sessions.testing.MemorySessionStore`, the whole store API with nothing on
disk). The folder is only read; nothing is written anywhere. The view is the folder as it
was when the viewer started.

- ``claude-code``: a transcript file, a project directory (``<project>/*.jsonl``), or the
  directory of projects (``~/.claude/projects``): every project below it. Sessions are
  ``claude/<project>/<session>`` (subagents under them), as ``import --from claude-code``
  names them.
- ``codex``: a rollout file or a sessions directory (``~/.codex/sessions``), every rollout
  below it, as ``codex/<session id>``. A rollout with no conversation item is left out.

Cost: every file is read and held in memory once, at start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from ..errors import SessionExistsError
from ..extras import install_hint
from ..foreign.transfer import import_claude_code, import_codex, iter_codex_rollouts
from ..protocol import SessionBackend

Kind = Literal["claude-code", "codex"]
#: What to install when the in-memory store cannot be imported.
MEMORY_HINT = ("the in-memory store of --from is jsonl_sessions.testing's, which needs the testing extra: "
               + install_hint("testing"))


def load_folder(kind: Kind, path: str | os.PathLike[str]) -> SessionBackend:
    """An in-memory store holding the sessions of ``path`` (see the module's docstring).

    :raises FileNotFoundError: ``path`` holds no session of that kind.
    :raises ImportError: the in-memory store's dependencies are missing (:data:`MEMORY_HINT`)."""
    from ..testing.memory import MemorySessionStore

    store = MemorySessionStore(durability="flush")
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"no such file or directory: {source}")
    if kind == "claude-code":
        import_claude_code(store, source)
    else:
        files = [source] if source.is_file() else list(iter_codex_rollouts(source))
        for rollout in files:
            try:
                import_codex(store, rollout)
            except SessionExistsError:  # a rollout resumed into a second file: add its items
                import_codex(store, rollout, append=True)
            except ValueError:  # no conversation item in it
                continue
        if not store.list_sessions():
            raise FileNotFoundError(f"no Codex rollout with a conversation in {source}")
    return store


__all__ = ["MEMORY_HINT", "Kind", "load_folder"]
