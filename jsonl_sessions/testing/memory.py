"""MemorySessionStore: the whole session-store API in memory, as a test double.

Same semantics as :class:`jsonl_sessions.SessionStore` (and it passes the same harness:
the state machine, the contract mixin), minus the files:

- ids are ULIDs assigned by the same rules (strictly increasing per session, monotonic
  within one millisecond and after the clock steps back; caller ids kept, a duplicate
  refused with :class:`DuplicateMessageError`, an out-of-order one with
  :class:`InvalidMessageError`); ``created_at`` is kept when given, else the clock's now;
- messages are stored as their encoded JSON lines and decoded on every read, so what a
  caller gets back is exactly what the JSONL store would return (a tuple comes back as
  a list, a non-JSON value or NaN is refused with :class:`SerializationError`, nothing
  stored; an encoded message over ``max_message_bytes`` with :class:`InvalidMessageError`);
- every error of the file store for the same call (invalid keys, missing sessions,
  unknown ids, invalid metadata values, pages' cursors...);
- ``updated_at`` / activity is the wall-clock time of the last change (the file store
  uses file modification times); ``size_bytes`` is the length of the lines.

Nothing survives the object (``persistent = False``: the harness skips its
fresh-instance checks). No corruption, torn tails or quarantine exist here: ``compact``
always returns 0. Thread-safe: one re-entrant lock per session (:meth:`lock`) for
writers; readers take no lock and see immutable snapshots.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from .. import codec, ids
from ..core import DEFAULT_MAX_MESSAGE_BYTES
from ..errors import (
    DuplicateMessageError,
    InvalidMessageError,
    LockTimeoutError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
)
from ..history import TURN_SEARCH_LINES
from ..keys import validate_key
from ..metadata import _EPOCH, _check_number, _check_text, _from_ms, _from_ns, _texts
from ..types import (
    SESSION_STATES,
    ChatMessage,
    Durability,
    MessageLike,
    Page,
    SessionMetadata,
    SessionQuery,
    SessionState,
    TimestampedMessage,
    _wrap,
    as_message,
)


@dataclass(frozen=True)
class _Entry:
    """One session, immutable: writers publish a new entry, readers keep the one they got."""

    lines: tuple[bytes, ...]  # encoded records, each ending in "\n"
    meta: Mapping[str, Any]  # the sidecar's fields (never changed once published)
    activity_ns: int

    def records(self) -> list[dict[str, Any]]:
        return [codec.decode_record(line[:-1]) for line in self.lines]

    def messages(self) -> list[ChatMessage]:
        return [_wrap(r) for r in self.records()]


class MemorySessionStore:
    """An in-memory session store with the API and semantics of :class:`SessionStore`.

    ``MemorySessionStore(root=None, *, durability="fsync", lock_timeout=30.0,
    max_message_bytes=16 MiB, clock=None)``: ``root`` and ``durability`` are accepted
    (and ignored) so it drops in where a file store is built; ``clock`` returns
    milliseconds since the epoch (default: the wall clock)."""

    #: Nothing outlives the object: a new instance on the same ``root`` is empty.
    persistent = False

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        durability: Durability = "fsync",
        lock_timeout: float | None = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if durability not in ("fsync", "flush"):
            raise ValueError(f"durability must be 'fsync' or 'flush', not {durability!r}")
        if lock_timeout is not None and lock_timeout < 0:
            raise ValueError("lock_timeout must be >= 0 or None")
        if max_message_bytes <= 0:
            raise ValueError("max_message_bytes must be positive")
        self._root = None if root is None else os.fspath(root)
        self._durability: Durability = durability
        self._lock_timeout = lock_timeout
        self._max_message_bytes = max_message_bytes
        self._clock = clock or ids.now_ms
        self._sessions: dict[str, _Entry] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._root!r})"

    @property
    def durability(self) -> Durability:
        return self._durability

    # -- guard ------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold ``key``'s mutation guard for a block (re-entrant in a thread)."""
        validate_key(key)
        with self._mutex:
            rlock = self._locks.setdefault(key, threading.RLock())
        timeout = -1 if self._lock_timeout is None else self._lock_timeout
        if not rlock.acquire(timeout=timeout):
            raise LockTimeoutError(key=key, path=None, timeout=self._lock_timeout, holder_pid=None)
        try:
            yield
        finally:
            rlock.release()

    def _both(self, a: str, b: str) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        for key in sorted({a, b}):
            stack.enter_context(self.lock(key))
        return stack

    def _publish(self, key: str, lines: tuple[bytes, ...], meta: Mapping[str, Any]) -> None:
        self._sessions[key] = _Entry(lines, dict(meta), time.time_ns())

    def _new_meta(self, key: str, breadcrumb: bool | None = None) -> dict[str, Any]:
        now = self._clock()
        return {"format": 1, "key": key, "created_at": now, "updated_at": now, "trim_breadcrumb": breadcrumb}

    def _entry(self, key: str) -> _Entry | None:
        validate_key(key)
        return self._sessions.get(key)

    # -- ids and encoding -------------------------------------------------------------
    def _assign(self, key: str, messages: list[ChatMessage], previous: str | None,
                existing: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Records with ids strictly increasing after ``previous`` (caller ids kept) and
        created_at (now when missing). ``existing``: ids already in the session, to tell a
        duplicate from an id merely out of order."""
        now = self._clock()
        records: list[dict[str, Any]] = []
        prev = previous
        i = 0
        n = len(messages)

        def order_error(mid: str, prev_id: str) -> InvalidMessageError:
            if mid in existing or any(r["id"] == mid for r in records):
                return DuplicateMessageError(key=key, message_id=mid)
            return InvalidMessageError(key=key, message_id=mid, reason=f"id {mid!r} does not sort after the "
                                       f"previous id {prev_id!r} (ids in a session must strictly increase)")

        while i < n:
            m = messages[i]
            if m.id:
                if prev is not None and m.id <= prev:
                    raise order_error(m.id, prev)
                records.append(codec.record_of(m, m.id, now if m.created_at is None else m.created_at))
                prev = m.id
                i += 1
                continue
            j = i + 1
            while j < n and not messages[j].id:
                j += 1
            if j == n:
                fresh: list[str] = []
                for _ in range(i, j):
                    nxt = ids.next_id(prev, now)
                    if nxt is None:
                        raise InvalidMessageError(key=key, reason=f"no ULID sorts after the custom id {prev!r}; "
                                                  "give the message an id explicitly")
                    fresh.append(nxt)
                    prev = nxt
            else:
                if prev is not None and messages[j].id <= prev:
                    raise order_error(messages[j].id, prev)
                got = ids.ids_between(prev, messages[j].id, j - i, now)
                if got is None:
                    raise InvalidMessageError(key=key, reason=f"no id fits between {prev!r} and "
                                              f"{messages[j].id!r}; give the messages ids explicitly")
                fresh = got
            for m2, mid in zip(messages[i:j], fresh):
                records.append(codec.record_of(m2, mid, now if m2.created_at is None else m2.created_at))
            prev = fresh[-1]
            i = j
        return records

    def _encode(self, key: str, records: list[dict[str, Any]]) -> tuple[bytes, ...]:
        out = []
        for record in records:
            line = codec.encode_record(record, key)
            if len(line) > self._max_message_bytes:
                raise InvalidMessageError(key=key, message_id=record["id"], reason=f"message is {len(line)} bytes, "
                                          f"over max_message_bytes={self._max_message_bytes}")
            out.append(line)
        return tuple(out)

    @staticmethod
    def _last_id(entry: _Entry | None) -> str | None:
        if entry is None or not entry.lines:
            return None
        return codec.id_of_line(entry.lines[-1][:-1]) or None

    # -- reading ----------------------------------------------------------------------
    def load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` for a missing session."""
        entry = self._entry(key)
        return [] if entry is None else entry.messages()

    def try_load(self, key: str) -> list[ChatMessage]:
        """As :meth:`load` (nothing here can be corrupt)."""
        return self.load(key)

    def load_with_timestamps(self, key: str) -> list[TimestampedMessage]:
        out = []
        for m in self.load(key):
            ms = m.created_at
            out.append(TimestampedMessage(m, None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)))
        return out

    def session_exists(self, key: str) -> bool:
        return self._entry(key) is not None

    def list_sessions(self) -> list[str]:
        return sorted(self._sessions)

    # -- appending --------------------------------------------------------------------
    def append(self, key: str, message: MessageLike) -> str:
        """Append one message (creating the session if needed); its id."""
        return self.append_many(key, (message,))[0]

    append_message = append

    def append_many(self, key: str, messages: Iterable[MessageLike]) -> list[str]:
        """Append several messages, all or none; their ids."""
        validate_key(key)
        msgs = [as_message(m) for m in messages]
        if not msgs:
            return []
        with self.lock(key):
            entry = self._sessions.get(key)
            existing = set() if entry is None else {r["id"] for r in entry.records()}
            records = self._assign(key, msgs, self._last_id(entry), existing)
            lines = self._encode(key, records)
            if entry is None:
                self._publish(key, lines, self._new_meta(key))
            else:
                self._publish(key, entry.lines + lines, entry.meta)
            return [r["id"] for r in records]

    # -- changing the end -------------------------------------------------------------
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        validate_key(key)
        with self.lock(key):
            entry = self._sessions.get(key)
            if entry is None or not entry.lines:
                return False
            if expected_id is not None and self._last_id(entry) != expected_id:
                return False
            self._publish(key, entry.lines[:-1], entry.meta)
            return True

    def update_last(self, key: str, message: MessageLike, *, expected_id: str | None = None) -> bool:
        validate_key(key)
        m = as_message(message)
        with self.lock(key):
            entry = self._sessions.get(key)
            if entry is None or not entry.lines:
                return False
            records = entry.records()
            old = records[-1]
            old_id = old.get("id") or ""
            if expected_id is not None and old_id != expected_id:
                return False
            new_id = m.id or old_id
            if m.created_at is None and isinstance(old.get("created_at"), int):
                m = m.replace(created_at=old["created_at"])
            if new_id != old_id or not new_id:
                previous = (records[-2].get("id") or None) if len(records) > 1 else None
                new = self._assign(key, [m.replace(id=new_id)], previous, {r["id"] for r in records[:-1]})
            else:
                new = [codec.record_of(m, new_id, m.created_at if m.created_at is not None else self._clock())]
            line = self._encode(key, new)
            self._publish(key, entry.lines[:-1] + line, entry.meta)
            return True

    # -- replacing everything ---------------------------------------------------------
    def rewrite_messages(self, key: str, messages: Iterable[MessageLike]) -> None:
        validate_key(key)
        msgs = [as_message(m) for m in messages]
        with self.lock(key):
            lines = self._encode(key, self._assign(key, msgs, None))
            entry = self._sessions.get(key)
            self._publish(key, lines, self._new_meta(key) if entry is None else entry.meta)

    def replace_conversation_state(self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool) -> None:
        self._replace_state(key, messages, breadcrumb_present, if_exists=False)

    def replace_conversation_state_if_exists(
        self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool
    ) -> bool:
        return self._replace_state(key, messages, breadcrumb_present, if_exists=True)

    def _replace_state(self, key: str, messages: Iterable[MessageLike], breadcrumb: bool, *, if_exists: bool) -> bool:
        validate_key(key)
        msgs = [as_message(m) for m in messages]
        with self.lock(key):
            entry = self._sessions.get(key)
            if if_exists and entry is None:
                return False
            lines = self._encode(key, self._assign(key, msgs, None))
            if entry is None:
                self._publish(key, lines, self._new_meta(key, bool(breadcrumb)))
            else:
                self._publish(key, lines, {**entry.meta, "trim_breadcrumb": bool(breadcrumb),
                                           "updated_at": self._clock()})
            return True

    def set_session_trim_breadcrumb(self, key: str, present: bool) -> None:
        self._update(key, {"trim_breadcrumb": bool(present)})

    def get_session_trim_breadcrumb(self, key: str) -> bool | None:
        entry = self._entry(key)
        value = None if entry is None else entry.meta.get("trim_breadcrumb")
        return value if isinstance(value, bool) else None

    # -- clearing and deleting --------------------------------------------------------
    def clear_messages(self, key: str) -> int:
        validate_key(key)
        with self.lock(key):
            entry = self._sessions.get(key)
            if entry is None:
                return 0
            self._publish(key, (), entry.meta)
            return len(entry.lines)

    def delete_session(self, key: str) -> bool:
        validate_key(key)
        with self.lock(key):
            return self._sessions.pop(key, None) is not None

    # -- history ----------------------------------------------------------------------
    def get_message_count(self, key: str) -> int:
        entry = self._entry(key)
        if entry is None:
            raise SessionNotFoundError(key=key)
        return len(entry.lines)

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        entry = self._entry(key)
        if entry is None or not isinstance(message_id, str):
            return None
        return next((m for m in entry.messages() if m.id == message_id), None)

    def get_messages(self, key: str, *, limit: int | None = None, offset: int = 0) -> list[ChatMessage]:
        if limit is not None and (type(limit) is not int or limit < 0):
            raise ValueError(f"limit must be None or an int >= 0, not {limit!r}")
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset must be an int >= 0, not {offset!r}")
        entry = self._entry(key)
        if entry is None:
            raise SessionNotFoundError(key=key)
        lines = entry.lines[offset:] if limit is None else entry.lines[offset : offset + limit]
        return [_wrap(codec.decode_record(line[:-1])) for line in lines]

    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        validate_key(source)
        validate_key(target)
        with self._both(source, target):
            entry = self._sessions.get(source)
            if entry is None:
                raise SessionNotFoundError(key=source)
            if target in self._sessions:
                raise SessionExistsError(key=target)
            msg_ids = [r["id"] for r in entry.records()]
            if up_to_message_id is None:
                end = len(msg_ids)
                fork_point = msg_ids[-1] if msg_ids else None
            else:
                if up_to_message_id not in msg_ids:
                    raise MessageNotFoundError(key=source, message_id=up_to_message_id)
                end = msg_ids.index(up_to_message_id) + 1
                fork_point = up_to_message_id
            meta = self._new_meta(target, entry.meta.get("trim_breadcrumb"))
            meta["parent"] = source
            meta["fork_point"] = fork_point
            self._publish(target, entry.lines[:end], meta)
            return fork_point

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        validate_key(key)
        with self.lock(key):
            entry = self._sessions.get(key)
            if entry is None:
                raise SessionNotFoundError(key=key)
            msg_ids = [r["id"] for r in entry.records()]
            if up_to_message_id not in msg_ids:
                raise MessageNotFoundError(key=key, message_id=up_to_message_id)
            keep = msg_ids.index(up_to_message_id) + 1
            removed = len(msg_ids) - keep
            if removed:
                self._publish(key, entry.lines[:keep], entry.meta)
            return removed

    def page(
        self,
        key: str,
        *,
        limit: int = 100,
        before: str | None = None,
        after: str | None = None,
        ts_before: int | None = None,
        breakpoint: bool = False,
        whole_turns: bool = False,
    ) -> Page:
        """One page, oldest first (see :meth:`jsonl_sessions.SessionStore.page`)."""
        if type(limit) is not int or limit < 1:
            raise ValueError(f"limit must be a positive int, not {limit!r}")
        if before is not None and after is not None:
            raise ValueError("page takes at most one of before= and after=")
        if ts_before is not None and type(ts_before) is not int:
            raise ValueError(f"ts_before must be int milliseconds or None, not {ts_before!r}")
        entry = self._entry(key)
        if entry is None:
            raise SessionNotFoundError(key=key)
        msgs = entry.messages()
        position = {m.id: i for i, m in enumerate(msgs)}

        def ok(m: ChatMessage) -> bool:
            return ts_before is None or (m.created_at is not None and m.created_at < ts_before)

        def call_of(i: int) -> int | None:
            """The index of the tool call answered by message ``i``, if it is a tool result."""
            tool_call_id = msgs[i].extra.get("tool_call_id")
            if not isinstance(tool_call_id, str):
                return None
            for j in range(i - 1, max(-1, i - 1 - TURN_SEARCH_LINES), -1):
                calls = msgs[j].extra.get("tool_calls")
                if isinstance(calls, list) and any(isinstance(c, dict) and c.get("id") == tool_call_id
                                                   for c in calls):
                    return j
            return None

        if after is None:
            if before is None:
                end = len(msgs)
            elif before in position:
                end = position[before]
            else:
                raise MessageNotFoundError(key=key, message_id=before)
            picked: list[int] = []  # newest first
            i = end - 1
            while i >= 0 and len(picked) < limit:
                if ok(msgs[i]):
                    picked.append(i)
                    if breakpoint and msgs[i].kind == "compaction":
                        break
                i -= 1
            if not picked:
                return Page([], False, None, None)
            while whole_turns:
                call = call_of(picked[-1])
                if call is None:
                    break
                picked += [k for k in range(picked[-1] - 1, call, -1) if ok(msgs[k])] + [call]
            picked.reverse()
            older = any(ok(m) for m in msgs[: picked[0]])
            return Page([msgs[i] for i in picked], older, msgs[picked[0]].id if older else None,
                        msgs[picked[-1]].id if picked[-1] < len(msgs) - 1 else None)
        if after == "":
            start = 0
        elif after in position:
            start = position[after] + 1
        else:
            raise MessageNotFoundError(key=key, message_id=after)
        window: list[int] = []
        i = start
        while i < len(msgs) and len(window) < limit:
            if ok(msgs[i]):
                window.append(i)
            i += 1
        if not window:
            return Page([], False, None, None)
        if breakpoint:
            marks = [n for n, k in enumerate(window) if msgs[k].kind == "compaction"]
            if marks:
                window = window[marks[-1]:]
        if whole_turns:
            for k in range(window[-1] + 1, len(msgs)):
                if not ok(msgs[k]):
                    continue
                if call_of(k) is None:
                    break
                window.append(k)
        newer = any(ok(m) for m in msgs[window[-1] + 1 :])
        return Page([msgs[k] for k in window], newer, msgs[window[0]].id if window[0] > 0 else None,
                    msgs[window[-1]].id if newer else None)

    # -- metadata ---------------------------------------------------------------------
    def _metadata(self, key: str, entry: _Entry) -> SessionMetadata:
        meta = entry.meta
        state = meta.get("state") if meta.get("state") in SESSION_STATES else None
        crumb = meta.get("trim_breadcrumb")
        context = meta.get("context")
        return SessionMetadata(
            key=key,
            name=_text(meta, "name"),
            agent_alias=_text(meta, "agent_alias"),
            principal_id=_text(meta, "principal_id"),
            state=state,
            turn_id=_text(meta, "turn_id") if state is not None else None,
            created_at=_from_ms(meta.get("created_at")),
            updated_at=_from_ns(entry.activity_ns),
            message_count=len(entry.lines),
            size_bytes=sum(map(len, entry.lines)),
            trim_breadcrumb=crumb if isinstance(crumb, bool) else None,
            context=dict(context) if isinstance(context, dict) else {},
            parent=_text(meta, "parent"),
            fork_point=_text(meta, "fork_point"),
        )

    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        entry = self._entry(key)
        return None if entry is None else self._metadata(key, entry)

    def list_sessions_with_metadata(self) -> list[SessionMetadata]:
        return [self._metadata(key, entry) for key, entry in sorted(self._sessions.items())]

    def _update(self, key: str, changes: Mapping[str, Any] | Callable[[dict[str, Any]], None]) -> None:
        validate_key(key)
        with self.lock(key):
            entry = self._sessions.get(key)
            if entry is None:
                raise SessionNotFoundError(key=key)
            meta = dict(entry.meta)
            if callable(changes):
                changes(meta)
            else:
                meta.update(changes)
            meta["updated_at"] = self._clock()
            self._sessions[key] = replace(entry, meta=meta, activity_ns=time.time_ns())

    def _meta(self, key: str) -> Mapping[str, Any] | None:
        entry = self._entry(key)
        return None if entry is None else entry.meta

    def set_session_name(self, key: str, name: str) -> None:
        self._update(key, {"name": _check_text("name", name)})

    def get_session_name(self, key: str) -> str | None:
        return _text(self._meta(key), "name")

    def set_session_agent_alias(self, key: str, agent_alias: str) -> None:
        self._update(key, {"agent_alias": _check_text("agent_alias", agent_alias)})

    def get_session_agent_alias(self, key: str) -> str | None:
        return _text(self._meta(key), "agent_alias")

    def set_session_context(self, key: str, context: Mapping[str, str]) -> None:
        if not isinstance(context, Mapping):
            raise TypeError(f"context must be a mapping of str to str, not {type(context).__name__}")
        value = {_check_text("context key", k): _check_text(f"context[{k!r}]", v) for k, v in context.items()}
        self._update(key, {"context": value})

    def set_session_principal(self, key: str, principal_id: str) -> None:
        self._update(key, {"principal_id": _check_text("principal_id", principal_id, empty=False)})

    def delete_session_owned(self, key: str, owner_principal_id: str) -> bool:
        owner = _check_text("owner_principal_id", owner_principal_id)
        validate_key(key)
        with self.lock(key):
            entry = self._sessions.get(key)
            if not owner or entry is None or _text(entry.meta, "principal_id") != owner:
                return False
            return self.delete_session(key)

    def set_session_state(self, key: str, state: str, turn_id: str | None = None) -> None:
        if not isinstance(state, str) or state not in SESSION_STATES:
            raise ValueError(f"state must be one of {sorted(SESSION_STATES)}, not {state!r}")
        turn = None if turn_id is None else _check_text("turn_id", turn_id)
        if state == "idle":
            turn = None

        def change(meta: dict[str, Any]) -> None:
            same = meta.get("state") == state and meta.get("turn_id") == turn
            if not (same and type(meta.get("state_since")) is int):
                meta["state_since"] = self._clock()
            meta["state"] = state
            meta["turn_id"] = turn

        self._update(key, change)

    def get_session_state(self, key: str) -> SessionState | None:
        meta = self._meta(key)
        state = _text(meta, "state")
        if meta is None or state not in SESSION_STATES:
            return None
        since = meta.get("state_since")
        if type(since) is not int:
            updated = meta.get("updated_at")
            since = updated if type(updated) is int else 0
        return SessionState(str(state), _text(meta, "turn_id"), _EPOCH + timedelta(milliseconds=since))

    def list_running_sessions(self) -> list[SessionMetadata]:
        return [md for md in self.list_sessions_with_metadata() if md.state == "running"]

    def list_stuck_sessions(self, threshold_secs: float) -> list[SessionMetadata]:
        threshold_ms = _check_number("threshold_secs", threshold_secs) * 1000
        now = self._clock()
        out = []
        for key, entry in sorted(self._sessions.items()):
            since = entry.meta.get("state_since")
            if entry.meta.get("state") == "running" and type(since) is int and now - since > threshold_ms:
                out.append(self._metadata(key, entry))
        return out

    # -- attribution ------------------------------------------------------------------
    def count_agent_attribution(self, agent_alias: str) -> int:
        alias = _check_text("agent_alias", agent_alias)
        return sum(1 for entry in list(self._sessions.values()) if _text(entry.meta, "agent_alias") == alias)

    def rename_agent_attribution(self, old_alias: str, new_alias: str) -> int:
        old = _check_text("old_alias", old_alias)
        new = _check_text("new_alias", new_alias)
        if old == new:
            return self.count_agent_attribution(old)
        return self._reattribute(old, new)

    def clear_agent_attribution(self, agent_alias: str) -> int:
        return self._reattribute(_check_text("agent_alias", agent_alias), None)

    def _reattribute(self, old: str, new: str | None) -> int:
        changed = 0
        for key in self.list_sessions():
            with self.lock(key):
                entry = self._sessions.get(key)
                if entry is None or _text(entry.meta, "agent_alias") != old:
                    continue
                self._update(key, {"agent_alias": new})
                changed += 1
        return changed

    # -- lifecycle --------------------------------------------------------------------
    def cleanup_stale(self, ttl_hours: float) -> int:
        """Delete every session with no change within ``ttl_hours`` (wall clock), except
        ``running`` ones and those whose guard another thread holds; the number deleted."""
        cutoff = time.time_ns() - int(_check_number("ttl_hours", ttl_hours) * 3600e9)
        removed = 0
        for key in self.list_sessions():
            with self._mutex:
                rlock = self._locks.setdefault(key, threading.RLock())
            if not rlock.acquire(blocking=False):
                continue
            try:
                entry = self._sessions.get(key)
                if entry is not None and entry.meta.get("state") != "running" and entry.activity_ns < cutoff:
                    del self._sessions[key]
                    removed += 1
            finally:
                rlock.release()
        return removed

    def search(self, query: SessionQuery) -> list[SessionMetadata]:
        """Sessions whose name or message text contains the keyword (casefolded), newest
        activity first (ties: key order), at most ``query.limit``."""
        if not isinstance(query, SessionQuery):
            raise TypeError(f"query must be a SessionQuery, not {type(query).__name__}")
        needle = _check_text("keyword", query.keyword).casefold()
        limit = query.limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be None or an int >= 0, not {limit!r}")
        alias = None if query.agent_alias is None else _check_text("agent_alias", query.agent_alias)
        found = sorted(self._sessions.items(), key=lambda item: (-item[1].activity_ns, item[0]))
        out: list[SessionMetadata] = []
        for key, entry in found:
            if limit is not None and len(out) >= limit:
                break
            if alias is not None and _text(entry.meta, "agent_alias") != alias:
                continue
            name = _text(entry.meta, "name")
            if (not needle or (name is not None and needle in name.casefold())
                    or any(needle in text.casefold() for m in entry.messages() for text in _texts(m.content))):
                out.append(self._metadata(key, entry))
        return out

    def compact(self, key: str, *, repair: bool = False) -> int:
        """Nothing to drop in memory: 0. :class:`SessionNotFoundError` for a missing session."""
        if self._entry(key) is None:
            raise SessionNotFoundError(key=key)
        return 0


def _text(meta: Mapping[str, Any] | None, name: str) -> str | None:
    value = None if meta is None else meta.get(name)
    return value if type(value) is str else None


__all__ = ["MemorySessionStore"]
