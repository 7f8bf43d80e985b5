"""SqliteSessionStore: the session store in one SQLite file, put together.

The core (file, transactions, append/load/rewrite/replace) is in base.py; the history
API and pages in history.py; metadata and lifecycle in metadata.py; the health check in
verify.py. Each part is a class built on :class:`SqliteCore`; this one joins them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..dbfront import SessionSnapshot
from ..verification import VerifyReport, wanted_keys
from .history import HistoryMethods
from .metadata import MetadataMethods
from .verify import verify


class SqliteSessionStore(HistoryMethods, MetadataMethods):
    """Sessions in one SQLite file, with the API, semantics and errors of
    :class:`jsonl_sessions.SessionStore`.

    ``SqliteSessionStore(path, *, durability="fsync", lock_timeout=30.0,
    max_message_bytes=16 MiB, clock=None)``. ``path`` is the database file (created 0600,
    with its directory, if missing; its WAL files sit next to it). Thread-safe (one
    connection per thread); several processes may open the same file at once.

    - Every mutation is one SQLite transaction: all or nothing, also after SIGKILL or an
      I/O error. ``durability="fsync"`` (``synchronous=FULL``): durable when it returns;
      ``"flush"`` (``synchronous=NORMAL``): survives a process crash, the last commits
      may be lost on a power loss.
    - Writers serialise on the file's writers' lock (an ``flock`` on ``<path>-lock``,
      then ``BEGIN IMMEDIATE``; waited for up to ``lock_timeout`` seconds, then
      :class:`LockTimeoutError`): one lock for the whole file, where the JSONL backend
      has one per session. :meth:`lock` keeps other writers out for a block whose calls
      still commit one by one.
    - Messages are stored as the exact JSON lines the JSONL backend writes, so an export
      is byte-identical; counts, id lookups, windows and pages use indexes (O(1) /
      O(log n) / O(log n + page), flat in the session's length).
    - A row whose line does not parse is corruption: :meth:`load` skips it (logged),
      :meth:`try_load` and every write that would destroy it raise
      :class:`CorruptTranscriptError` (line and byte offset as in the export). Nothing is
      deleted silently (``compact(repair=True)`` keeps what it drops in a quarantine
      table). :meth:`verify` checks the file.
    - File-system failures raise :class:`OSError` (disk full: ``ENOSPC``; I/O error:
      ``EIO``; read-only: ``EROFS``), with nothing changed.
    """

    def verify(self, keys: Iterable[str] | None = None, *, fix: bool = False) -> VerifyReport:
        # PRAGMA integrity_check plus the store's own invariants, in one read transaction
        # (jsonl_sessions.sqlite.verify); nothing found here is fixable.
        wanted = wanted_keys(keys)
        with self._db.read() as c:
            return verify(c, self._path, wanted)


if TYPE_CHECKING:  # mypy checks that the store satisfies the backend contract
    from ..protocol import SessionBackend

    def _is_a_backend(store: SqliteSessionStore) -> SessionBackend:
        return store


__all__ = ["SessionSnapshot", "SqliteSessionStore"]
