"""The data types of the public API.

:class:`ChatMessage` is chosen for load speed: it is an immutable object that wraps one
normalised dict (the same dict the transcript line decodes to), so loading a message
costs one ``orjson.loads`` plus one small object, with no per-field copying. It still
behaves like a frozen dataclass: fields are read-only attributes, equality is by value,
``repr`` is readable, ``replace`` returns a changed copy, and it pickles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any, Literal

from .errors import InvalidMessageError

#: The fields every transcript line carries; every other field is an extra.
RESERVED_FIELDS = ("id", "created_at", "role", "kind", "content")
_RESERVED = frozenset(RESERVED_FIELDS)
_STR_ONLY = {str}

SessionStateName = Literal["idle", "running", "error"]

#: What a returned mutation survives: ``"fsync"`` a power loss, ``"flush"`` a process crash.
Durability = Literal["fsync", "flush"]
SESSION_STATES: frozenset[str] = frozenset({"idle", "running", "error"})


class ChatMessage:
    """One immutable chat message.

    ``role`` (str), ``content`` (any JSON value), ``id`` ("" until the store assigns a
    ULID), ``created_at`` (ms since the Unix epoch, or None until stored), ``kind``
    ("message", or "compaction" for a compaction summary) and ``extra`` (every other
    JSON field, round-tripped unchanged: ``tool_calls``, ``tool_call_id``, ``name``...).

    Raises :class:`InvalidMessageError` (a ``ValueError``) for a non-string role, id or
    kind, a non-integer ``created_at``, or an extra field that is reserved or not a
    string. JSON-serialisability of ``content`` is checked when the message is written.
    """

    __slots__ = ("_data",)
    _data: dict[str, Any]

    def __init__(
        self,
        role: str,
        content: Any = None,
        id: str = "",
        created_at: int | None = None,
        kind: str = "message",
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        _check_field_types(role, id, created_at, kind)
        data: dict[str, Any] = {"id": id, "created_at": created_at, "role": role, "kind": kind, "content": content}
        if extra:
            for name in extra:
                if not isinstance(name, str) or name in _RESERVED:
                    raise InvalidMessageError(reason=f"extra field {name!r} is reserved or not a string")
            data.update(extra)
        _set_data(self, data)

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatMessage:
        """Build a message from a JSON object: the reserved fields by name, the rest as extras.

        Raises :class:`InvalidMessageError` when ``role`` is missing or a field has the
        wrong type.
        """
        if not isinstance(data, Mapping):
            raise InvalidMessageError(reason=f"a message must be a mapping, not {type(data).__name__}")
        if "role" not in data:
            raise InvalidMessageError(reason="a message needs a 'role'")
        extra = {k: v for k, v in data.items() if k not in _RESERVED}
        return cls(
            data["role"],
            data.get("content"),
            id=data.get("id") or "",
            created_at=data.get("created_at"),
            kind=data.get("kind") or "message",
            extra=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        """A new dict with every field: id, created_at, role, kind, content, then the extras."""
        d = self._data
        out = {
            "id": d.get("id") or "",
            "created_at": d.get("created_at"),
            "role": d["role"],
            "kind": d.get("kind") or "message",
            "content": d.get("content"),
        }
        for k, v in d.items():
            if k not in _RESERVED:
                out[k] = v
        return out

    def replace(self, **changes: Any) -> ChatMessage:
        """A copy with some fields changed (like ``dataclasses.replace``)."""
        fields = {
            "role": self.role,
            "content": self.content,
            "id": self.id,
            "created_at": self.created_at,
            "kind": self.kind,
            "extra": self.extra,
        }
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"unknown ChatMessage fields: {sorted(unknown)}")
        fields.update(changes)
        return ChatMessage(**fields)

    # -- fields ---------------------------------------------------------------------
    @property
    def role(self) -> str:
        return self._data["role"]  # type: ignore[no-any-return]

    @property
    def content(self) -> Any:
        return self._data.get("content")

    @property
    def id(self) -> str:
        return self._data.get("id") or ""

    @property
    def created_at(self) -> int | None:
        return self._data.get("created_at")

    @property
    def kind(self) -> str:
        return self._data.get("kind") or "message"

    @property
    def extra(self) -> dict[str, Any]:
        """A new dict of every non-reserved field (changing it does not change the message)."""
        return {k: v for k, v in self._data.items() if k not in _RESERVED}

    @property
    def is_compaction(self) -> bool:
        return self.kind == "compaction"

    # -- value semantics ------------------------------------------------------------
    def _key(self) -> tuple[Any, ...]:
        return (self.role, self.content, self.id, self.created_at, self.kind, self.extra)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChatMessage):
            return NotImplemented
        return self._data == other._data or self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.id, self.role, self.created_at, self.kind))

    def __repr__(self) -> str:
        content = repr(self.content)
        if len(content) > 80:
            content = content[:77] + "..."
        parts = [f"role={self.role!r}", f"content={content}"]
        if self.id:
            parts.append(f"id={self.id!r}")
        if self.created_at is not None:
            parts.append(f"created_at={self.created_at!r}")
        if self.kind != "message":
            parts.append(f"kind={self.kind!r}")
        extra = self.extra
        if extra:
            parts.append(f"extra={extra!r}")
        return f"ChatMessage({', '.join(parts)})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ChatMessage is immutable; use .replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("ChatMessage is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (from_record, (dict(self._data),))

    def __copy__(self) -> ChatMessage:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ChatMessage:
        import copy

        return from_record(copy.deepcopy(self._data, memo))


_set_data = ChatMessage._data.__set__  # type: ignore[attr-defined,misc]  # the slot, bypassing the frozen __setattr__
_new = object.__new__


def from_record(data: dict[str, Any]) -> ChatMessage:
    """The message of a record dict, wrapped without copying it: the fast constructor for
    records :func:`jsonl_sessions.codec.decode_record` produced (or that passed
    :func:`jsonl_sessions.codec.invalid_reason`). Nothing is checked, so any other dict
    belongs in :meth:`ChatMessage.from_dict`; the dict must not be changed afterwards (the
    message would change with it). Cost: O(1)."""
    msg = _new(ChatMessage)
    _set_data(msg, data)
    return msg


_wrap = from_record  # the name pickles made by earlier versions refer to


def _check_field_types(role: object, id: object, created_at: object, kind: object) -> None:
    if not isinstance(role, str):
        raise InvalidMessageError(reason=f"role must be a string, not {type(role).__name__}")
    if not isinstance(id, str):
        raise InvalidMessageError(reason=f"id must be a string, not {type(id).__name__}")
    if created_at is not None and (type(created_at) is not int):
        raise InvalidMessageError(reason=f"created_at must be int milliseconds or None, not {created_at!r}")
    if not isinstance(kind, str):
        raise InvalidMessageError(reason=f"kind must be a string, not {type(kind).__name__}")


def as_message(message: ChatMessage | Mapping[str, Any]) -> ChatMessage:
    """Accept a :class:`ChatMessage` or a plain dict with at least ``role`` (checked as
    :meth:`ChatMessage.from_dict` checks it)."""
    if type(message) is dict:  # the common case, built here without the constructor's calls
        # The five fields in line order, the caller's values over the defaults, the extras
        # after them in their order: one merge in C. It is the message when the four typed
        # fields have exactly the usual types (role, id, kind str; created_at None or int),
        # the kind is not empty and every extra name is a str; anything else (a missing
        # role, a None id, a str subclass...) takes the careful way, which normalises or raises.
        data = {**_DEFAULTS, **message}
        if tuple(map(type, _typed(data))) in _USUAL_TYPES and data["kind"] and (
                len(data) == 5 or set(map(type, message)) == _STR_ONLY):
            msg = _new(ChatMessage)
            _set_data(msg, data)
            return msg
        return _as_message_checked(message)
    if isinstance(message, ChatMessage):
        return message
    return ChatMessage.from_dict(message)


def _as_message_checked(message: dict[str, Any]) -> ChatMessage:
    """:func:`as_message` of a dict whose fields need normalising ("" for a falsy id,
    "message" for a falsy kind) or checking (the error of the wrong field)."""
    get = message.get
    role, mid, created, kind = get("role"), get("id") or "", get("created_at"), get("kind") or "message"
    plain = message.keys() <= _RESERVED
    if role is None and (plain or "role" not in message):
        raise InvalidMessageError(reason="a message needs a 'role'")
    if not (isinstance(role, str) and isinstance(mid, str) and isinstance(kind, str)
            and (created is None or type(created) is int)):
        _check_field_types(role, mid, created, kind)  # raises the error of the wrong field
    data = {"id": mid, "created_at": created, "role": role, "kind": kind, "content": get("content")}
    if not plain:
        if set(map(type, message)) != _STR_ONLY:  # a name that is not a str (or a subclass of it)
            for name in message:
                if not isinstance(name, str):
                    raise InvalidMessageError(reason=f"extra field {name!r} is reserved or not a string")
        # The extras in their order after the five fields (which keep their places), in C.
        data.update(message)
        data["id"], data["kind"] = mid, kind  # as normalised above ("" and "message" for a missing one)
    msg = _new(ChatMessage)
    _set_data(msg, data)
    return msg


#: The defaults :func:`as_message` merges a dict over (the five fields, in line order).
_DEFAULTS: dict[str, Any] = {"id": "", "created_at": None, "role": None, "kind": "message", "content": None}
_typed = itemgetter("role", "id", "kind", "created_at")
#: The types of (role, id, kind, created_at) a dict may have to be taken as it is.
_USUAL_TYPES = frozenset({(str, str, str, type(None)), (str, str, str, int)})


def has_non_finite_float(value: Any) -> bool:
    """True when ``value`` holds NaN or an infinity anywhere (JSON has no such numbers)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(has_non_finite_float(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_non_finite_float(v) for v in value)
    return False


#: What every write method accepts as a message: a :class:`ChatMessage`, or a mapping
#: with at least ``role`` (read as :meth:`ChatMessage.from_dict` does).
MessageLike = ChatMessage | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TimestampedMessage:
    """A message with its persisted creation time (UTC), None when it has none (or one a
    ``datetime`` cannot hold, see :func:`datetime_of_ms`)."""

    message: ChatMessage
    created_at: datetime | None


def datetime_of_ms(ms: int | None) -> datetime | None:
    """``ms`` (milliseconds since the epoch) as an aware UTC ``datetime``; None when it is
    None or outside what a ``datetime`` holds (years 1 to 9999): a stored ``created_at``
    may be any 64-bit integer, and one such message must not make a whole read fail."""
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class SessionState:
    """A session's run state: ``idle``, ``running`` or ``error``, since when, for which turn."""

    state: str
    turn_id: str | None
    since: datetime


@dataclass(frozen=True, slots=True)
class SessionMetadata:
    """What the store knows about a session without reading its messages."""

    key: str
    name: str | None = None
    agent_alias: str | None = None
    principal_id: str | None = None
    state: str | None = None
    turn_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    message_count: int = 0
    size_bytes: int = 0
    trim_breadcrumb: bool | None = None
    context: dict[str, str] = field(default_factory=dict)
    parent: str | None = None
    fork_point: str | None = None


class SessionList(list[SessionMetadata]):
    """A list of sessions (a plain list in every other respect) with the cursor of the next page."""

    #: Opaque; pass it as ``cursor=`` for the next page. None: this was the last page.
    cursor: str | None

    def __init__(self, sessions: Iterable[SessionMetadata] = (), cursor: str | None = None) -> None:
        super().__init__(sessions)
        self.cursor = cursor

    def __repr__(self) -> str:
        return f"SessionList({list.__repr__(self)}, cursor={self.cursor!r})"


@dataclass(frozen=True, slots=True)
class SessionQuery:
    """A search: case-insensitive ``keyword``, at most ``limit`` results, optional alias filter."""

    keyword: str
    limit: int | None = 50
    agent_alias: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of messages, oldest first, with cursors for the next older/newer page."""

    messages: list[ChatMessage]
    has_more: bool
    before: str | None
    after: str | None


@dataclass(frozen=True)
class SearchHit:
    """One message found by ``search_messages``: where it is (session ``key``,
    ``message_id``), its ``role`` and ``created_at`` (ms since the epoch, None when it has
    none), and a ``snippet`` of its searchable text around the first match with the
    ``[start, end)`` character offsets of every match inside the snippet."""

    key: str
    message_id: str
    role: str
    created_at: int | None
    snippet: str
    matches: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SearchPage:
    """A page of ``search_messages``: ``hits`` newest first, and ``cursor`` (opaque) to pass
    as ``cursor=`` for the next, older hits; None when there are no more."""

    hits: list[SearchHit]
    cursor: str | None
