"""jsonl_sessions: a crash-safe session store for local AI agents, as plain JSONL files.

Each session is a transcript ``.jsonl`` file (one message a line) plus a sidecar
metadata file, in one directory. See README.md for the guarantees and docs/format.md
for the on-disk format.
"""

from __future__ import annotations

from .aio import AsyncSessionStore
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
from .protocol import AsyncSessionBackend, SessionBackend
from .store import SessionStore
from .types import (
    ChatMessage,
    Page,
    SessionMetadata,
    SessionQuery,
    SessionState,
    TimestampedMessage,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncSessionBackend",
    "AsyncSessionStore",
    "ChatMessage",
    "CorruptControlError",
    "CorruptMetadataError",
    "CorruptTranscriptError",
    "DatabaseUnavailableError",
    "DuplicateMessageError",
    "InvalidArgumentError",
    "InvalidMessageError",
    "InvalidSessionKeyError",
    "LockTimeoutError",
    "MessageNotFoundError",
    "OutcomeUnknownError",
    "Page",
    "SerializationError",
    "SessionBackend",
    "SessionExistsError",
    "SessionMetadata",
    "SessionNotFoundError",
    "SessionQuery",
    "SessionState",
    "SessionStore",
    "SessionStoreError",
    "TimestampedMessage",
    "UnsafePathError",
    "__version__",
]
