"""A session as one self-contained HTML file: the viewer's rendering (the same templates
and stylesheet), no script, nothing loaded from anywhere (the stylesheet is inline), tool
calls collapsible with ``<details>``, each message's raw JSON one click away inline.

Its Content-Security-Policy meta tag allows nothing but that one stylesheet (by its
SHA-256), so even a browser that opens the file runs no script and fetches nothing.
Text is not cut. :func:`iter_html` gives the page a piece at a time, holding a bounded
number of messages (:func:`jsonl_sessions.display.stream_views`), for a session of any
length. Cost: O(size of the messages).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from urllib.parse import quote

from markupsafe import Markup

from .. import display
from ..display import visible
from ..types import ChatMessage, SessionMetadata
from .app import session_texts
from .pages import generate


def _css() -> str:
    css = importlib.resources.files("jsonl_sessions.viewer").joinpath("static").joinpath("viewer.css").read_text("utf-8")
    if "</" in css:  # raw text inside <style>: it must not be able to close the element
        raise ValueError("the stylesheet must not contain '</'")
    return css


def _ids(m: display.MessageView) -> Iterator[str]:
    """The ids of the messages shown in view ``m``: its own, its calls' results', its results'."""
    yield m.id
    for call in m.tool_calls:
        if call.result is not None:
            yield from _ids(call.result)
    for result in m.results:
        yield from _ids(result)


def iter_html(meta: SessionMetadata, messages: Iterable[ChatMessage], *, hold: int | None = display.HOLD,
              exported: str | None = None) -> Iterator[str]:
    """The session as one HTML document, a piece at a time as ``messages`` are read: their
    concatenation is :func:`to_html`'s page when no tool result comes more than ``hold``
    messages after its call (see :func:`jsonl_sessions.display.stream_views`).
    ``exported``: the time the page says it was made (default: now, UTC). Memory: the
    messages of at most ``hold`` views waiting for results, never the session."""
    css = _css()
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    csp = f"default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    # id -> (the message, how many read and not yet shown carry that id): a message is kept
    # for its raw JSON until its view is rendered (the last one read when an id repeats).
    by_id: dict[str, tuple[ChatMessage, int]] = {}

    def remember(source: Iterable[ChatMessage]) -> Iterator[ChatMessage]:
        for message in source:
            by_id[message.id] = (message, by_id[message.id][1] + 1 if message.id in by_id else 1)
            yield message

    def shown() -> Iterator[display.MessageView]:
        for m in display.stream_views(remember(messages), cut=False, hold=hold):
            yield m
            for ident in _ids(m):  # rendered: the template asks for the next view only then
                kept = by_id.get(ident)
                if kept is not None:
                    if kept[1] > 1:
                        by_id[ident] = (kept[0], kept[1] - 1)
                    else:
                        del by_id[ident]

    def link(m: display.MessageView) -> str:
        return "#m-" + quote(m.id, safe="")

    def raw_json(m: display.MessageView) -> str:
        return display.raw_json(by_id[m.id][0]) if m.id in by_id else ""

    title = visible(meta.name, one_line=True) if meta.name else visible(meta.key, one_line=True)
    if exported is None:
        exported = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return generate("export.html", title=title, meta=meta, messages=shown(), link=link, raw_json=raw_json,
                    css=Markup(css), csp=csp, exported=exported, **session_texts(meta))


def to_html(meta: SessionMetadata, messages: Iterable[ChatMessage]) -> str:
    """The session as one HTML document (UTF-8 text)."""
    return "".join(iter_html(meta, messages, hold=None))


__all__ = ["iter_html", "to_html"]
