"""What a store's ``verify()`` finds, on every backend: :class:`Finding` and :class:`VerifyReport`.

A finding is a *problem* (the store is not healthy: the command line's ``verify`` exits
1) or a *note* (worth knowing, harmless: a quarantine file, a write in progress). Each
says what kind it is (a short tag; every backend documents its kinds), which session it
is about (None for the store as a whole), where (a file of the store's directory, a line
and byte offset in a session's transcript or rows), what was seen, and whether
``verify(fix=True)`` can clear it. Both types have a JSON form (plain dicts of str, int,
bool and None) that the command line prints with ``--json``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidArgumentError
from .keys import validate_key

#: A problem makes a store unhealthy; a note does not.
Severity = Literal["problem", "note"]


@dataclass(frozen=True)
class Finding:
    """One thing ``verify()`` found.

    ``kind``: a short tag naming what was found (the backend's verify module lists them);
    ``message``: what was seen, in words; ``key``: the session concerned (None for the
    store as a whole, or a file whose session cannot be told); ``file``: the file
    concerned, relative to the report's :attr:`~VerifyReport.location` ("" for the
    location itself: the store's directory, database file or schema); ``line``: the
    1-based line of the session's transcript (or row position + 1); ``offset``: the byte
    offset of that line in the transcript as stored, or of the damaged bytes in a file;
    ``severity``: ``"problem"`` or ``"note"``; ``fixable``: whether ``verify(fix=True)``
    clears it."""

    kind: str
    message: str
    key: str | None = None
    file: str = ""
    line: int | None = None
    offset: int | None = None
    severity: Severity = "problem"
    fixable: bool = False

    @property
    def problem(self) -> bool:
        return self.severity == "problem"

    def path(self, location: str) -> str:
        """The file concerned, joined to the report's ``location``."""
        return os.path.join(location, self.file) if self.file else location

    def to_json(self, location: str) -> dict[str, Any]:
        """The JSON form: every field, plus ``path`` (:meth:`path`)."""
        return {
            "kind": self.kind,
            "severity": self.severity,
            "file": self.file,
            "path": self.path(location),
            "key": self.key,
            "line": self.line,
            "offset": self.offset,
            "message": self.message,
            "fixable": self.fixable,
        }


@dataclass
class VerifyReport:
    """What ``verify()`` checked and found.

    ``location``: the store checked (its directory, database file, or schema and server);
    ``backend``: ``"jsonl"``, ``"sqlite"``, ``"postgres"`` or ``"memory"``; ``sessions``,
    ``messages``, ``bytes``: how much was checked (the sessions and their complete lines
    or rows, a corrupt one included, as :meth:`get_message_count` counts them; their
    stored bytes); ``findings``: problems first, then notes; ``fixed``: the
    problems ``verify(fix=True)`` cleared (they are no longer in ``findings``, which
    describes the store as it is after the fix). ``ok``: no problem (notes allowed)."""

    location: str
    backend: str
    sessions: int = 0
    messages: int = 0
    bytes: int = 0
    findings: list[Finding] = field(default_factory=list)
    fixed: list[Finding] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if not f.problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """The JSON form: ``root`` (the location), ``backend``, ``ok``, the counts, and
        ``problems``, ``notes`` and ``fixed`` as lists of :meth:`Finding.to_json`."""
        return {
            "root": self.location,
            "backend": self.backend,
            "ok": self.ok,
            "sessions": self.sessions,
            "messages": self.messages,
            "bytes": self.bytes,
            "problems": [f.to_json(self.location) for f in self.problems],
            "notes": [f.to_json(self.location) for f in self.notes],
            "fixed": [f.to_json(self.location) for f in self.fixed],
        }


def wanted_keys(keys: Iterable[str] | None) -> list[str] | None:
    """The sessions a ``verify(keys)`` call names, checked before anything is read (None:
    every session), without duplicates, in the order given.

    :raises InvalidSessionKeyError: a key is invalid.
    :raises InvalidArgumentError: ``keys`` is a single string (a collection of keys is expected)."""
    if keys is None:
        return None
    if isinstance(keys, (str, bytes)):
        raise InvalidArgumentError(argument="keys", reason="keys must be a collection of session keys, not a string")
    return list(dict.fromkeys(validate_key(k) for k in keys))


def missing_session(key: str) -> Finding:
    """The finding for a session ``verify(keys)`` names that does not exist."""
    return Finding("missing-session", "the session does not exist", key)


__all__ = ["Finding", "Severity", "VerifyReport", "missing_session", "wanted_keys"]
