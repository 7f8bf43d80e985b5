"""Full-text search over sessions (:meth:`jsonl_sessions.SessionStore.search`).

Transcripts are streamed in 1 MiB blocks of whole lines, newest-activity sessions first,
stopping once ``limit`` sessions matched. In each block, byte searches leave only the
lines that may hold the keyword (:class:`jsonl_sessions.records.Prefilter`: in the usual
case, the lines holding it ASCII case-insensitively); of those, a line that is pure ASCII
without JSON escapes and does not contain the keyword is skipped without decoding, and
any other line is decoded and checked exactly. Takes no lock (each read is a consistent snapshot).
"""

from __future__ import annotations

import logging

from .. import records
from ..base import search_order, search_results
from ..errors import SessionStoreError
from ..types import SessionMetadata
from . import control as snapshot
from .layout import SessionFiles
from .lines import BOM, iter_blocks
from .metadata import listed, looks
from .txn import Root

log = logging.getLogger("jsonl_sessions")


def search(root: Root, needle: str, limit: int | None, alias: str | None) -> list[SessionMetadata]:
    """The sessions matching the casefolded ``needle`` (a checked query: see
    :func:`jsonl_sessions.arguments.check_query`), newest activity first."""
    prefilter = records.Prefilter(needle)
    ordered = search_order(((look.activity_ns, files.key, look.meta, (files, look)) for files, look in looks(root)),
                           alias)
    return search_results(ordered, needle, limit, lambda item: mentions_in(root, item[0], needle, prefilter),
                          lambda item: listed(root, *item))


def mentions(root: Root, files: SessionFiles, needle: str) -> bool:
    """Whether a message of the session has text containing ``needle`` (casefolded)."""
    prefilter = records.Prefilter(needle)
    return mentions_in(root, files, needle, prefilter)


def block_mentions(block: bytes, needle: str, prefilter: records.Prefilter) -> bool:
    """Whether a line of ``block`` (complete lines, each ending with a newline) has text
    containing ``needle``: only the lines byte searches leave as candidates are checked
    (:class:`~jsonl_sessions.records.Prefilter`), each exactly."""
    lines = prefilter.candidates(block)
    if lines is None:
        lines = block.split(b"\n")
        lines.pop()  # the empty piece after the final newline
    ascii_needle = prefilter.ascii
    return any(records.mentions(line, needle, ascii_needle) for line in lines)


def mentions_in(root: Root, files: SessionFiles, needle: str, prefilter: records.Prefilter) -> bool:
    """:func:`mentions` with the needle's prefilter already made."""

    def scan(fd: int, size: int) -> bool:
        for start, block in iter_blocks(fd, 0, size):
            if start == 0 and block.startswith(BOM):
                block = block[len(BOM):]
            if block_mentions(block, needle, prefilter):
                return True
        return False

    try:
        return bool(snapshot.with_transcript(root, files, scan))
    except (OSError, SessionStoreError) as exc:  # unreadable, or not a regular file: not a match
        log.warning("cannot search session %r: %s", files.key, exc)
        return False
