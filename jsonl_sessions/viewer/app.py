"""The viewer's routes: a request (path and query, already past the
:class:`~jsonl_sessions.viewer.security.Guard`) to a response, with no server involved,
so tests and ``--get``-style callers can render any page directly.

Pages (HTML, each a shareable address):

- ``/``: the session list, most recent activity first; ``name``, ``alias``, ``state``
  filter it, ``cursor`` is the page (the next page is a link, and the script loads it as
  the list scrolls).
- ``/session?key=K``: the newest messages of ``K``; ``before=ID`` / ``after=ID``: the
  page older / newer than a message; ``at=ID``: the messages around one (a search hit, a
  fork point), which the page scrolls to.
- ``/search?q=TEXT``: messages matching every word and "quoted phrase" of ``TEXT``,
  newest first; ``role``, ``key``, ``alias``, ``name`` filter, ``cursor`` pages.
- ``/raw?key=K&id=ID``: one message as stored (JSON).

Parts the script loads (JSON with rendered HTML): ``/sessions.part`` (the next page of the
list) and ``/messages.part`` (``before=ID``: the page older than a message, ``after=ID``:
the messages newer than it: scrolling forward and the live tail).
Static files: ``/static/viewer.css`` and ``/static/viewer.js``.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import orjson

from .. import display, matcher
from ..display import visible
from ..errors import InvalidSessionKeyError, MessageNotFoundError, SessionNotFoundError, SessionStoreError
from ..protocol import SessionBackend
from ..types import SearchHit, SessionMetadata
from . import source
from .pages import render, url

#: The static files served, and their types.
STATIC = {"viewer.css": "text/css; charset=utf-8", "viewer.js": "text/javascript; charset=utf-8"}
#: Messages a live-tail request returns at most (the script asks again at once when more remain).
TAIL_PAGE = 200

HTML = "text/html; charset=utf-8"
JSON = "application/json"


@dataclass
class Response:
    """What a route answers: status, body, content type and extra headers."""

    status: int
    body: bytes
    content_type: str = HTML
    headers: list[tuple[str, str]] = field(default_factory=list)


class HttpError(Exception):
    """A route's refusal: the status and a sentence for the error page."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
           500: "Internal Server Error", 501: "Not Implemented"}


def _static(name: str) -> bytes:
    return importlib.resources.files("jsonl_sessions.viewer").joinpath("static").joinpath(name).read_bytes()


