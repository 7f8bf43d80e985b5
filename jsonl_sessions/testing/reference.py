"""The reference model of a session store: what every method returns and changes, as
plain Python over a dict of lists.

One model, three users: the state machine (:mod:`~jsonl_sessions.testing.machine`)
checks a store against it, :class:`~jsonl_sessions.testing.MemorySessionStore` is a
store built on it, and tests compare a store's answers with it (:func:`page`). Page
semantics, fork, truncate, run state, attribution and search semantics exist here once.

The model keeps **decided values**: a write is given messages that already carry their
id and ``created_at`` and, for a new session, its creation time. A store chooses those
(by the rules of :func:`jsonl_sessions.ids.assign_ids`); the state machine learns
them from the store under test, MemorySessionStore from its own clock. The model checks no keys and no
message encoding (that is each store's job, pinned by the contract mixin); it raises the
errors that depend on state: :class:`SessionNotFoundError`, :class:`SessionExistsError`,
:class:`MessageNotFoundError`, and ``ValueError`` for arguments no store accepts.

Every operation costs O(n) in the session's messages: a model, not a store. Not
thread-safe: a caller sharing one between threads holds a lock around every call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ..arguments import check_page_arguments, check_window
from ..errors import (
    InvalidArgumentError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
)
from ..pagination import TURN_SEARCH_LINES
from ..types import ChatMessage, Page, SessionMetadata, SessionState

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The run states a session can be set to.
STATES = ("idle", "running", "error")


def to_datetime(ms: int) -> datetime:
    """Milliseconds since the epoch as an aware UTC datetime."""
    return EPOCH + timedelta(milliseconds=ms)


# -- page -------------------------------------------------------------------------------
def _tool_call_id(m: ChatMessage) -> str | None:
    value = m.extra.get("tool_call_id")
    return value if isinstance(value, str) else None


def _call_index(msgs: list[ChatMessage], i: int, tool_call_id: str) -> int | None:
    """The index of the message among the ``TURN_SEARCH_LINES`` before ``i`` that made
    the tool call ``tool_call_id``."""
    for j in range(i - 1, max(-1, i - 1 - TURN_SEARCH_LINES), -1):
        calls = msgs[j].extra.get("tool_calls")
        if isinstance(calls, list) and any(isinstance(c, dict) and c.get("id") == tool_call_id for c in calls):
            return j
    return None


def page(msgs: list[ChatMessage], *, limit: int = 100, before: str | None = None, after: str | None = None,
         ts_before: int | None = None, breakpoint: bool = False, whole_turns: bool = False) -> Page:
    """What ``page()`` returns for a session holding ``msgs`` (oldest first).

    Newest first without ``after``: the ``limit`` newest messages older than ``before``
    (created before ``ts_before``), cut back to the newest compaction marker
    (``breakpoint``), extended back to the tool call of a leading tool result
    (``whole_turns``). With ``after`` (``""``: from the start): the ``limit`` oldest after
    it, likewise cut, extended forward over the tool results that follow.

    :raises MessageNotFoundError: a cursor that is not an id of ``msgs``.
    :raises ValueError: see :func:`jsonl_sessions.arguments.check_page_arguments`.
    """
    check_page_arguments(limit, before, after, ts_before)
    ids_ = [m.id for m in msgs]
    # after="" means "from the first"; before="" names no message, as any id not stored
    for cursor in (before, after or None):
        if cursor is not None and (not cursor or cursor not in ids_):
            raise MessageNotFoundError(message_id=cursor)

    def ok(i: int) -> bool:
        created = msgs[i].created_at
        return ts_before is None or (created is not None and created < ts_before)

    n = len(msgs)
    window = _older_window(msgs, ok, limit, before, breakpoint, whole_turns) if after is None else \
        _newer_window(msgs, ok, limit, after, breakpoint, whole_turns)
    if not window:
        return Page([], False, None, None)
    if after is None:
        has_more = any(ok(i) for i in range(window[0]))
        return Page([msgs[i] for i in window], has_more, ids_[window[0]] if has_more else None,
                    ids_[window[-1]] if window[-1] < n - 1 else None)
    has_more = any(ok(i) for i in range(window[-1] + 1, n))
    return Page([msgs[i] for i in window], has_more, ids_[window[0]] if window[0] > 0 else None,
                ids_[window[-1]] if has_more else None)


def _cut_at_marker(msgs: list[ChatMessage], window: list[int]) -> list[int]:
    marks = [i for i in window if msgs[i].kind == "compaction"]
    return [i for i in window if i >= marks[-1]] if marks else window


def _older_window(msgs: list[ChatMessage], ok: Callable[[int], bool], limit: int, before: str | None,
                  breakpoint: bool, whole_turns: bool) -> list[int]:
    end = len(msgs) if before is None else [m.id for m in msgs].index(before)
    window = [i for i in range(end) if ok(i)][-limit:]
    if breakpoint:
        window = _cut_at_marker(msgs, window)
    while whole_turns and window:
        tool_call_id = _tool_call_id(msgs[window[0]])
        call = None if tool_call_id is None else _call_index(msgs, window[0], tool_call_id)
        if call is None:
            break
        window = [call] + [k for k in range(call + 1, window[0]) if ok(k)] + window
    return window


def _newer_window(msgs: list[ChatMessage], ok: Callable[[int], bool], limit: int, after: str,
                  breakpoint: bool, whole_turns: bool) -> list[int]:
    start = 0 if after == "" else [m.id for m in msgs].index(after) + 1
    candidates = [i for i in range(start, len(msgs)) if ok(i)]
    window = candidates[:limit]
    if window and breakpoint:
        window = _cut_at_marker(msgs, window)
    if window and whole_turns:
        for i in candidates:
            if i <= window[-1]:
                continue
            tool_call_id = _tool_call_id(msgs[i])
            if tool_call_id is None or _call_index(msgs, i, tool_call_id) is None:
                break
            window.append(i)
    return window


# -- search -----------------------------------------------------------------------------
def texts_of(content: Any) -> list[str]:
    """The text ``search`` looks at in a message's content: a string, the strings and
    ``{"text": ...}`` parts of a list, or a ``{"text": ...}`` object."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p if isinstance(p, str) else p["text"] for p in content
                if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str))]
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return [content["text"]]
    return []


