"""jsonl_sessions: a crash-safe session store for local AI agents, as plain JSONL files.

Each session is a transcript ``.jsonl`` file (one message a line) plus a sidecar
metadata file, in one directory. See README.md for the guarantees and docs/format.md
for the on-disk format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    CorruptControlError,
    CorruptMetadataError,
    CorruptTranscriptError,
    DatabaseUnavailableError,
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidSessionKeyError,
    LockTimeoutError,
    MessageNotFoundError,
    OutcomeUnknownError,
    SerializationError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    UnsafePathError,
)
from .jsonl.store import SessionStore
from .types import (
    ChatMessage,
    Page,
    SearchHit,
    SearchPage,
    SessionList,
    SessionMetadata,
    SessionQuery,
    SessionState,
    TimestampedMessage,
)
from .verification import Finding, VerifyReport

if TYPE_CHECKING:
    from .aio import AsyncSessionStore
    from .protocol import AsyncSessionBackend, SessionBackend

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # AsyncSessionStore needs asyncio, which costs more to import than the rest of the
    # package, and the backend protocols only matter to code typed against them: both are
    # loaded on first use, so ``import jsonl_sessions`` stays cheap and never imports asyncio.
    if name == "AsyncSessionStore":
        from .aio import AsyncSessionStore

        return AsyncSessionStore
    if name in ("SessionBackend", "AsyncSessionBackend"):
        from . import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AsyncSessionBackend",
    "AsyncSessionStore",
    "ChatMessage",
    "CorruptControlError",
    "CorruptMetadataError",
    "CorruptTranscriptError",
    "DatabaseUnavailableError",
    "DuplicateMessageError",
    "Finding",
    "InvalidArgumentError",
    "InvalidMessageError",
    "InvalidSessionKeyError",
    "LockTimeoutError",
    "MessageNotFoundError",
    "OutcomeUnknownError",
    "Page",
    "SearchHit",
    "SearchPage",
    "SerializationError",
    "SessionBackend",
    "SessionExistsError",
    "SessionList",
    "SessionMetadata",
    "SessionNotFoundError",
    "SessionQuery",
    "SessionState",
    "SessionStore",
    "SessionStoreError",
    "TimestampedMessage",
    "UnsafePathError",
    "VerifyReport",
    "__version__",
]
