"""MemorySessionStore: the whole session-store API in memory, as a test double.

Same semantics as :class:`jsonl_sessions.SessionStore` (and it passes the same harness:
the state machine, the contract mixin), minus the files:

- ids are ULIDs assigned by the same rules (strictly increasing per session, monotonic
  within one millisecond and after the clock steps back; a caller's id kept when the
  store takes it (a canonical ULID at most 24 h ahead), a duplicate refused with
  :class:`DuplicateMessageError`, an out-of-order or foreign one with
  :class:`InvalidMessageError`); ``created_at`` is kept when given, else the clock's now;
- messages are stored as their encoded JSON lines and decoded on every read, so what a
  caller gets back is exactly what the JSONL store would return (a tuple comes back as
  a list, a non-JSON value or NaN is refused with :class:`SerializationError`, nothing
  stored; an encoded message over ``max_message_bytes`` with :class:`InvalidMessageError`);
- every error of the file store for the same call (invalid keys, missing sessions,
  unknown ids, invalid metadata values, pages' cursors...);
- ``updated_at`` / activity is the wall-clock time of the last change (the file store
  uses file modification times); ``size_bytes`` is the length of the lines.

Every change and every read of messages comes from the reference model
(:class:`~jsonl_sessions.testing.reference.ReferenceStore`); this class adds what a real
store adds on top of it: id assignment, encoding, the guard. Argument and key checks,
the metadata getters and the listings by run state and attribution are
:class:`~jsonl_sessions.base.BaseStore`'s, over a view of each session's metadata as
sidecar fields, so the harness checks that shared code against the model too.

Nothing survives the object (``persistent = False``: the harness skips its
fresh-instance checks). No corruption, torn tails or quarantine exist here: ``compact``
always returns 0. Thread-safe: one re-entrant guard per session (:meth:`lock`) for
writers, and one short internal lock around every look at or change of the model (reads
never wait for a session's guard).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .. import codec
from ..base import DEFAULT_MAX_MESSAGE_BYTES, BaseStore, Keep
from ..compaction import CompactionReport, plan_lines
from ..errors import LockTimeoutError
from ..finding import Collector, MessageSearch
from ..ids import assign_ids, newest_ulid, replacement_record
from ..keys import validate_key
from ..protocol import SessionBackend
from ..types import (
    ChatMessage,
    Durability,
    Page,
    SessionMetadata,
)
from ..verification import VerifyReport, missing_session, wanted_keys
from .reference import EPOCH, ReferenceStore, SessionModel


class MemorySessionStore(BaseStore):
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
        self._options(durability, lock_timeout, max_message_bytes, clock)
        self._root = None if root is None else os.fspath(root)
        self._ref = ReferenceStore()
        self._model = threading.RLock()  # held around every use of self._ref
        self._locks: dict[str, threading.RLock] = {}
        self._locks_mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._root!r})"

    def close(self) -> None:
        pass  # nothing is held open: the data stays until the object goes

    # -- guard ------------------------------------------------------------------------
    def _guard(self, key: str) -> threading.RLock:
        with self._locks_mutex:
            return self._locks.setdefault(key, threading.RLock())

    def lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        validate_key(key)  # a bad key raises here, not at `with`, as on every backend
        return self._held(key)

    @contextlib.contextmanager
    def _held(self, key: str) -> Iterator[None]:
        guard = self._guard(key)
        if not guard.acquire(timeout=-1 if self._lock_timeout is None else self._lock_timeout):
            raise LockTimeoutError(key=key, path=None, timeout=self._lock_timeout, holder_pid=None)
        try:
            yield
        finally:
            guard.release()

    def _change(self, *keys: str) -> contextlib.ExitStack:
        """The guards of ``keys`` (in sorted order), then the model's lock."""
        stack = contextlib.ExitStack()
        for key in sorted(set(keys)):
            stack.enter_context(self.lock(key))
        stack.enter_context(self._model)
        return stack

    @contextlib.contextmanager
    def _read(self, key: str) -> Iterator[SessionModel | None]:
        validate_key(key)
        with self._model:
            yield self._ref.sessions.get(key)

    # -- ids and encoding -------------------------------------------------------------
    def _stored(self, key: str, messages: list[ChatMessage], previous: str | None,
                existing: Iterable[str] = ()) -> list[ChatMessage]:
        """``messages`` with ids and times given by the store's rules
        (:func:`jsonl_sessions.ids.assign_ids`), as a JSONL store would read them back.
        :class:`SerializationError` for content JSON cannot hold,
        :class:`InvalidMessageError` for a line over ``max_message_bytes``."""
        records = assign_ids(key, messages, previous, self._clock(), frozenset(existing).__contains__)
        return [_decoded(line) for line in codec.encode_records(records, key, self._max_message_bytes)]

    # -- reading ----------------------------------------------------------------------
    def _load(self, key: str, *, strict: bool) -> list[ChatMessage]:
        with self._read(key):  # nothing here can be corrupt: strict or not, the same
            return _fresh(self._ref.load(key))

    def session_exists(self, key: str) -> bool:
        with self._read(key) as s:
            return s is not None

    def list_sessions(self) -> list[str]:
        with self._model:
            return self._ref.list_sessions()

    # -- appending --------------------------------------------------------------------
    def _append_many(self, key: str, msgs: list[ChatMessage]) -> list[str]:
        with self._change(key):
            s = self._ref.sessions.get(key)
            existing = [] if s is None else [m.id for m in s.messages]
            stored = self._stored(key, msgs, newest_ulid(reversed(existing)), existing)
            self._ref.append(key, stored, self._clock())
            return [m.id for m in stored]

    # -- changing the end -------------------------------------------------------------
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        validate_key(key)
        with self._change(key):
            return self._ref.remove_last(key, expected_id=expected_id)

    def _update_last(self, key: str, m: ChatMessage, expected_id: str | None) -> bool:
        with self._change(key):
            if not self._ref.can_change_last(key, expected_id):
                return False
            msgs = self._ref.sessions[key].messages
            earlier = msgs[:-1]
            record = replacement_record(key, m, msgs[-1].to_dict(), self._clock,
                                        lambda: newest_ulid(x.id for x in reversed(earlier)),
                                        frozenset(x.id for x in earlier).__contains__)
            lines = codec.encode_records([record], key, self._max_message_bytes)
            return self._ref.update_last(key, _decoded(lines[0]))

    # -- replacing everything ---------------------------------------------------------
    def _rewrite(self, key: str, msgs: list[ChatMessage]) -> None:
        with self._change(key):
            self._ref.rewrite_messages(key, self._stored(key, msgs, None), self._clock())

    def _replace_state(self, key: str, msgs: list[ChatMessage], breadcrumb: bool, *, if_exists: bool) -> bool:
        with self._change(key):
            if if_exists and key not in self._ref:
                return False
            stored = self._stored(key, msgs, None)
            return self._ref.replace_conversation_state(key, stored, bool(breadcrumb), self._clock(),
                                                        if_exists=if_exists)

    # -- clearing and deleting --------------------------------------------------------
    def clear_messages(self, key: str) -> int:
        validate_key(key)
        with self._change(key):
            return self._ref.clear_messages(key)

    def delete_session(self, key: str) -> bool:
        validate_key(key)
        with self._change(key):
            return self._ref.delete_session(key)

    def _delete_session_owned(self, key: str, owner: str) -> bool:
        with self._change(key):
            return self._ref.delete_session_owned(key, owner)

    # -- history ----------------------------------------------------------------------
    def get_message_count(self, key: str) -> int:
        with self._read(key):
            return self._ref.get_message_count(key)

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        with self._read(key):
            found = self._ref.get_message(key, message_id)
        return None if found is None else _fresh([found])[0]

    def _get_messages(self, key: str, limit: int | None, offset: int) -> list[ChatMessage]:
        with self._read(key):
            return _fresh(self._ref.get_messages(key, limit=limit, offset=offset))

    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        validate_key(source)
        validate_key(target)
        with self._change(source, target):
            return self._ref.copy_messages(source, target, self._clock(), up_to_message_id=up_to_message_id)

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        validate_key(key)
        with self._change(key):
            return self._ref.truncate_messages(key, up_to_message_id)

    def _page(self, key: str, limit: int, before: str | None, after: str | None, ts_before: int | None,
              breakpoint: bool, whole_turns: bool) -> Page:
        with self._read(key):
            got = self._ref.page(key, limit=limit, before=before, after=after, ts_before=ts_before,
                                 breakpoint=breakpoint, whole_turns=whole_turns)
        return Page(_fresh(got.messages), got.has_more, got.before, got.after)

    # -- metadata ---------------------------------------------------------------------
    def _metadata(self, key: str, s: SessionModel) -> SessionMetadata:
        size = sum(len(codec.encode_record(codec.record_of(m, m.id, m.created_at or 0))) for m in s.messages)
        return s.metadata(key, updated_at=EPOCH + timedelta(microseconds=s.activity // 1000), size_bytes=size)

    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        with self._read(key) as s:
            return None if s is None else self._metadata(key, s)

    def _meta_of(self, key: str) -> dict[str, Any] | None:
        with self._read(key) as s:
            return None if s is None else _fields(s)

    def _set_field(self, key: str, name: str, value: object) -> None:
        with self._change(key):
            self._ref.set_fields(key, **{_MODEL_FIELDS[name]: value})

    def _set_state(self, key: str, state: str, turn: str | None) -> None:
        with self._change(key):
            self._ref.set_session_state(key, state, turn, self._clock())

    def _where(self, keep: Keep) -> list[SessionMetadata]:
        with self._model:
            return [self._metadata(k, self._ref.sessions[k]) for k in self._ref.list_sessions()
                    if keep(_fields(self._ref.sessions[k]))]

    def _count_where(self, keep: Keep) -> int:
        with self._model:
            return sum(1 for s in self._ref.sessions.values() if keep(_fields(s)))

    def _reattribute(self, old: str, new: str | None) -> int:
        """Each session under its own guard in turn, as the file store does."""
        changed = 0
        for key in self.list_sessions():
            with self._change(key):
                changed += self._ref.rename_agent_attribution(old, new, keys=[key])
        return changed

    # -- lifecycle --------------------------------------------------------------------
    def _cleanup_stale(self, ttl_hours: float) -> int:
        """Spares the sessions whose guard another thread holds (busy, so not stale)."""
        cutoff = time.time_ns() - int(ttl_hours * 3600e9)
        with contextlib.ExitStack() as stack:
            busy = set()
            for key in self.list_sessions():
                guard = self._guard(key)
                if guard.acquire(blocking=False):
                    stack.callback(guard.release)
                else:
                    busy.add(key)
            with self._model:
                return len(self._ref.cleanup_stale(cutoff, spare=busy.__contains__))

    def _search(self, needle: str, limit: int | None, alias: str | None) -> list[SessionMetadata]:
        with self._model:
            return [self._metadata(k, self._ref.sessions[k])
                    for k in self._ref.search(needle, agent_alias=alias, limit=limit)]

    def _find_messages(self, search: MessageSearch, collector: Collector) -> None:
        with self._model:
            chosen = [(key, list(s.messages)) for key, s in self._ref.sessions.items()
                      if search.wants_session(key, _fields(s))]
        for key, messages in chosen:
            for position, m in enumerate(messages):
                collector.offer(key, position, codec.encode_record(codec.record_of(m, m.id, m.created_at or 0))[:-1])

    def _compaction_report(self, key: str, repair: bool) -> CompactionReport:
        """Nothing to drop in memory: the plan of the stored lines, which keeps them all."""
        with self._read(key):
            self._ref.compact(key)  # SessionNotFoundError for a missing session
            lines = [codec.encode_record(codec.record_of(m, m.id, m.created_at or 0))
                     for m in self._ref.sessions[key].messages]
        return CompactionReport(key, plan_lines(lines), None, False)

    def verify(self, keys: Iterable[str] | None = None, *, fix: bool = False) -> VerifyReport:
        # Nothing stored here can be damaged: the only finding is a key asked for that does not exist.
        wanted = wanted_keys(keys)
        with self._model:
            report = VerifyReport(self._root or ":memory:", "memory")
            for key in sorted(self._ref.sessions) if wanted is None else wanted:
                s = self._ref.sessions.get(key)
                if s is None:
                    report.findings.append(missing_session(key))
                    continue
                report.sessions += 1
                report.messages += len(s.messages)
                report.bytes += self._metadata(key, s).size_bytes
        return report


#: The reference model's name of each metadata field a setter changes.
_MODEL_FIELDS = {"name": "name", "agent_alias": "alias", "principal_id": "owner", "context": "context",
                 "trim_breadcrumb": "breadcrumb"}


def _fields(s: SessionModel) -> dict[str, Any]:
    """The session's metadata as the fields of a sidecar (what :class:`BaseStore` reads)."""
    return {"name": s.name, "agent_alias": s.alias, "principal_id": s.owner, "context": dict(s.context),
            "trim_breadcrumb": s.breadcrumb, "state": s.state, "turn_id": s.turn, "state_since": s.since}


def _decoded(line: bytes) -> ChatMessage:
    return codec.decode_message(line[:-1])


def _fresh(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Copies a caller may change without changing the store (as a file store's reads)."""
    return [_decoded(codec.encode_record(codec.record_of(m, m.id, m.created_at or 0))) for m in messages]


if TYPE_CHECKING:  # the type checker proves that the class satisfies the backend contract
    _CONFORMS: SessionBackend = MemorySessionStore()

__all__ = ["MemorySessionStore"]
