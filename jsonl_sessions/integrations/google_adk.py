"""``JsonlSessionService``: a durable, multi-process Google ADK session service.

::

    from google.adk.runners import Runner
    from jsonl_sessions.integrations.google_adk import JsonlSessionService

    service = JsonlSessionService("sessions")          # a store directory (or any session backend)
    runner = Runner(agent=agent, app_name="app", session_service=service)

It implements ``google.adk.sessions.BaseSessionService`` (``create_session``,
``get_session`` with ``GetSessionConfig``, ``list_sessions``, ``delete_session``,
``append_event``, ``get_user_state``) with the semantics of ADK's own
``InMemorySessionService``: ``app:`` state is shared by every session of the app,
``user:`` state by every session of the user, other keys belong to the session, ``temp:``
keys are applied to the caller's session object and never stored; partial events are
returned unstored; an event equal to one already stored (same id and fields: a retried
call) is not stored twice; session ids are stripped of surrounding blanks.

Storage (key layout and line formats in ``docs/integrations.md``): each ADK session is a
store session, one line per event, holding the whole event as JSON, so
``get_session`` returns events equal to those appended; app and user state are their
own store sessions of delta lines.

Atomic and durable: ``append_event`` and ``create_session`` write the session's line
first, in one append (all or nothing, also after SIGKILL; on stable storage when the call
returns with ``durability="fsync"``). When the event or initial state changes ``app:`` or
``user:`` keys, those changes go to the shared state sessions next, and an ``applied``
line closes the step; a crash between leaves the line marked unapplied, and the next
``get_session`` or ``append_event`` of that session completes it (each shared change is
tagged with its source line, so it is never applied twice).

Cost: ``append_event`` O(event) plus a read of the session's newest lines;
``get_session`` O(session + shared state); ``list_sessions`` O(every listed session).

Needs ``google-adk``: ``pip install 'jsonl-sessions[google-adk]'``.
"""

from __future__ import annotations

try:
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkSessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
    from google.adk.sessions.session import Session
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised with the package hidden
    from ..extras import install_hint

    raise ImportError(
        "jsonl_sessions.integrations.google_adk needs the Google Agent Development Kit (google-adk): "
        f"{install_hint('google-adk')} ({exc})"
    ) from exc

import asyncio
import copy
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ..errors import SerializationError
from ..protocol import SessionBackend
from ..types import ChatMessage
from ._adk_records import (
    APPLIED,
    CREATED,
    EVENT,
    TEMP_PREFIX,
    Keys,
    SessionLines,
    delta_line,
    fold_state,
    split_state,
)
from ._common import StoreLike, check_prefix, default_prefix, finish, open_store, where

__all__ = ["JsonlSessionService"]

#: The default prefix of every key the service writes.
KEY_PREFIX = default_prefix("google-adk")
#: How many of a session's newest lines ``append_event`` looks at to recognise a re-delivered event.
RETRY_WINDOW = 64


def _now() -> float:
    try:  # ADK's own clock, which its tests can replace
        from google.adk.platform import time as platform_time
    except ImportError:  # pragma: no cover - ADK releases without it
        return time.time()
    return float(platform_time.get_time())


def _new_id() -> str:
    try:
        from google.adk.platform import uuid as platform_uuid
    except ImportError:  # pragma: no cover - ADK releases without it
        return str(uuid.uuid4())
    return str(platform_uuid.new_uuid())


def _json(key: str, value: Any) -> Any:
    """``value`` as JSON data (datetimes, models... converted as ADK's own services do);
    a value that has no JSON form is a :class:`SerializationError`."""
    try:
        return to_jsonable_python(value)
    except Exception as exc:  # pydantic's PydanticSerializationError and friends
        raise SerializationError(key=key, reason=str(exc)) from exc


def _text(event: Event) -> str | None:
    parts = event.content.parts if event.content and event.content.parts else []
    texts = [p.text for p in parts if p.text]
    return "\n".join(texts) if texts else None


