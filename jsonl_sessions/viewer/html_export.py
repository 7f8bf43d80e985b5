"""A session as one self-contained HTML file: the viewer's rendering (the same templates
and stylesheet), no script, nothing loaded from anywhere (the stylesheet is inline), tool
calls collapsible with ``<details>``, each message's raw JSON one click away inline.

Its Content-Security-Policy meta tag allows nothing but that one stylesheet (by its
SHA-256), so even a browser that opens the file runs no script and fetches nothing.
Text is not cut. Cost: O(size of the messages).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
from collections.abc import Iterable
from datetime import datetime, timezone
from urllib.parse import quote

from markupsafe import Markup

from ..types import ChatMessage, SessionMetadata
from . import model
from .app import session_texts
from .model import visible
from .pages import render


def _css() -> str:
    css = importlib.resources.files("jsonl_sessions.viewer").joinpath("static").joinpath("viewer.css").read_text("utf-8")
    if "</" in css:  # raw text inside <style>: it must not be able to close the element
        raise ValueError("the stylesheet must not contain '</'")
    return css


def to_html(meta: SessionMetadata, messages: Iterable[ChatMessage]) -> str:
    """The session as one HTML document (UTF-8 text)."""
    css = _css()
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    csp = f"default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    by_id: dict[str, ChatMessage] = {}
    shown = []
    for message in messages:
        by_id[message.id] = message
        shown.append(message)

    def link(m: model.MessageView) -> str:
        return "#m-" + quote(m.id, safe="")

    def raw_json(m: model.MessageView) -> str:
        return model.raw_json(by_id[m.id]) if m.id in by_id else ""

    title = visible(meta.name, one_line=True) if meta.name else visible(meta.key, one_line=True)
    exported = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return render("export.html", title=title, meta=meta, messages=model.views(shown, cut=False), link=link,
                  raw_json=raw_json, css=Markup(css), csp=csp, exported=exported, **session_texts(meta))


__all__ = ["to_html"]
