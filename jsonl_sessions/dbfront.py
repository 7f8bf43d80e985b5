"""The parts of the database backends' stores (SQLite, PostgreSQL) that do not touch the
database: the store object's lifecycle, the reading and writing entry points that only
delegate, metadata decoding, encoding with the size limit, ``compact`` over
``compaction_report``, and the listing of metadata. Each backend's core class inherits
:class:`DatabaseFront` and provides the primitives named below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import codec, rows
from .arguments import check_page_arguments
from .compaction import CompactionReport, plan_lines
from .errors import CorruptTranscriptError, SessionExistsError
from .ids import assign_ids
from .jsonl import sidecar
from .keys import validate_key
from .metafront import MetadataFront
from .pagination import Reading
from .types import ChatMessage, Durability, MessageLike, Page, SessionMetadata, TimestampedMessage, datetime_of_ms

if TYPE_CHECKING:
    from typing_extensions import Self


def usable_id(message_id: object) -> bool:
    """Whether ``message_id`` can name a stored message: a non-empty str a driver can bind
    ("" never names one, also when a row edited by another tool has no id)."""
    if not isinstance(message_id, str) or not message_id:
        return False
    try:
        message_id.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class DatabaseFront(MetadataFront):
    """Shared methods of the database backends' stores. A backend provides ``_db`` (with
    ``close()``), ``_path`` (what errors name), ``_durability``, ``_max_message_bytes``,
    ``_clock``, and the methods ``_load``, ``append_many``, ``_replace_state``,
    ``compaction_report`` and ``_where``."""

    _db: Any
    _path: str
    _durability: Durability
    _max_message_bytes: int
    _clock: Callable[[], int]

    def _load(self, key: str, *, strict: bool) -> list[ChatMessage]:
        raise NotImplementedError

    def append_many(self, key: str, messages: Iterable[MessageLike]) -> list[str]:
        raise NotImplementedError

    def _replace_state(self, key: str, messages: Iterable[MessageLike], breadcrumb: bool, *, if_exists: bool) -> bool:
        raise NotImplementedError

    def compaction_report(self, key: str, *, repair: bool = False) -> CompactionReport:
        raise NotImplementedError

    # -- the store object -------------------------------------------------------------------
    @property
    def path(self) -> str:
        """Where the store is: the database file (SQLite); the server, without its
        password, and the schema (PostgreSQL)."""
        return self._path

    @property
    def root(self) -> str:
        """The same as :attr:`path` (the JSONL backend's ``root`` is its directory)."""
        return self._path

    @property
    def durability(self) -> Durability:
        return self._durability

    def close(self) -> None:
        """Close the store's connections. Further calls raise ValueError. Idempotent."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------
    def load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` for a missing session. Lenient: a row that
        does not parse is skipped with a logged warning, never raised (use :meth:`try_load`
        before writing a history back). One snapshot. Cost: O(messages)."""
        return self._load(key, strict=False)

    def try_load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` for a missing or empty session. Raises
        :class:`CorruptTranscriptError` for a row that does not parse (its line number and
        byte offset in the session's export). Cost: O(messages)."""
        return self._load(key, strict=True)

    def load_with_timestamps(self, key: str) -> list[TimestampedMessage]:
        """Like :meth:`load`, each message with its ``created_at`` as an aware UTC datetime."""
        return [TimestampedMessage(m, datetime_of_ms(m.created_at)) for m in self.load(key)]

    def _read_page(self, key: str, limit: int, before: str | None, after: str | None, reading: Reading,
                   breakpoint: bool, whole_turns: bool) -> Page:
        raise NotImplementedError

    def page(
        self,
        key: str,
        *,
        limit: int = 100,
        before: str | None = None,
        after: str | None = None,
        ts_before: int | None = None,
        breakpoint: bool = False,
        whole_turns: bool = False,
    ) -> Page:
        """One page of messages, oldest first, with the JSONL backend's semantics (see
        :meth:`jsonl_sessions.SessionStore.page`): no cursor = the ``limit`` newest,
        ``before=id`` = the ``limit`` newest older than it, ``after=id`` = the ``limit``
        oldest newer than it (``after=""``: from the first); ``ts_before``, ``breakpoint``
        and ``whole_turns`` filter, cut and widen the same way. Raises
        :class:`SessionNotFoundError`, :class:`MessageNotFoundError` (unknown cursor),
        ValueError (``limit < 1``, both cursors). One read transaction. Cost: O(log n) to
        find a cursor plus O(page) rows (``ts_before`` reads the rows it skips)."""
        validate_key(key)  # the key first, as every backend checks it
        check_page_arguments(limit, before, after, ts_before)
        reading = Reading(ts_before)
        got = self._read_page(key, limit, before, after, reading, breakpoint, whole_turns)
        if reading.bad:
            first = min(reading.bad)
            rows.log.warning("skipped %d corrupt row(s) of session %r in %s; first at line %d: %s",
                             len(reading.bad), key, self._path, first + 1, reading.bad[first])
        return got

    # -- writing ---------------------------------------------------------------------------
    def append(self, key: str, message: MessageLike) -> str:
        """Append one message (creating the session if needed); its id. One transaction,
        durable on return in fsync mode. SerializationError / InvalidMessageError /
        DuplicateMessageError with nothing written. Cost: O(log n)."""
        return self.append_many(key, (message,))[0]

    def append_message(self, key: str, message: MessageLike) -> str:
        """The same as :meth:`append`."""
        return self.append_many(key, (message,))[0]

    def replace_conversation_state(self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool) -> None:
        """Replace the messages and the trim-breadcrumb flag in one transaction (one
        crash-atomic unit). Creates the session if needed."""
        self._replace_state(key, messages, breadcrumb_present, if_exists=False)

    def replace_conversation_state_if_exists(
        self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool
    ) -> bool:
        """Like :meth:`replace_conversation_state`, but only while the session exists: False,
        nothing written, when it does not (a deleted session is never recreated: the check
        and the writes are one transaction)."""
        return self._replace_state(key, messages, breadcrumb_present, if_exists=True)

    # -- rows and metadata -------------------------------------------------------------------
    def _rows(self, c: Any, sid: int, start: int = 0, stop: int | None = None) -> list[tuple[int, bytes]]:
        raise NotImplementedError

    def _offset_of(self, c: Any, sid: int, seq: int) -> int:
        raise NotImplementedError

    def _check_clean(self, c: Any, s: Any, start: int = 0) -> int:
        """Refuse (:class:`CorruptTranscriptError`) to drop rows of session row ``s`` from
        ``start`` on when one of them does not parse: it would be destroyed. The number of
        rows. O(rows)."""
        return len(self._strict(c, s, self._rows(c, s.id, start)))

    def _strict(self, c: Any, s: Any, data: list[tuple[int, bytes]]) -> list[ChatMessage]:
        """The messages of rows ``data`` (consecutive ``(seq, line)``), or
        :class:`CorruptTranscriptError` naming the first that does not parse (its byte
        offset computed only then, by ``_offset_of``)."""
        try:
            return rows.decode_rows(data, key=s.key, path=self._path, strict=True)
        except CorruptTranscriptError as exc:
            if not data or not data[0][0]:
                raise
            base = self._offset_of(c, s.id, data[0][0])
            raise rows.corrupt(s.key, self._path, (exc.line or 1) - 1, base + (exc.offset or 0),
                               exc.reason or "") from None

    def _compacted(self, key: str, data: list[tuple[int, bytes]], repair: bool, quarantine: Callable[[], str],
                   replace: Callable[[list[bytes]], None]) -> CompactionReport:
        """The body of ``compaction_report`` over a session's rows ``data``: the plan; a
        problem refused (:class:`CorruptTranscriptError`) unless ``repair``, then
        ``quarantine()`` keeps every row and says where; ``replace(lines)`` rewrites the
        session when rows are dropped."""
        plan = plan_lines(line for _seq, line in data)
        saved = None
        if plan.problem is not None:
            p = plan.problem
            if not repair:
                raise CorruptTranscriptError(key=key, path=self._path, line=p.line, offset=p.offset, reason=p.reason)
            saved = quarantine()
        if plan.dropped:
            replace([line[:-1] for line in plan.kept])
        return CompactionReport(key, plan, saved, False)

    def _meta(self, s: Any) -> dict[str, Any]:
        """The metadata object of session row ``s`` (``key``, ``meta``); CorruptMetadataError."""
        return rows.decode_meta(s.meta, s.key, self._path)

    def _encode(self, key: str, records: Iterable[dict[str, Any]]) -> list[bytes]:
        """The lines of ``records`` (without newlines). SerializationError /
        InvalidMessageError (over ``max_message_bytes``, counting the newline)."""
        return [line[:-1] for line in codec.encode_records(records, key, self._max_message_bytes)]

    @staticmethod
    def _describe(s: Any, meta: Mapping[str, Any] | None) -> SessionMetadata:
        return sidecar.describe(s.key, meta, s.count, s.size, s.activity_ns)

    def _write_meta(self, c: Any, s: Any, meta: dict[str, Any]) -> None:
        raise NotImplementedError

    def _create(self, c: Any, key: str, meta: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def _replace_rows(self, c: Any, sid: int, lines: Sequence[bytes],
                      records: Sequence[dict[str, Any]] | None = None) -> None:
        raise NotImplementedError

    def _replace_state_in(self, c: Any, key: str, s: Any, msgs: Sequence[ChatMessage], breadcrumb: bool,
                          if_exists: bool) -> bool:
        """The body of ``replace_conversation_state(_if_exists)`` inside the caller's write
        transaction, ``s`` the session's row (None: missing). The session is checked before
        the messages: with ``if_exists`` a missing one is False, never an error about them."""
        if if_exists and s is None:
            return False
        records = assign_ids(key, msgs, None, self._clock())
        lines = self._encode(key, records)
        if s is None:
            sid = self._create(c, key, sidecar.new_sidecar(key, self._clock(), bool(breadcrumb)))
        else:
            self._check_clean(c, s)
            meta = self._meta(s)
            meta["trim_breadcrumb"] = bool(breadcrumb)
            self._write_meta(c, s, meta)
            sid = s.id
        self._replace_rows(c, sid, lines, records)
        return True

    def _session(self, c: Any, key: str) -> Any:
        raise NotImplementedError

    def _last_id(self, c: Any, sid: int) -> str | None:
        raise NotImplementedError

    def _find_valid(self, c: Any, s: Any, message_id: str) -> int:
        raise NotImplementedError

    def _fork_target(self, c: Any, src: Any, target: str, up_to_message_id: str | None) -> tuple[int, str | None, int]:
        """The first half of ``copy_messages`` inside the caller's write transaction, ``src``
        the source's row: :class:`SessionExistsError` when ``target`` exists; the end of the
        copied positions and the fork point (:class:`MessageNotFoundError` /
        :class:`CorruptTranscriptError` for ``up_to_message_id``); the target created with
        ``parent``, ``fork_point`` and the source's breadcrumb flag. Returns ``(end,
        fork_point, target's id)``."""
        if self._session(c, target) is not None:
            raise SessionExistsError(key=target)
        if up_to_message_id is None:
            end = src.count
            fork_point = self._last_id(c, src.id)
        else:
            end = self._find_valid(c, src, up_to_message_id) + 1
            fork_point = up_to_message_id
        meta = sidecar.new_sidecar(target, self._clock(), self._meta(src).get("trim_breadcrumb"))
        meta["parent"] = src.key
        meta["fork_point"] = fork_point
        return end, fork_point, self._create(c, target, meta)

    def _reattributed(self, c: Any, found: Iterable[tuple[Any, dict[str, Any] | None]], old: str,
                      new: str | None) -> int:
        """Set ``agent_alias`` from ``old`` to ``new`` on the sessions of ``found`` (rows with
        their metadata; None: unreadable, left alone) inside the caller's transaction; the
        number changed."""
        changed = 0
        for s, meta in found:
            if meta is None or sidecar.text(meta, "agent_alias") != old:
                continue
            meta["agent_alias"] = new
            self._write_meta(c, s, meta)
            changed += 1
        return changed

    def list_sessions_with_metadata(self) -> list[SessionMetadata]:
        """Every session's metadata, in key order (one snapshot). O(sessions)."""
        return self._where(lambda _meta: True)

    def compact(self, key: str, *, repair: bool = False) -> int:
        """Drop exact duplicates (a row with the same id and bytes as an earlier one; rows
        without an id are never duplicates); the number of rows dropped (0: nothing
        written). Order and bytes of the rest are kept.

        Refuses, with :class:`CorruptTranscriptError` naming the first such row and nothing
        changed, a session holding a row that does not parse or a second row with an
        earlier row's id but other bytes, unless ``repair=True``: then every row of the
        session is first copied to the ``quarantine`` table (with the key and the time;
        never removed by the store; logged) and the rewrite keeps every row that parses (of
        rows sharing an id, the first). One transaction. :class:`SessionNotFoundError` for a
        missing session. Cost: O(rows)."""
        report = self.compaction_report(key, repair=repair)
        if report.quarantine is not None:
            rows.log.warning("compact(repair=True) of session %r: its original rows are kept in %s", key,
                             report.quarantine)
        return report.dropped


__all__ = ["DatabaseFront", "usable_id"]