# -- one session ------------------------------------------------------------------------
@dataclass
class SessionModel:
    """Everything a store keeps about one session. ``activity`` (ns, wall clock) is the
    time of its last change (what ``search`` orders by and ``cleanup_stale`` ages)."""

    created_at: int
    messages: list[ChatMessage] = field(default_factory=list)
    breadcrumb: bool | None = None
    name: str | None = None
    alias: str | None = None
    owner: str | None = None
    state: str | None = None
    turn: str | None = None
    since: int | None = None
    context: dict[str, str] = field(default_factory=dict)
    parent: str | None = None
    fork_point: str | None = None
    activity: int = 0

    def metadata(self, key: str, *, updated_at: datetime | None = None, size_bytes: int = 0) -> SessionMetadata:
        """The session's metadata; ``updated_at`` and ``size_bytes`` are the store's own."""
        return SessionMetadata(
            key=key, name=self.name, agent_alias=self.alias, principal_id=self.owner, state=self.state,
            turn_id=self.turn if self.state is not None else None, created_at=to_datetime(self.created_at),
            updated_at=updated_at, message_count=len(self.messages), size_bytes=size_bytes,
            trim_breadcrumb=self.breadcrumb, context=dict(self.context), parent=self.parent,
            fork_point=self.fork_point,
        )

    def run_state(self) -> SessionState | None:
        if self.state is None:
            return None
        return SessionState(self.state, self.turn, to_datetime(self.since or 0))

    @property
    def last_id(self) -> str | None:
        return self.messages[-1].id if self.messages else None

    def position(self, key: str, message_id: str) -> int:
        """The index of ``message_id``; :class:`MessageNotFoundError` if it is not here."""
        for i, m in enumerate(self.messages):
            if m.id == message_id:
                return i
        raise MessageNotFoundError(key=key, message_id=message_id)

    def matches(self, needle: str) -> bool:
        """Whether a search for ``needle`` (casefolded; "" matches all) finds this session."""
        return (not needle or (self.name is not None and needle in self.name.casefold())
                or any(needle in t.casefold() for m in self.messages for t in texts_of(m.content)))


