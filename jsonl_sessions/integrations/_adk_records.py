"""Where the Google ADK session service keeps things, and the lines it writes.

Keys (each part percent-encoded, so ``/`` separates parts unambiguously and a key names
its owner reversibly): ``<prefix><app>`` holds the app-scoped state, ``<prefix><app>/<user>``
the user-scoped state, ``<prefix><app>/<user>/<session>`` one session.

Lines of a session: a ``created`` line first (``state``: the session-scoped initial
state, ``time``: the creation time in seconds), then one ``event`` line per appended event
(``content``: the event's text, for reading and search; ``event``: the whole event as
JSON; ``shared``: its app- and user-scoped state changes, when it has any; the creation
line carries ``shared`` too when the initial state has such keys), and an ``applied``
line after each line with ``shared`` once those changes are in the app and user state
sessions. Lines of a state session: ``delta`` lines (``delta``: keys set; ``source``,
``line``: the session key and line id they come from).

Nothing here reads or writes files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from ..types import ChatMessage

CREATED = "created"
EVENT = "event"
APPLIED = "applied"
DELTA = "delta"

APP_PREFIX, USER_PREFIX, TEMP_PREFIX = "app:", "user:", "temp:"


def part(text: str) -> str:
    return quote(text, safe="")


def split_state(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``state`` as (app, user, session) changes, prefixes removed; ``temp:`` keys dropped
    (as ADK's own services split it)."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(APP_PREFIX):
            app[key[len(APP_PREFIX):]] = value
        elif key.startswith(USER_PREFIX):
            user[key[len(USER_PREFIX):]] = value
        elif not key.startswith(TEMP_PREFIX):
            session[key] = value
    return app, user, session


@dataclass(frozen=True)
class Keys:
    """The keys of one app / user / session under ``prefix``."""

    prefix: str

    def app(self, app: str) -> str:
        return f"{self.prefix}{part(app)}"

    def user(self, app: str, user: str) -> str:
        return f"{self.app(app)}/{part(user)}"

    def session(self, app: str, user: str, session: str) -> str:
        return f"{self.user(app, user)}/{part(session)}"

    def owners(self, keys: Iterable[str], app: str, user: str | None) -> list[tuple[str, str]]:
        """(user, session) of every session key among ``keys`` of ``app`` (and ``user``)."""
        head = self.app(app) + "/"
        out = []
        for key in keys:
            if key.startswith(head):
                parts = key[len(head):].split("/")
                if len(parts) == 2 and (user is None or unquote(parts[0]) == user):
                    out.append((unquote(parts[0]), unquote(parts[1])))
        return out


def fold_state(lines: Iterable[ChatMessage]) -> dict[str, Any]:
    """The state a state session's delta lines build, oldest first, later keys winning."""
    state: dict[str, Any] = {}
    for line in lines:
        delta = line.extra.get("delta")
        if line.role == DELTA and isinstance(delta, dict):
            state.update(delta)
    return state


def delta_line(delta: Mapping[str, Any], source: str, line_id: str) -> ChatMessage:
    return ChatMessage(DELTA, None, extra={"delta": dict(delta), "source": source, "line": line_id})


@dataclass
class SessionLines:
    """A session as its lines describe it."""

    created: float = 0.0
    state: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    last_update: float = 0.0
    #: The last line carrying shared changes when no ``applied`` line follows it.
    unapplied: ChatMessage | None = None

    @classmethod
    def build(cls, lines: Iterable[ChatMessage]) -> SessionLines:
        out = cls()
        for line in lines:
            extra = line.extra
            if line.role == CREATED:
                out.created = out.last_update = float(extra.get("time") or 0.0)
                out.state.update(extra.get("state") or {})
            elif line.role == EVENT and isinstance(extra.get("event"), dict):
                event = extra["event"]
                out.events.append(event)
                out.state.update(extra.get("session_delta") or {})
                out.last_update = float(event.get("timestamp") or out.last_update)
            elif line.role == APPLIED:
                out.unapplied = None
                continue
            if extra.get("shared"):
                out.unapplied = line
        return out
