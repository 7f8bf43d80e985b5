"""Session metadata and lifecycle (the rest of the Rust ``SessionBackend`` trait).

Methods of :class:`jsonl_sessions.SessionStore`, kept in their own module: names,
agent attribution, ownership, run state, TTL cleanup, search and compact/repair, all on
the sidecar (replaced atomically under the session's guard) and file stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import SessionStore  # noqa: F401  (the self type of the methods below)


class MetadataMethods:
    """Mixed into :class:`SessionStore`; every method takes ``self: SessionStore``."""