# -- the store --------------------------------------------------------------------------
class ReferenceStore:
    """The model of a whole store: ``sessions`` maps each existing key to its
    :class:`SessionModel`. Method names follow the store's API; writes take the decided
    values (see the module docstring). ``wall()`` (ns) stamps ``activity``."""

    def __init__(self, wall: Callable[[], int] = time.time_ns) -> None:
        self.sessions: dict[str, SessionModel] = {}
        self.wall = wall

    def __contains__(self, key: object) -> bool:
        return key in self.sessions

    def session(self, key: str) -> SessionModel:
        """The session; :class:`SessionNotFoundError` if it does not exist."""
        s = self.sessions.get(key)
        if s is None:
            raise SessionNotFoundError(key=key)
        return s

    def _touch(self, s: SessionModel) -> SessionModel:
        s.activity = self.wall()
        return s

    def _create(self, key: str, created_at: int, breadcrumb: bool | None = None) -> SessionModel:
        s = self.sessions[key] = SessionModel(created_at=created_at, breadcrumb=breadcrumb)
        return self._touch(s)

    # -- reads ----------------------------------------------------------------------------
    def list_sessions(self) -> list[str]:
        return sorted(self.sessions)

    def load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` for a missing session."""
        s = self.sessions.get(key)
        return [] if s is None else list(s.messages)

    def get_message_count(self, key: str) -> int:
        return len(self.session(key).messages)

    def get_message(self, key: str, message_id: object) -> ChatMessage | None:
        s = self.sessions.get(key)
        return None if s is None else next((m for m in s.messages if m.id == message_id), None)

    def get_messages(self, key: str, *, limit: int | None = None, offset: int = 0) -> list[ChatMessage]:
        check_window(limit, offset)
        msgs = self.session(key).messages
        return msgs[offset:] if limit is None else msgs[offset : offset + limit]

    def page(self, key: str, **options: Any) -> Page:
        """See :func:`page`; :class:`SessionNotFoundError` for a missing session."""
        check_page_arguments(options.get("limit", 100), options.get("before"), options.get("after"),
                             options.get("ts_before"))
        try:
            return page(self.session(key).messages, **options)
        except MessageNotFoundError as exc:
            raise MessageNotFoundError(key=key, message_id=exc.message_id) from None

    # -- transcript writes ------------------------------------------------------------------
    def append(self, key: str, messages: list[ChatMessage], created_at: int) -> None:
        """Add stamped messages at the end (a new session is created at ``created_at``;
        an empty batch creates nothing)."""
        if not messages:
            return
        s = self.sessions.get(key) or self._create(key, created_at)
        s.messages += messages
        self._touch(s)

    def can_change_last(self, key: str, expected_id: str | None) -> bool:
        """Whether ``remove_last`` / ``update_last`` act: the session has a last message,
        and it is ``expected_id`` when one is given."""
        s = self.sessions.get(key)
        return s is not None and bool(s.messages) and (expected_id is None or s.messages[-1].id == expected_id)

    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        if not self.can_change_last(key, expected_id):
            return False
        self._touch(self.sessions[key]).messages.pop()
        return True

    def update_last(self, key: str, message: ChatMessage, *, expected_id: str | None = None) -> bool:
        """Replace the last message with stamped ``message``."""
        if not self.can_change_last(key, expected_id):
            return False
        self._touch(self.sessions[key]).messages[-1] = message
        return True

    def rewrite_messages(self, key: str, messages: list[ChatMessage], created_at: int) -> None:
        s = self.sessions.get(key) or self._create(key, created_at)
        self._touch(s).messages = list(messages)

    def replace_conversation_state(self, key: str, messages: list[ChatMessage], breadcrumb: bool, created_at: int,
                                   *, if_exists: bool = False) -> bool:
        s = self.sessions.get(key)
        if s is None:
            if if_exists:
                return False
            s = self._create(key, created_at)
        s.messages = list(messages)
        s.breadcrumb = bool(breadcrumb)
        self._touch(s)
        return True

    def clear_messages(self, key: str) -> int:
        s = self.sessions.get(key)
        if s is None:
            return 0
        removed = len(s.messages)
        self._touch(s).messages = []
        return removed

    def delete_session(self, key: str) -> bool:
        return self.sessions.pop(key, None) is not None

    def copy_messages(self, source: str, target: str, created_at: int, *,
                      up_to_message_id: str | None = None) -> str | None:
        """Fork ``source`` (up to and including ``up_to_message_id``) into a new session
        ``target`` that records its parent and fork point; the fork point.

        :raises SessionNotFoundError: no ``source``.
        :raises SessionExistsError: ``target`` exists (``source`` itself included).
        :raises MessageNotFoundError: ``up_to_message_id`` is not in ``source``."""
        src = self.session(source)
        if target in self.sessions:
            raise SessionExistsError(key=target)
        end = len(src.messages) if up_to_message_id is None else src.position(source, up_to_message_id) + 1
        fork_point = src.messages[end - 1].id if end else None
        fork = self._create(target, created_at, src.breadcrumb)
        fork.messages = src.messages[:end]
        fork.parent, fork.fork_point = source, fork_point
        return fork_point

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        """Drop every message after ``up_to_message_id``; how many were dropped."""
        s = self.session(key)
        keep = s.position(key, up_to_message_id) + 1
        removed = len(s.messages) - keep
        if removed:
            del self._touch(s).messages[keep:]
        return removed

    def compact(self, key: str) -> int:
        """A clean transcript has nothing to drop: 0."""
        self.session(key)
        return 0

    # -- metadata ---------------------------------------------------------------------------
    def set_fields(self, key: str, **changes: Any) -> None:
        """Set metadata fields (``name``, ``alias``, ``owner``, ``context``, ``breadcrumb``)."""
        s = self.session(key)
        for name, value in changes.items():
            if not hasattr(s, name) or name in ("messages", "state", "turn", "since", "activity"):
                raise AttributeError(f"not a settable field: {name!r}")
            setattr(s, name, dict(value) if isinstance(value, Mapping) else value)
        self._touch(s)

    def set_session_state(self, key: str, state: str, turn_id: str | None, now: int) -> None:
        """Set the run state; ``idle`` drops the turn. ``since`` becomes ``now`` when the
        (state, turn) pair changes or was never set."""
        if state not in STATES:
            raise InvalidArgumentError(argument="state", reason=f"state must be one of {sorted(STATES)}, not {state!r}")
        s = self.session(key)
        turn = None if state == "idle" else turn_id
        if (s.state, s.turn) != (state, turn) or s.since is None:
            s.since = now
        s.state, s.turn = state, turn
        self._touch(s)

    def get_session_state(self, key: str) -> SessionState | None:
        s = self.sessions.get(key)
        return None if s is None else s.run_state()

    def delete_session_owned(self, key: str, owner: str) -> bool:
        """Delete only when ``owner`` is non-empty and the recorded owner."""
        s = self.sessions.get(key)
        if s is None or not owner or s.owner != owner:
            return False
        return self.delete_session(key)

    def list_running_sessions(self) -> list[str]:
        return sorted(k for k, s in self.sessions.items() if s.state == "running")

    def list_stuck_sessions(self, threshold_secs: float, now: int) -> list[str]:
        """Running sessions whose state is older than ``threshold_secs`` at ``now`` (ms)."""
        return sorted(k for k, s in self.sessions.items()
                      if s.state == "running" and s.since is not None and now - s.since > threshold_secs * 1000)

    # -- attribution, cleanup, search ---------------------------------------------------------
    def count_agent_attribution(self, alias: str) -> int:
        return sum(1 for s in self.sessions.values() if s.alias == alias)

    def rename_agent_attribution(self, old: str, new: str | None, *, keys: Iterable[str] | None = None) -> int:
        """Move every session attributed to ``old`` (among ``keys``, default all) to
        ``new`` (None: clear); how many. Renaming to the same alias changes nothing."""
        chosen = self.sessions if keys is None else {k: self.sessions[k] for k in keys if k in self.sessions}
        matching = [s for s in chosen.values() if s.alias == old]
        if old != new:
            for s in matching:
                s.alias = new
                self._touch(s)
        return len(matching)

    def cleanup_stale(self, cutoff: int, spare: Callable[[str], bool] = lambda key: False) -> list[str]:
        """Delete every session not running whose activity is older than ``cutoff`` (ns)
        and that ``spare`` does not keep; the keys deleted, sorted."""
        doomed = sorted(k for k, s in self.sessions.items()
                        if s.state != "running" and s.activity < cutoff and not spare(k))
        for k in doomed:
            del self.sessions[k]
        return doomed

    def search(self, keyword: str, *, agent_alias: str | None = None, limit: int | None = None) -> list[str]:
        """Keys of the sessions whose name or message text contains ``keyword`` (ignoring
        case), attributed to ``agent_alias`` when given; newest activity first (ties in
        key order), at most ``limit``."""
        needle = keyword.casefold()
        found = [k for k, s in self.sessions.items()
                 if (agent_alias is None or s.alias == agent_alias) and s.matches(needle)]
        found.sort(key=lambda k: (-self.sessions[k].activity, k))
        return found if limit is None else found[:limit]


__all__ = ["EPOCH", "STATES", "ReferenceStore", "SessionModel", "check_page_arguments", "page",
           "texts_of", "to_datetime"]
