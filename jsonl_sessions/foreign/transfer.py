"""Whole sessions between other tools' files and a store: ``import --from claude-code``,
``import --from codex`` and ``export --to claude-code``.

- :func:`import_claude_code`: a Claude Code transcript (``<project>/<session>.jsonl``)
  with its subagent transcripts (``<project>/<session>/subagents/**.jsonl``), or every
  transcript of a project directory, into the sessions the Claude Agent SDK adapter
  uses (key ``claude/<project>/<session>[/<subpath>]``), so the SDK can resume them from
  the store. Entries are deduplicated by ``uuid``: importing again adds only what is new.
  A subagent's ``agent-<id>.meta.json`` goes in as its ``agent_metadata`` entry, as the
  SDK's own import does.
- :func:`import_codex`: a Codex CLI rollout into the session ``codex/<session id>``,
  readable as Responses items by the OpenAI Agents SDK adapter.
- :func:`export_claude_code`: a session as Claude Code transcript entries, which
  :func:`jsonl_sessions.foreign.files.write_jsonl` writes to a file that Claude Code and
  the Claude Agent SDK read and resume.

Each file is imported as one append (all of it or, after a crash or an error, none),
durable when the store's durability is ``"fsync"``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import ids
from ..errors import SessionExistsError, SessionNotFoundError
from ..protocol import SessionBackend
from ..types import ChatMessage, datetime_of_ms
from .claude_code import DEFAULT_PREFIX, ClaudeKey, message_to_entry
from .claude_sessions import ClaudeSessions
from .codex import read_rollout
from .files import read_json_object, read_jsonl
from .responses import ITEM_FIELD, message_to_item

__all__ = ["CODEX_PREFIX", "ClaudeExport", "Imported", "export_claude_code", "import_claude_code", "import_codex"]

#: The key prefix of imported Codex sessions.
CODEX_PREFIX = "codex/"


@dataclass(frozen=True)
class Imported:
    """One imported file: the session key, how many lines were written, how many of the
    file's objects were left out (duplicates, events, unknown types), the numbers of
    lines that were not JSON objects, and whether the last line was torn."""

    key: str
    written: int
    left_out: int
    bad_lines: tuple[int, ...] = ()
    torn: bool = False


# -- Claude Code ---------------------------------------------------------------------------------
def import_claude_code(store: SessionBackend, path: str | os.PathLike[str], *,
                       prefix: str = DEFAULT_PREFIX) -> list[Imported]:
    """Import the transcript at ``path`` (a ``.jsonl`` file, with its subagent
    transcripts), every transcript of the project directory ``path`` (``<project>/*.jsonl``),
    or, for a directory holding no transcript itself, every project below it (the
    directory of projects, ``~/.claude/projects``). The project key is the name of the
    directory the file is in, the session id the file name without ``.jsonl`` (as the
    Claude Agent SDK names them). FileNotFoundError when there is no such file or no
    transcript in the directory or its projects."""
    source = Path(path)
    if source.is_dir():
        files = sorted(source.glob("*.jsonl")) or sorted(source.glob("*/*.jsonl"))
    else:
        files = [source]
    if not files:
        raise FileNotFoundError(f"no Claude Code transcript (*.jsonl) in {source} or its project directories")
    sessions = ClaudeSessions(store, prefix=prefix)
    done = []
    for transcript in files:
        project = transcript.resolve().parent.name
        main = ClaudeKey(project, transcript.name.removesuffix(".jsonl"))
        done.append(_import_entries(sessions, main, transcript))
        subagents = transcript.with_suffix("") / "subagents"
        for sub in sorted(subagents.rglob("*.jsonl")) if subagents.is_dir() else ():
            subpath = sub.relative_to(transcript.with_suffix("")).with_suffix("").as_posix()
            done.append(_import_entries(sessions, ClaudeKey(project, main.session_id, subpath), sub))
    return done


def _import_entries(sessions: ClaudeSessions, key: ClaudeKey, path: Path) -> Imported:
    read = read_jsonl(path)
    entries = read.objects
    meta = _agent_metadata(path) if key.subpath is not None else None
    if meta is not None:
        entries = [*entries, meta]
    written = sessions.append(key, entries)
    return Imported(key.store_key(sessions.prefix), written, len(entries) - written, tuple(read.bad_lines), read.torn)


def _agent_metadata(transcript: Path) -> dict[str, Any] | None:
    """A subagent's ``agent-<id>.meta.json`` (its agent type, worktree...) as the entry
    ``{..., "type": "agent_metadata"}`` that the SDK stores and restores on resume; None
    when the file is missing or not a JSON object."""
    try:
        meta = read_json_object(transcript.with_name(transcript.name.removesuffix(".jsonl") + ".meta.json"))
    except FileNotFoundError:
        return None
    return None if meta is None else {**meta, "type": "agent_metadata"}


@dataclass(frozen=True)
class ClaudeExport:
    """A session as Claude Code entries: the session id they carry, the entries, and how
    many lines had no Claude Code form (left out)."""

    session_id: str
    entries: list[dict[str, Any]]
    left_out: int


def export_claude_code(store: SessionBackend, key: str, *, session_id: str | None = None,
                       cwd: str | None = None, lenient: bool = False, prefix: str = DEFAULT_PREFIX) -> ClaudeExport:
    """The session ``key`` as Claude Code transcript entries, oldest first.

    A line that holds a Claude Code entry (written by the SDK adapter or an import) is
    that entry, unchanged. A user or assistant message written otherwise (a plain
    message, or an OpenAI Agents SDK message item) becomes a new entry: ``uuid`` derived
    from the line's id (the same on every export), ``parentUuid`` the previous entry's,
    ``sessionId`` ``session_id``, ``timestamp`` from ``created_at``, text parts as text
    blocks. Every other line (system prompts, tool calls and results of other SDKs) has
    no Claude Code form and is left out (counted). ``session_id`` defaults to the Claude
    session id of ``key``, else a UUID derived from the first line's id.

    Raises :class:`SessionNotFoundError` for a missing session and
    :class:`~jsonl_sessions.CorruptTranscriptError` for a corrupt line unless ``lenient``
    (then corrupt lines are skipped with a logged warning). O(session).
    """
    messages = store.load(key) if lenient else store.try_load(key)
    if not messages and not store.session_exists(key):
        raise SessionNotFoundError(key=key)
    if session_id is None:
        claude_key = ClaudeKey.parse(key, prefix)
        session_id = claude_key.session_id if claude_key else (_uuid_of(key, messages[0]) if messages else
                                                               str(uuid.uuid5(uuid.NAMESPACE_URL, key)))
    entries: list[dict[str, Any]] = []
    parent: str | None = None
    for message in messages:
        entry = message_to_entry(message) or _synthesize(message, key, session_id, parent, cwd)
        if entry is None:
            continue
        if isinstance(entry.get("uuid"), str):
            parent = entry["uuid"]
        entries.append(entry)
    return ClaudeExport(session_id, entries, len(messages) - len(entries))


def _synthesize(message: ChatMessage, key: str, session_id: str, parent: str | None,
                cwd: str | None) -> dict[str, Any] | None:
    role: object = message.role
    content = message.content
    if ITEM_FIELD in message.extra:
        item = message_to_item(message)
        if item.get("type", "message") != "message":
            return None
        role, content = item.get("role"), item.get("content")
    if role not in ("user", "assistant"):
        return None
    blocks = _text_blocks(content)
    if not blocks:
        return None
    entry: dict[str, Any] = {"parentUuid": parent, "isSidechain": False, "userType": "external"}
    if cwd is not None:
        entry["cwd"] = cwd
    entry["sessionId"] = session_id
    entry["type"] = role
    if role == "user":
        entry["message"] = {"role": "user", "content": content if isinstance(content, str) else blocks}
    else:
        entry["message"] = {"type": "message", "role": "assistant", "content": blocks}
    entry["uuid"] = _uuid_of(key, message)
    entry["timestamp"] = _iso(message.created_at)
    return entry


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    """Text content blocks of a string or of a list of parts (``text``, ``input_text``,
    ``output_text``); other parts have no Claude Code form here."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    parts = content if isinstance(content, list) else []
    return [{"type": "text", "text": p["text"]} for p in parts
            if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text")
            and isinstance(p.get("text"), str)]


def _uuid_of(key: str, message: ChatMessage) -> str:
    value = ids.decode(message.id) if message.id else None
    if value is not None:
        return str(uuid.UUID(int=value))  # a ULID is 128 bits: the same value as a UUID
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{key}\n{message.id}"))


def _iso(created_at: int | None) -> str:
    """``created_at`` as Claude Code's ISO timestamp; the epoch for none, or for one no
    ``datetime`` holds (a stored time may be any 64-bit integer)."""
    when = datetime_of_ms(created_at) or datetime.fromtimestamp(0, tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


# -- Codex -----------------------------------------------------------------------------------------
def import_codex(store: SessionBackend, path: str | os.PathLike[str], *, append: bool = False,
                 prefix: str = CODEX_PREFIX) -> Imported:
    """Import the Codex CLI rollout at ``path`` into the session ``<prefix><session id>``
    (the id of its session_meta, else the file name without ``.jsonl``); the kept
    session_meta fields go into the session's context as ``codex.<name>``. Refuses an
    existing session (:class:`SessionExistsError`) unless ``append``. ValueError when
    the file holds no item to import (nothing is created)."""
    rollout = read_rollout(path)
    key = prefix + (rollout.session_id or Path(path).name.removesuffix(".jsonl"))
    if not rollout.messages:
        raise ValueError(f"{os.fspath(path)} holds no Codex conversation item")
    with store.lock(key):
        if store.session_exists(key) and not append:
            raise SessionExistsError(f"session {key!r} already exists (append to add to it)", key=key)
        store.append_many(key, rollout.messages)
        if rollout.meta:
            meta = store.get_session_metadata(key)
            context = dict(meta.context) if meta is not None else {}
            context.update({f"codex.{name}": value for name, value in rollout.meta.items()})
            store.set_session_context(key, context)
    return Imported(key, len(rollout.messages), sum(rollout.skipped.values()),
                    tuple(rollout.bad_lines), rollout.torn)


def iter_codex_rollouts(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Every rollout file under a Codex sessions directory, oldest first by path."""
    yield from sorted(Path(directory).rglob("*.jsonl"))
