"""``jsonl-sessions serve``: a local, read-only web viewer of a store, and the readable
exports (``export --format markdown|html``) that share its rendering.

- :mod:`jsonl_sessions.display` (outside this package, shared with the command line):
  what is shown of a message (text parts, tool calls paired with their results,
  compaction marks), no dependency;
- :mod:`.markdown_export`: a session as Markdown, no dependency;
- :mod:`.markup`, :mod:`.pages`: Markdown to safe HTML (markdown-it-py) and the Jinja2
  templates (autoescaped);
- :mod:`.html_export`: a session as one self-contained HTML file;
- :mod:`.source`: the store calls the pages make (listing, pages of messages, search);
- :mod:`.app`: the routes (request to response, no server);
- :mod:`.security`: token, Host and Origin checks, the security headers;
- :mod:`.server`: the threaded HTTP server.

The HTML parts need the ``viewer`` extra (jinja2, markdown-it-py); importing this package
imports neither, so :func:`missing` can tell what to install first.
"""

from __future__ import annotations

import importlib.util

from ..extras import install_hint

#: The modules the HTML parts need, and the distributions that provide them.
REQUIREMENTS = {"jinja2": "jinja2", "markdown_it": "markdown-it-py"}

INSTALL_HINT = "install the viewer extra: " + install_hint("viewer")


def missing() -> list[str]:
    """The distributions of the ``viewer`` extra that are not installed (nothing is imported)."""
    return [dist for module, dist in REQUIREMENTS.items() if not _found(module)]


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken installation
        return False


__all__ = ["INSTALL_HINT", "REQUIREMENTS", "missing"]