def _shared(app: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {name: delta for name, delta in (("app", app), ("user", user)) if delta}


class JsonlSessionService(BaseSessionService):
    """``JsonlSessionService(store=None, *, key_prefix="adk/", **store_options)``.

    ``store``: any session backend (a :class:`~jsonl_sessions.SessionStore`, a SQLite
    store...), an :class:`~jsonl_sessions.AsyncSessionStore`, or the path of a store
    directory, opened with ``store_options`` (``durability``, ``lock_timeout``...); None
    means the command line's store (``$JSONL_SESSIONS_ROOT``, else the per-user data
    directory). Any number of services, threads and processes may
    share a store. Every method runs the store in a worker thread; a write whose caller
    is cancelled is awaited to its end first.

    A state value or event field with no JSON form raises
    :class:`~jsonl_sessions.SerializationError` (a TypeError) with nothing written and
    the caller's session object unchanged.
    """

    def __init__(self, store: StoreLike = None, *, key_prefix: str = KEY_PREFIX, **store_options: Any) -> None:
        check_prefix(key_prefix)
        self.keys = Keys(key_prefix)
        self._store = open_store(store, store_options)

    @property
    def store(self) -> SessionBackend:
        """The store holding the sessions and the shared state."""
        return self._store

    def __repr__(self) -> str:
        return f"JsonlSessionService({where(self._store)!r}, key_prefix={self.keys.prefix!r})"


    # -- shared state ------------------------------------------------------------------------
    def _apply_shared(self, app: str, user: str, key: str, line: ChatMessage, line_id: str, *, check: bool) -> None:
        """Put ``line``'s shared changes into the app and user state sessions (with
        ``check``: each unless already there, for a step a crash interrupted), then mark
        the line applied."""
        shared = line.extra.get("shared") or {}
        for scope, target in (("app", self.keys.app(app)), ("user", self.keys.user(app, user))):
            delta = shared.get(scope)
            if not delta or (check and any(m.extra.get("line") == line_id and m.extra.get("source") == key
                                           for m in self._store.load(target))):
                continue
            self._store.append(target, delta_line(delta, key, line_id))
        self._store.append(key, ChatMessage(APPLIED, None, extra={"line": line_id}))

    def _recover(self, app: str, user: str, key: str) -> None:
        """Under the session's guard: complete a step a crash interrupted (see the module docstring)."""
        unapplied = SessionLines.build(self._store.load(key)).unapplied
        if unapplied is not None:
            self._apply_shared(app, user, key, unapplied, unapplied.id, check=True)

    def _shared_state(self, app: str, user: str) -> dict[str, Any]:
        """The app and user state, keys with their ``app:`` / ``user:`` prefixes."""
        state = {"app:" + k: v for k, v in fold_state(self._store.load(self.keys.app(app))).items()}
        state.update({"user:" + k: v for k, v in fold_state(self._store.load(self.keys.user(app, user))).items()})
        return state

    def _merged(self, app: str, user: str, session_id: str, lines: SessionLines, events: list[dict[str, Any]],
                shared: dict[str, Any] | None = None) -> Session:
        state = {**lines.state, **(self._shared_state(app, user) if shared is None else shared)}
        return Session(id=session_id, app_name=app, user_id=user, state=state,
                       events=[Event.model_validate(e) for e in events], last_update_time=lines.last_update)

    # -- blocking bodies ---------------------------------------------------------------------
    def _create(self, app: str, user: str, state: Mapping[str, Any] | None, session_id: str | None) -> Session:
        session_id = session_id.strip() if session_id else None
        session_id = session_id or _new_id()
        key = self.keys.session(app, user, session_id)
        app_delta, user_delta, own = split_state(_json(key, dict(state or {})))
        now = _now()
        line = ChatMessage(CREATED, None, extra={"state": own, "time": now, "shared": _shared(app_delta, user_delta)})
        with self._store.lock(key):
            if self._store.session_exists(key):
                raise AlreadyExistsError(f"Session with id {session_id} already exists.")
            line_id = self._store.append(key, line)
            if line.extra["shared"]:
                self._apply_shared(app, user, key, line, line_id, check=False)
        return self._merged(app, user, session_id, SessionLines.build([line]), [])

    def _get(self, app: str, user: str, session_id: str, config: GetSessionConfig | None) -> Session | None:
        session_id = session_id.strip() if session_id else session_id
        key = self.keys.session(app, user, session_id)
        lines = SessionLines.build(self._store.load(key))
        if not lines.created and not lines.events and not self._store.session_exists(key):
            return None
        if lines.unapplied is not None:
            with self._store.lock(key):
                self._recover(app, user, key)
        events = lines.events
        if config is not None:
            if config.num_recent_events is not None:
                events = events[-config.num_recent_events:] if config.num_recent_events else []
            if config.after_timestamp is not None:
                at = len(events)
                while at > 0 and events[at - 1].get("timestamp", 0) >= config.after_timestamp:
                    at -= 1
                events = events[at:]
        return self._merged(app, user, session_id, lines, events)

    def _list(self, app: str, user: str | None) -> ListSessionsResponse:
        found = []
        shared: dict[str, dict[str, Any]] = {}  # per user: the shared state is read once per listing
        for uid, sid in self.keys.owners(self._store.list_sessions(), app, user):
            lines = SessionLines.build(self._store.load(self.keys.session(app, uid, sid)))
            if uid not in shared:
                shared[uid] = self._shared_state(app, uid)
            found.append(self._merged(app, uid, sid, lines, [], copy.deepcopy(shared[uid])))
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    def _append(self, app: str, user: str, session_id: str, event: Event, given: Event) -> bool:
        """Store ``event`` (``given`` with its temp keys trimmed); False when ``given`` equals
        a stored event (a re-delivery)."""
        key = self.keys.session(app, user, session_id)
        # the state delta first: the event's own serializer would replace a bad value by its repr
        delta = _json(key, dict(event.actions.state_delta)) if event.actions and event.actions.state_delta else {}
        try:
            dumped = event.model_dump(mode="json", exclude_none=True, by_alias=True)
        except Exception as exc:
            raise SerializationError(key=key, reason=str(exc)) from exc
        app_delta, user_delta, own = split_state(delta)
        line = ChatMessage(EVENT, _text(event), extra={
            "event": dumped, "session_delta": own, "shared": _shared(app_delta, user_delta)})
        with self._store.lock(key):
            if not self._store.session_exists(key):
                raise AdkSessionNotFoundError(f"Session {session_id} not found.")
            newest = self._store.page(key, limit=RETRY_WINDOW).messages
            if any(m.role == EVENT and m.extra.get("event", {}).get("id") == given.id
                   and Event.model_validate(m.extra["event"]) == given for m in newest):
                return False
            if any(m.extra.get("shared") for m in newest) and SessionLines.build(newest).unapplied is not None:
                self._recover(app, user, key)
            line_id = self._store.append(key, line)
            if line.extra["shared"]:
                self._apply_shared(app, user, key, line, line_id, check=False)
        return True

    # -- the service -------------------------------------------------------------------------
    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None, session_id: str | None = None
    ) -> Session:
        """Create a session (one append; its ``app:``/``user:`` keys then go to the shared
        state). Raises ADK's ``AlreadyExistsError`` for an existing id (checked under the
        session's guard, so two processes cannot both create it)."""
        return await finish(asyncio.to_thread(self._create, app_name, user_id, state, session_id))

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None = None
    ) -> Session | None:
        """The session with its events (the ``num_recent_events`` newest, then only those
        at or after ``after_timestamp``) and its state merged with the app and user state;
        None when it does not exist. Lock-free unless it completes an interrupted step."""
        return await asyncio.to_thread(self._get, app_name, user_id, session_id, config)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The sessions of the app (of one user, or all users when None), without events,
        with merged state, oldest update first."""
        return await asyncio.to_thread(self._list, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session (atomic, durable; nothing happens for a missing one). App and
        user state stay."""
        session_id = session_id.strip() if session_id else session_id
        await finish(asyncio.to_thread(self._store.delete_session, self.keys.session(app_name, user_id, session_id)))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user-scoped state, keys without their ``user:`` prefix."""
        lines = await asyncio.to_thread(self._store.load, self.keys.user(app_name, user_id))
        return fold_state(lines)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` in ``session`` and apply it to the ``session`` object, as
        ``InMemorySessionService`` does. A partial event is returned untouched and
        unstored; ``temp:`` keys of its state delta reach the session object only.
        Raises ADK's ``SessionNotFoundError`` for a session that is not stored."""
        if event.partial:
            return event
        stored = event.model_copy(deep=True)
        if stored.actions and stored.actions.state_delta:
            stored.actions.state_delta = {k: v for k, v in stored.actions.state_delta.items()
                                          if not k.startswith(TEMP_PREFIX)}
        fresh = await finish(asyncio.to_thread(self._append, session.app_name, session.user_id, session.id, stored, event))
        if fresh:
            await super().append_event(session=session, event=event)
            session.last_update_time = event.timestamp
        return event
