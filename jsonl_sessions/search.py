"""Full-text search over sessions (:meth:`jsonl_sessions.SessionStore.search`).

Transcripts are streamed in 1 MiB blocks, newest-activity sessions first, stopping once
``limit`` sessions matched. A line that is pure ASCII without JSON escapes and does not
contain the keyword (ASCII case-insensitively) is skipped without decoding; any other
line is decoded and checked exactly. Takes no lock (each read is a consistent snapshot).
"""

from __future__ import annotations

from . import records, sidecar, snapshot
from .errors import SessionStoreError
from .layout import SessionFiles
from .lines import CHUNK_BYTES, iter_lines_forward
from .messages import log
from .metadata import Look, listed, looks
from .rules import check_query
from .txn import Root
from .types import SessionMetadata, SessionQuery


def search(root: Root, query: SessionQuery) -> list[SessionMetadata]:
    needle, limit, alias = check_query(query)
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
            md = listed(root, files, look)
            if md is not None:
                out.append(md)
    return out


def mentions(root: Root, files: SessionFiles, needle: str) -> bool:
    """Whether a message of the session has text containing ``needle`` (casefolded)."""
    ascii_needle = needle.encode("ascii") if needle.isascii() else None

    def scan(fd: int, size: int) -> bool:
        return any(records.mentions(line, needle, ascii_needle)
                   for _start, line in iter_lines_forward(fd, 0, size, block=CHUNK_BYTES))

    try:
        return bool(snapshot.with_transcript(root, files, scan))
    except (OSError, SessionStoreError) as exc:  # unreadable, or not a regular file: not a match
        log.warning("cannot search session %r: %s", files.key, exc)
        return False
