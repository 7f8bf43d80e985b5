"""The one exception hierarchy of jsonl_sessions.

Every error the store raises on purpose derives from :class:`SessionStoreError`, and
where a stdlib type fits it is also that type (``KeyError``, ``ValueError``,
``TypeError``, ``TimeoutError``), so callers can catch either. Every error keeps the
fields it was built with as attributes and pickles with them (``__reduce__``), so it
survives being sent between processes.
"""

from __future__ import annotations

from typing import Any


class SessionStoreError(Exception):
    """Root of every error raised by jsonl_sessions."""

    _fields: tuple[str, ...] = ()

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        for name in self._fields:
            setattr(self, name, fields.get(name))

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {name: getattr(self, name) for name in self._fields}
        return (_rebuild, (type(self), self.message, fields))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[SessionStoreError], message: str, fields: dict[str, Any]) -> SessionStoreError:
    return cls(message, **fields)


class CorruptTranscriptError(SessionStoreError):
    """A complete transcript line does not parse as a message.

    ``line`` is 1-based, ``offset`` is the byte offset of the line's start from the
    start of the file. A torn tail (a final fragment without a newline) is never
    corruption: it is an uncommitted write and is ignored.
    """

    _fields = ("key", "path", "line", "offset", "reason")
    key: str | None
    path: str | None
    line: int | None
    offset: int | None
    reason: str | None

    def __init__(
        self,
        message: str | None = None,
        *,
        key: str | None = None,
        path: str | None = None,
        line: int | None = None,
        offset: int | None = None,
        reason: str | None = None,
    ) -> None:
        if message is None:
            message = f"corrupt transcript {path!s} (session {key!r}): line {line}, byte offset {offset}: {reason}"
        super().__init__(message, key=key, path=path, line=line, offset=offset, reason=reason)


class CorruptMetadataError(SessionStoreError):
    """A session's sidecar metadata file exists but is not a valid sidecar."""

    _fields = ("key", "path", "reason")
    key: str | None
    path: str | None
    reason: str | None

    def __init__(
        self, message: str | None = None, *, key: str | None = None, path: str | None = None, reason: str | None = None
    ) -> None:
        if message is None:
            message = f"corrupt sidecar {path!s} (session {key!r}): {reason}"
        super().__init__(message, key=key, path=path, reason=reason)


class UnsafePathError(SessionStoreError):
    """A session file inside root is not a regular file (e.g. a planted symlink); it is never followed."""

    _fields = ("key", "path")
    key: str | None
    path: str | None

    def __init__(self, message: str | None = None, *, key: str | None = None, path: str | None = None) -> None:
        if message is None:
            message = f"refusing to follow {path!s} (session {key!r}): not a regular file"
        super().__init__(message, key=key, path=path)


class InvalidSessionKeyError(SessionStoreError, ValueError):
    """A session key is not a non-empty string of encodable characters without NUL."""

    _fields = ("key",)
    key: object

    def __init__(self, message: str, *, key: object = None) -> None:
        super().__init__(message, key=key)


class SessionNotFoundError(SessionStoreError, KeyError):
    """The session does not exist (and the method does not create it)."""

    _fields = ("key",)
    key: str | None

    def __init__(self, message: str | None = None, *, key: str | None = None) -> None:
        super().__init__(message or f"session {key!r} does not exist", key=key)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class SessionExistsError(SessionStoreError):
    """The target session already exists."""

    _fields = ("key",)
    key: str | None

    def __init__(self, message: str | None = None, *, key: str | None = None) -> None:
        super().__init__(message or f"session {key!r} already exists", key=key)


class InvalidMessageError(SessionStoreError, ValueError):
    """A message is structurally invalid: no role, a reserved extra field, an id out of order, too large."""

    _fields = ("key", "message_id", "reason")
    key: str | None
    message_id: str | None
    reason: str | None

    def __init__(
        self,
        message: str | None = None,
        *,
        key: str | None = None,
        message_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message or f"invalid message for session {key!r}: {reason}", key=key,
                         message_id=message_id, reason=reason)


class DuplicateMessageError(InvalidMessageError):
    """A message id already exists in the session."""

    def __init__(
        self,
        message: str | None = None,
        *,
        key: str | None = None,
        message_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message or f"message id {message_id!r} already exists in session {key!r}",
                         key=key, message_id=message_id, reason=reason or "duplicate id")


class MessageNotFoundError(SessionStoreError, ValueError):
    """A message id named by the caller is not in the session."""

    _fields = ("key", "message_id")
    key: str | None
    message_id: str | None

    def __init__(self, message: str | None = None, *, key: str | None = None, message_id: str | None = None) -> None:
        super().__init__(message or f"message id {message_id!r} not found in session {key!r}",
                         key=key, message_id=message_id)


class SerializationError(SessionStoreError, TypeError):
    """A message is not JSON-serialisable (or holds a non-finite float); nothing was written."""

    _fields = ("key", "reason")
    key: str | None
    reason: str | None

    def __init__(self, message: str | None = None, *, key: str | None = None, reason: str | None = None) -> None:
        super().__init__(message or f"message for session {key!r} is not JSON-serialisable: {reason}",
                         key=key, reason=reason)


class LockTimeoutError(SessionStoreError, TimeoutError):
    """The session's mutation guard was not acquired within ``lock_timeout`` seconds.

    ``holder_pid`` is the process holding the lock where the platform tells (Linux:
    ``/proc/locks``), else None.
    """

    _fields = ("key", "path", "timeout", "holder_pid")
    key: str | None
    path: str | None
    timeout: float | None
    holder_pid: int | None

    def __init__(
        self,
        message: str | None = None,
        *,
        key: str | None = None,
        path: str | None = None,
        timeout: float | None = None,
        holder_pid: int | None = None,
    ) -> None:
        if message is None:
            holder = f"held by process {holder_pid}" if holder_pid else "holder unknown"
            message = f"timed out after {timeout}s waiting for the lock of session {key!r} ({path}; {holder})"
        super().__init__(message, key=key, path=path, timeout=timeout, holder_pid=holder_pid)


__all__ = [
    "CorruptMetadataError",
    "CorruptTranscriptError",
    "DuplicateMessageError",
    "InvalidMessageError",
    "InvalidSessionKeyError",
    "LockTimeoutError",
    "MessageNotFoundError",
    "SerializationError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionStoreError",
    "UnsafePathError",
]
