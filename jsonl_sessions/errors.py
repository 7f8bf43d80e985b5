"""The one exception hierarchy of jsonl_sessions.

Every error the store raises on purpose derives from :class:`SessionStoreError`, and
where a stdlib type fits it is also that type (``KeyError``, ``ValueError``,
``TypeError``, ``TimeoutError``), so callers can catch either. An error is built from
keyword fields (``CorruptTranscriptError(key=..., path=..., line=..., offset=...,
reason=...)``), keeps them as attributes (None when not given), makes its message from
them unless one is passed, and pickles with them (``__reduce__``), so it survives being
sent between processes.
"""

from __future__ import annotations

from typing import Any


class SessionStoreError(Exception):
    """Root of every error raised by jsonl_sessions."""

    #: The keyword fields this error carries, in order.
    _fields: tuple[str, ...] = ()
    #: ``str.format`` template of the default message, over the fields.
    _template = "{message}"

    def __init__(self, message: str | None = None, **fields: Any) -> None:
        unknown = set(fields) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no fields {sorted(unknown)}")
        for name in self._fields:
            setattr(self, name, fields.get(name))
        if message is None:
            message = self._default_message()
        super().__init__(message)
        self.message = message

    def _default_message(self) -> str:
        return self._template.format(**{name: getattr(self, name) for name in self._fields})

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {name: getattr(self, name) for name in self._fields}
        return (_rebuild, (type(self), self.message, fields))

    def __str__(self) -> str:  # also for KeyError, whose str() would repr() the message
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
    _template = "corrupt transcript {path} (session {key!r}): line {line}, byte offset {offset}: {reason}"
    key: str | None
    path: str | None
    line: int | None
    offset: int | None
    reason: str | None

    def _default_message(self) -> str:
        # say what to do: the repair keeps every line that parses, after saving the original
        import shlex  # only an error's message needs it

        return (f"{super()._default_message()}; to set corrupt lines aside (the original bytes are kept in a "
                f"quarantine file): `jsonl-sessions repair {shlex.quote(self.key or 'KEY')}` or "
                f"store.compact(key, repair=True)")


class CorruptControlError(CorruptTranscriptError):
    """A session's control file (``<stem>.lock``) holds a committed roll-forward record
    that this version cannot read (an unknown operation, or fields of the wrong type).

    ``path`` is the control file, ``offset`` the byte offset of the record in it; ``line``
    is None. Nothing is changed: the session cannot be written until the record is
    removed (by a version that knows it, or by hand, see docs/format.md).
    """

    _template = "corrupt control file {path} (session {key!r}): record at byte offset {offset}: {reason}"

    def _default_message(self) -> str:
        return SessionStoreError._default_message(self)


class CorruptMetadataError(SessionStoreError):
    """A session's sidecar metadata file exists but is not a valid sidecar."""

    _fields = ("key", "path", "reason")
    _template = "corrupt sidecar {path} (session {key!r}): {reason}"
    key: str | None
    path: str | None
    reason: str | None


class UnsafePathError(SessionStoreError):
    """A session file inside root is not a regular file (a planted symlink, FIFO, socket, device or
    directory); it is never followed, read or waited on."""

    _fields = ("key", "path")
    _template = "refusing to follow {path} (session {key!r}): not a regular file"
    key: str | None
    path: str | None


class InvalidSessionKeyError(SessionStoreError, ValueError):
    """A session key is not a non-empty string of encodable characters without NUL."""

    _fields = ("key",)
    _template = "invalid session key {key!r}"
    key: object


class SessionNotFoundError(SessionStoreError, KeyError):
    """The session does not exist (and the method does not create it)."""

    _fields = ("key",)
    _template = "session {key!r} does not exist"
    key: str | None


class SessionExistsError(SessionStoreError):
    """The target session already exists."""

    _fields = ("key",)
    _template = "session {key!r} already exists"
    key: str | None


class InvalidMessageError(SessionStoreError, ValueError):
    """A message is structurally invalid: no role, a reserved extra field, an id out of order, too large."""

    _fields = ("key", "message_id", "reason")
    _template = "invalid message for session {key!r}: {reason}"
    key: str | None
    message_id: str | None
    reason: str | None

    def _default_message(self) -> str:
        if self.key is None and type(self) is InvalidMessageError:  # raised before a session is involved
            return f"invalid message: {self.reason}"
        return super()._default_message()


class DuplicateMessageError(InvalidMessageError):
    """A message id already exists in the session."""

    _template = "message id {message_id!r} already exists in session {key!r}"


class InvalidArgumentError(SessionStoreError, ValueError):
    """An argument other than a key or a message is out of range or of the wrong kind
    (a negative window, a page limit below 1, both page cursors, an unknown run state,
    an empty principal...). Raised before anything is read or written, with the same
    type and message on every backend. ``argument`` names the parameter."""

    _fields = ("argument", "reason")
    _template = "{reason}"
    argument: str | None
    reason: str | None


class MessageNotFoundError(SessionStoreError, ValueError):
    """A message id named by the caller is not in the session."""

    _fields = ("key", "message_id")
    _template = "message id {message_id!r} not found in session {key!r}"
    key: str | None
    message_id: str | None


class SerializationError(SessionStoreError, TypeError):
    """A message is not JSON-serialisable (or holds a non-finite float); nothing was written."""

    _fields = ("key", "reason")
    _template = "message for session {key!r} is not JSON-serialisable: {reason}"
    key: str | None
    reason: str | None


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

    def _default_message(self) -> str:
        holder = f"held by process {self.holder_pid}" if self.holder_pid else "holder unknown"
        return f"timed out after {self.timeout}s waiting for the lock of session {self.key!r} ({self.path}; {holder})"


class DatabaseUnavailableError(SessionStoreError, ConnectionError):
    """A database backend could not do the call: the server could not be reached, the
    connection broke, or a statement ran past ``statement_timeout``, before anything was
    committed (the call changed nothing; it is safe to retry). ``dsn`` names the server
    (without a password), ``reason`` says what failed."""

    _fields = ("dsn", "reason")
    _template = "the database {dsn} is unavailable: {reason}"
    dsn: str | None
    reason: str | None


class OutcomeUnknownError(DatabaseUnavailableError):
    """The connection broke while the server was committing: the mutation may or may not
    have been committed. Read back to find out; a retry of an append that carries its own
    message id is idempotent (it raises :class:`DuplicateMessageError` if the first try
    was committed)."""

    _template = "the database {dsn} went away during COMMIT; the mutation may or may not be committed: {reason}"


__all__ = [
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
    "SerializationError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionStoreError",
    "UnsafePathError",
]
