"""Markdown to HTML for message text, safely: markdown-it-py with raw HTML off, so a
``<script>`` or ``<img onerror=...>`` in a message is text, never markup.

- Links go through markdown-it's link validation (``javascript:``, ``vbscript:``,
  ``file:`` and ``data:`` URLs are refused and stay text) and carry
  ``rel="noopener noreferrer nofollow"``.
- Images are off: ``![alt](url)`` stays text, so a transcript can make the page fetch
  nothing (the viewer's Content-Security-Policy would refuse it anyway).
- CommonMark plus tables and strikethrough; no typographer (text shows as written). A
  table column's alignment (``|--:|``) is a class (``align-right``...), not the
  ``style`` attribute markdown-it writes: the viewer's Content-Security-Policy refuses
  inline styles, so a style attribute would be dropped (and logged) by the browser.

Cost: linear in the text (markdown-it has no backtracking rules); texts are cut at
:data:`jsonl_sessions.display.MAX_TEXT` characters before they get here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup

#: The alignments of a table column, each a class of the stylesheet (``align-left``...).
_ALIGNMENTS = ("left", "center", "right")


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable("image")

    def link_open(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        return str(renderer.renderToken(tokens, idx, options, env))

    def cell_open(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        style = token.attrs.pop("style", None)
        align = str(style).removeprefix("text-align:") if style is not None else ""
        if align in _ALIGNMENTS:
            token.attrJoin("class", f"align-{align}")
        return str(renderer.renderToken(tokens, idx, options, env))

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("th_open", cell_open)
    md.add_render_rule("td_open", cell_open)
    return md


_MD = _parser()


def markdown(text: str) -> Markup:
    """``text`` (Markdown) as safe HTML: every character of the input is escaped or
    turned into markup markdown-it generates; no raw HTML passes."""
    return Markup(_MD.render(text))


__all__ = ["markdown"]