class Viewer:
    """The routes over one store (only its read methods are called). ``name``: how the
    store is shown at the top of every page."""

    def __init__(self, store: SessionBackend, name: str) -> None:
        self.store = store
        self.name = visible(name, one_line=True)
        self._routes: dict[str, Callable[[Mapping[str, Sequence[str]]], Response]] = {
            "/": self.sessions, "/sessions.part": self.sessions_part, "/session": self.session,
            "/messages.part": self.messages_part, "/raw": self.raw, "/search": self.search,
        }
        self._static = {name: _static(name) for name in STATIC}

    # -- dispatch ----------------------------------------------------------------------------
    def handle(self, path: str, params: Mapping[str, Sequence[str]]) -> Response:
        """The response to ``GET path?params`` (every error becomes its status page)."""
        if path.startswith("/static/"):
            name = path.removeprefix("/static/")
            if name in self._static:
                return Response(200, self._static[name], STATIC[name])
            return self.error(404, "no such file")
        route = self._routes.get(path)
        if route is None:
            return self.error(404, "no such page")
        try:
            return route(params)
        except HttpError as exc:
            return self.error(exc.status, exc.detail)
        except (SessionNotFoundError, MessageNotFoundError) as exc:
            return self.error(404, str(exc))
        except (InvalidSessionKeyError, ValueError) as exc:
            return self.error(400, str(exc))
        except SessionStoreError as exc:
            return self.error(500, str(exc))

    def error(self, status: int, detail: str) -> Response:
        body = render("error.html", store_name=self.name, status=status, reason=REASONS.get(status, ""),
                      detail=visible(detail))
        return Response(status, body.encode())

    def _page(self, template: str, **context: Any) -> Response:
        return Response(200, render(template, store_name=self.name, **context).encode())

    # -- the session list --------------------------------------------------------------------
    def _filters(self, params: Mapping[str, Sequence[str]]) -> source.Filters:
        # an empty field of the filter form is no filter
        state = _one(params, "state") or None
        if state is not None and state not in ("idle", "running", "error"):
            raise HttpError(400, f"unknown state {state!r}: idle, running or error")
        return source.Filters(name_prefix=_one(params, "name") or None, agent_alias=_one(params, "alias") or None,
                              state=state)

    def _list(self, params: Mapping[str, Sequence[str]]) -> tuple[source.Filters, list[dict[str, Any]], str | None]:
        filters = self._filters(params)
        found, cursor = source.list_page(self.store, filters, cursor=_one(params, "cursor") or None)
        rows = [_row(md) for md in found]
        next_url = None if cursor is None else url(
            "/", name=filters.name_prefix, alias=filters.agent_alias, state=filters.state, cursor=cursor)
        return filters, rows, next_url

    def sessions(self, params: Mapping[str, Sequence[str]]) -> Response:
        filters, rows, next_url = self._list(params)
        part = next_url.replace("/?", "/sessions.part?", 1) if next_url else None
        return self._page("list.html", rows=rows, filters=filters, filtered=filters.any, next_url=next_url,
                          next_part=part)

    def sessions_part(self, params: Mapping[str, Sequence[str]]) -> Response:
        _, rows, next_url = self._list(params)
        part = next_url.replace("/?", "/sessions.part?", 1) if next_url else None
        return _json({"html": render("_rows.html", rows=rows), "next": part, "next_page": next_url})

    # -- a session ---------------------------------------------------------------------------
    def session(self, params: Mapping[str, Sequence[str]]) -> Response:
        key = _required(params, "key")
        cursors = {name: _one(params, name) for name in ("before", "after", "at")}
        if sum(v is not None for v in cursors.values()) > 1:
            raise HttpError(400, "give at most one of before, after and at")
        meta = self.store.get_session_metadata(key)
        if meta is None:
            raise SessionNotFoundError(key=key)
        with source.store_warnings() as problems:
            shown = source.window(self.store, key, before=cursors["before"], after=cursors["after"],
                                  at=cursors["at"])
        link, raw = _links(key)
        title = visible(meta.name, one_line=True) if meta.name else visible(key, one_line=True)
        return self._page(
            "session.html", title=title, key=key, meta=meta, messages=display.views(shown.messages),
            problems=_shown(problems), link=link, raw=raw, live=shown.live, target=cursors["at"],
            older_url=url("/session", key=key, before=shown.older) if shown.older else None,
            newer_url=url("/session", key=key, after=shown.newer) if shown.newer else None,
            older_part=url("/messages.part", key=key, before=shown.older) if shown.older else None,
            newer_part=url("/messages.part", key=key, after=shown.newer if shown.newer else shown.last),
            **session_texts(meta))

    def messages_part(self, params: Mapping[str, Sequence[str]]) -> Response:
        key = _required(params, "key")
        before, after = _one(params, "before"), _one(params, "after")
        if (before is None) == (after is None):
            raise HttpError(400, "give one of before and after")
        link, raw = _links(key)
        if before is not None:
            with source.store_warnings() as problems:
                shown = source.window(self.store, key, before=before)
            older = url("/messages.part", key=key, before=shown.older) if shown.older else None
            html = render("_messages.html", messages=display.views(shown.messages), problems=_shown(problems),
                          link=link, raw=raw)
            return _json({"html": html, "older": older, "older_page": url("/session", key=key, before=shown.older)
                          if shown.older else None})
        assert after is not None
        with source.store_warnings() as problems:
            page = self.store.page(key, limit=TAIL_PAGE, after=after, whole_turns=True)
        last = page.messages[-1].id if page.messages else after
        # a skipped line is reported with the messages after it (``count`` stays the messages:
        # a poll that found only a corrupt line adds nothing, and the next one reads it again)
        html = render("_messages.html", messages=display.views(page.messages),
                      problems=_shown(problems) if page.messages else [], link=link, raw=raw)
        return _json({"html": html, "newer": url("/messages.part", key=key, after=last), "more": page.has_more,
                      "count": len(page.messages)})

    def raw(self, params: Mapping[str, Sequence[str]]) -> Response:
        key, ident = _required(params, "key"), _required(params, "id")
        message = self.store.get_message(key, ident)
        if message is None:
            raise HttpError(404, f"no message {ident!r} in session {key!r}")
        body = orjson.dumps(message.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        return Response(200, body, JSON + "; charset=utf-8")

    # -- search ------------------------------------------------------------------------------
    def search(self, params: Mapping[str, Sequence[str]]) -> Response:
        text = (_one(params, "q") or "").strip()
        # an empty field of the filter form is no filter
        role, alias, name = _one(params, "role") or None, _one(params, "alias") or None, _one(params, "name") or None
        keys = [k for k in params.get("key", ()) if k] or None
        chosen = {"role": role or "", "alias": alias or "", "name": name or ""}
        if not text:
            return self._page("search.html", query="", hits=[], next_url=None, chosen=chosen, problems=[])
        with source.store_warnings() as problems:
            found = source.search_page(self.store, text, roles=[role] if role else None, keys=keys,
                                       agent_alias=alias, name=name, cursor=_one(params, "cursor") or None)
        hits = [_hit(h) for h in found.hits]
        next_url = None if found.cursor is None else url("/search", q=text, role=role, alias=alias, name=name,
                                                         cursor=found.cursor)
        return self._page("search.html", query=text, hits=hits, next_url=next_url, chosen=chosen,
                          problems=_shown(problems))


# -- helpers ---------------------------------------------------------------------------------
def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    """The last value of ``name`` (None when absent; "" is a value)."""
    values = params.get(name)
    return values[-1] if values else None


def _required(params: Mapping[str, Sequence[str]], name: str) -> str:
    value = _one(params, name)
    if value is None:
        raise HttpError(400, f"the parameter {name!r} is required")
    return value


def _shown(problems: list[str]) -> list[str]:
    """The store's warnings about a page (lines it could not read), as display text."""
    return [visible(p) for p in problems]


def _json(value: Any) -> Response:
    return Response(200, orjson.dumps(value), JSON)


def _links(key: str) -> tuple[Callable[[display.MessageView], str], Callable[[display.MessageView], str]]:
    def link(m: display.MessageView) -> str:
        return url("/session", key=key, at=m.id) + "#m-" + quote(m.id, safe="")

    def raw(m: display.MessageView) -> str:
        return url("/raw", key=key, id=m.id)

    return link, raw


def _when(value: datetime | None) -> tuple[str, str]:
    """A metadata time as display text and ISO text (UTC), "" when unknown."""
    if value is None:
        return "", ""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"), display.iso_text(value)


def _state_class(state: str | None) -> str:
    return state if state in ("idle", "running", "error") else "other"


def _row(md: SessionMetadata) -> dict[str, Any]:
    updated, updated_iso = _when(md.updated_at)
    return {"key": md.key, "key_text": visible(md.key, one_line=True),
            "name": visible(md.name, one_line=True) if md.name else "", "state": md.state and visible(md.state),
            "state_class": _state_class(md.state), "message_count": md.message_count, "updated": updated,
            "updated_iso": updated_iso, "parent": md.parent, "fork_point": md.fork_point,
            "parent_text": visible(md.parent, one_line=True) if md.parent is not None else ""}


def session_texts(meta: SessionMetadata) -> dict[str, Any]:
    """The metadata fields of the session header, as display text."""
    updated, updated_iso = _when(meta.updated_at)
    return {"key_text": visible(meta.key, one_line=True), "updated": updated, "updated_iso": updated_iso,
            "state_class": _state_class(meta.state),
            "alias_text": visible(meta.agent_alias, one_line=True) if meta.agent_alias else "",
            "parent_text": visible(meta.parent, one_line=True) if meta.parent is not None else "",
            "fork_point_text": visible(meta.fork_point, one_line=True) if meta.fork_point else ""}


def _hit(hit: SearchHit) -> dict[str, Any]:
    """A search hit as shown: the snippet cut into (text, marked) pieces at its matches."""
    pieces = [(visible(text, one_line=True), marked) for text, marked in matcher.pieces(hit.snippet, hit.matches)]
    return {"key_text": visible(hit.key, one_line=True), "role": visible(hit.role, one_line=True),
            "time": display.utc_text(hit.created_at), "iso": display.iso_text(hit.created_at), "pieces": pieces,
            "url": url("/session", key=hit.key, at=hit.message_id) + "#m-" + quote(hit.message_id, safe="")}


__all__ = ["STATIC", "HttpError", "Response", "Viewer", "session_texts"]
