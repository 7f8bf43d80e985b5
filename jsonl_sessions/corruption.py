"""What a corrupt line is, for every backend: the byte-order mark rule and :class:`BadLine`.

A transcript (a JSONL file, or the rows of a database backend exported as one) is a
sequence of lines; a complete line that does not decode to a message record, or that
breaks the id rules (:func:`jsonl_sessions.ids.first_disorder`), is corruption, described
once here. The JSONL backend reads bytes into lines (:mod:`jsonl_sessions.jsonl.lines`),
compaction (:mod:`jsonl_sessions.compaction`) plans over lines: both import this, so
nothing backend-neutral imports the JSONL backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CorruptTranscriptError

#: A UTF-8 byte-order mark: skipped at offset 0 of a transcript (editors add it); offsets
#: still count it.
BOM = b"\xef\xbb\xbf"

#: Why a line that starts with a byte-order mark anywhere but at offset 0 is corrupt.
BOM_INSIDE = "a byte-order mark inside the file"


@dataclass(frozen=True, slots=True)
class BadLine:
    """A corrupt line: a complete line (it ends with a newline) that does not decode to a
    message record, or whose id breaks the id rules. Its 1-based ``line`` number and byte
    ``offset`` in the transcript, and why (``reason``). The one description of corruption:
    lenient reads list these (and log them), strict ones raise :meth:`error`, and
    compaction drops or repairs them (:func:`jsonl_sessions.compaction.plan_lines`)."""

    line: int
    offset: int
    reason: str

    @classmethod
    def of(cls, line: int, offset: int, exc: BaseException) -> BadLine:
        """The corrupt line at ``line`` / ``offset`` whose decoding raised ``exc``."""
        return cls(line, offset, str(exc) or type(exc).__name__)

    def error(self, key: str | None, path: str | None) -> CorruptTranscriptError:
        """The error a strict read raises for this line of session ``key``'s transcript ``path``."""
        return CorruptTranscriptError(key=key, path=path, line=self.line, offset=self.offset, reason=self.reason)


__all__ = ["BOM", "BOM_INSIDE", "BadLine"]
