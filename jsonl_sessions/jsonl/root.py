"""A store directory and its options (:class:`Root`), shared by every part of a JSONL store.

Its own module so that the protocol (:mod:`jsonl_sessions.jsonl.control`) and the
mutations built on it (:mod:`jsonl_sessions.jsonl.txn`) both import it downward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .guard import REGISTRY
from .layout import SessionFiles
from .listcache import Seen

#: The most sessions whose file names a :class:`Root` keeps before it starts over.
_MAX_CACHED_FILES = 4096


@dataclass
class Root:
    """One store directory and its options, shared by every part of a store."""

    path: str
    durable: bool
    lock_timeout: float | None
    clock: Callable[[], int]
    max_message_bytes: int
    #: The files of the keys :meth:`files` was asked for (keys validated), at most
    #: ``_MAX_CACHED_FILES`` (then it starts over, the same dict cleared).
    known: dict[str, SessionFiles] = field(default_factory=dict, repr=False)
    #: What listings read of each session, reused while its files are unchanged.
    seen: Seen = field(default_factory=Seen, repr=False)

    def files(self, key: str, stem: str | None = None) -> SessionFiles:
        """The files of ``key`` (cached); ``stem``: its stem when already known (a listing
        read it off the file name). Raises :class:`InvalidSessionKeyError`."""
        try:
            found = self.known.get(key)
        except TypeError:  # an unhashable non-str key: SessionFiles.of raises InvalidSessionKeyError
            found = None
        if found is None:
            found = SessionFiles.of(self.path, key, stem)
            if len(self.known) > _MAX_CACHED_FILES:
                self.close_views()
                self.known.clear()
            self.known[key] = found
        return found

    def close_views(self) -> None:
        """Close the transcripts kept open for this store's sessions (those no thread holds)."""
        REGISTRY.drop_views([files.lock for files in list(self.known.values())])

    def close(self) -> None:
        """Close every descriptor kept for the sessions of this directory (lock files and
        transcripts) that no thread holds, and forget what listings kept."""
        REGISTRY.close_idle(self.path)
        self.seen.clear()


__all__ = ["Root"]
