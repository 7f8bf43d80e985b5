"""SessionStore: the crash-safe JSONL session store, put together.

The core (files, guard, append/load/rewrite/replace) is in core.py; the message-history
API and pagination in history.py; metadata and lifecycle in metadata.py. Each part is a
class built on :class:`StoreCore`; this one joins them.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from .history import HistoryMethods
from .metadata import MetadataMethods
from .types import Durability, MessageLike

if TYPE_CHECKING:
    from typing_extensions import Self


class SessionStore(HistoryMethods, MetadataMethods):
    """A directory of sessions, each a JSONL transcript plus a sidecar.

    ``SessionStore(root, *, durability="fsync", lock_timeout=30.0,
    max_message_bytes=16 MiB, clock=None)``: see :class:`jsonl_sessions.core.StoreCore`
    for the options and guarantees.

    The store keeps no file open between calls, so :meth:`close` has nothing to
    release today; call it (or use the store as a context manager) anyway, as every
    backend of :class:`jsonl_sessions.protocol.SessionBackend` asks.
    """

    def close(self) -> None:
        """Release what the store object holds open; stored data is untouched.
        Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = ["Durability", "MessageLike", "SessionStore"]
