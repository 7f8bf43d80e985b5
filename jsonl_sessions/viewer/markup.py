"""Markdown to HTML for message text, safely: markdown-it-py with raw HTML off, so a
``<script>`` or ``<img onerror=...>`` in a message is text, never markup.

- Links go through markdown-it's link validation (``javascript:``, ``vbscript:``,
  ``file:`` and ``data:`` URLs are refused and stay text) and carry
  ``rel="noopener noreferrer nofollow"``.
- Images are off: ``![alt](url)`` stays text, so a transcript can make the page fetch
  nothing (the viewer's Content-Security-Policy would refuse it anyway).
- CommonMark plus tables and strikethrough; no typographer (text shows as written).

Cost: linear in the text (markdown-it has no backtracking rules); texts are cut at
:data:`jsonl_sessions.viewer.model.MAX_TEXT` characters before they get here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable("image")

    def link_open(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        return str(renderer.renderToken(tokens, idx, options, env))

    md.add_render_rule("link_open", link_open)
    return md


_MD = _parser()


def markdown(text: str) -> Markup:
    """``text`` (Markdown) as safe HTML: every character of the input is escaped or
    turned into markup markdown-it generates; no raw HTML passes."""
    return Markup(_MD.render(text))


__all__ = ["markdown"]
