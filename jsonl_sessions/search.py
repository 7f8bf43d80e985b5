"""Full-text search over sessions (:meth:`jsonl_sessions.SessionStore.search`).

Transcripts are streamed in 1 MiB blocks, newest-activity sessions first, stopping once
``limit`` sessions matched. A line that is pure ASCII without JSON escapes and does not
contain the keyword (ASCII case-insensitively) is skipped without decoding; any other
line is decoded and checked exactly. Takes no lock (each read is a consistent snapshot).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import codec, sidecar, snapshot
from .errors import UnsafePathError
from .layout import SessionFiles
from .lines import CHUNK_BYTES, iter_lines_forward
from .messages import log
from .metadata import Look, check_text, looks, metadata
from .txn import Root
from .types import SessionMetadata, SessionQuery


def search(root: Root, query: SessionQuery) -> list[SessionMetadata]:
    if not isinstance(query, SessionQuery):
        raise TypeError(f"query must be a SessionQuery, not {type(query).__name__}")
    needle = check_text("keyword", query.keyword).casefold()
    limit = query.limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an int >= 0, not {limit!r}")
    alias = None if query.agent_alias is None else check_text("agent_alias", query.agent_alias)
    found: list[tuple[int, str, SessionFiles, Look]] = []
    for files, look in looks(root):
        if alias is not None and sidecar.text(look.meta, "agent_alias") != alias:
            continue
        found.append((-look.activity_ns, files.key, files, look))
    found.sort(key=lambda item: (item[0], item[1]))
    out: list[SessionMetadata] = []
    for _neg, _key, files, look in found:
        if limit is not None and len(out) >= limit:
            break
        name = sidecar.text(look.meta, "name")
        if (name is not None and needle in name.casefold()) or not needle or mentions(root, files, needle):
            md = metadata(root, files, look)
            if md is not None:
                out.append(md)
    return out


def mentions(root: Root, files: SessionFiles, needle: str) -> bool:
    """Whether a message of the session has text containing ``needle`` (casefolded)."""
    ascii_needle = needle.encode("ascii") if needle.isascii() else None

    def scan(fd: int, size: int) -> bool:
        for _start, line in iter_lines_forward(fd, 0, size, block=CHUNK_BYTES):
            # A pure-ASCII line without escapes holds its strings as they are, and ASCII
            # text casefolds to ASCII: only an ASCII needle can be in it.
            plain = line.isascii() and b"\\" not in line
            if plain and (ascii_needle is None or ascii_needle not in line.lower()):
                continue
            if _line_mentions(line, needle):
                return True
        return False

    try:
        return bool(snapshot.with_transcript(root, files, scan))
    except UnsafePathError as exc:
        log.warning("%s", exc)
        return False


def _line_mentions(line: bytes, needle: str) -> bool:
    try:
        record = codec.decode_record(line)
    except ValueError:  # a corrupt line (JSONDecodeError is a ValueError): skipped
        return False
    return any(needle in text.casefold() for text in texts(record.get("content")))


def texts(content: Any) -> Iterator[str]:
    """The searchable text of a message's ``content``: a string, every string item and
    every object's ``"text"`` of a list, an object's ``"text"``."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                yield part
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
    elif isinstance(content, dict) and isinstance(content.get("text"), str):
        yield content["text"]
