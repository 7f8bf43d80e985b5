"""What the database backends' stores (SQLite, PostgreSQL) share beyond
:class:`~jsonl_sessions.base.BaseStore`: the store object's ``path``; the transactions of
one session written once over ``_write`` (a write transaction under the key's guard) and
``_locked`` (the session's row, kept from other writers): compaction report, metadata
update, clear, replace, import; over ``_read`` (one snapshot): export, the metadata
listing; rows decoded with their export offsets; metadata objects read from session rows;
encoding with the size limit; and the bodies of fork and re-attribution inside the
caller's transaction. Each backend's core class inherits
:class:`DatabaseFront` and provides the primitives named below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from . import codec, rows, sidecar
from .base import BaseStore, Keep
from .compaction import CompactionReport, plan_lines
from .errors import CorruptMetadataError, CorruptTranscriptError, SessionExistsError, SessionNotFoundError
from .ids import assign_ids
from .keys import validate_key
from .listing import Listing, keeps, page
from .pagination import Reading
from .types import ChatMessage, Page, SessionList, SessionMetadata

_T = TypeVar("_T")


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


@dataclass(frozen=True)
class SessionSnapshot:
    """A whole session as stored: its lines (exact bytes, no newlines, oldest first), its
    metadata object and its last activity (ns since the epoch). What a migration copies."""

    key: str
    lines: list[bytes]
    meta: dict[str, Any]
    activity_ns: int


class DatabaseFront(BaseStore):
    """Shared methods of the database backends' stores. A backend provides ``_db`` (with
    ``close()``), ``_path`` (what errors name), ``_durability``, ``_max_message_bytes``,
    ``_clock``, the primitives of :class:`BaseStore` not defined here, ``_update`` and
    ``compaction_report``."""

    _db: Any
    _path: str
    _max_message_bytes: int

    def _read(self, fn: Callable[[Any], _T]) -> _T:
        """``fn(connection)`` in one read transaction (one snapshot)."""
        raise NotImplementedError

    def _write(self, key: str, fn: Callable[[Any], _T]) -> _T:
        """``fn(connection)`` in one write transaction holding ``key``'s guard: committed
        when it returns, rolled back when it raises (``fn`` may run again on a retry)."""
        raise NotImplementedError

    def _locked(self, c: Any, key: str) -> Any:
        """The session's row inside a write transaction, kept from other writers until it
        ends; None when the session does not exist."""
        raise NotImplementedError

    def _quarantine(self, c: Any, key: str, data: list[tuple[int, bytes]]) -> str:
        """Keep the rows ``data`` of ``key`` in the quarantine table (with the time and a
        new repair number) inside the caller's transaction; where they are."""
        raise NotImplementedError

    def _all(self, c: Any) -> list[tuple[Any, dict[str, Any] | None]]:
        """Every session's row with its metadata object, in key order (see :meth:`_with_meta`)."""
        raise NotImplementedError

    def _set_counts(self, c: Any, sid: int, count: int, size: int, activity_ns: int | None = None) -> None:
        """Set the session's message count, size and activity (None: now)."""
        raise NotImplementedError

    def _where(self, keep: Keep) -> list[SessionMetadata]:
        return [self._describe(s, meta) for s, meta in self._read(self._all) if keep(meta)]

    # -- listing ------------------------------------------------------------------------------
    #: The SQL value of each sort the database orders by itself: the row's own columns
    #: (``updated_at`` is the activity in whole microseconds, as the metadata shows it).
    #: ``name`` and ``created_at`` live inside the metadata object, whose typed reading
    #: (a value of the wrong type, an unreadable object) is Python's: those are ordered in
    #: Python over one read of every row.
    _LIST_ORDER: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"updated_at": "activity_ns / 1000", "message_count": "message_count"})
    #: The key as SQL orders it by code point, as Python's str does.
    _LIST_KEY = "key"
    #: The parameter marker of the driver.
    _MARK = "?"

    @property
    def _sessions_table(self) -> str:
        """The table of sessions, as SQL names it."""
        return "sessions"

    def _list_filters(self, listing: Listing) -> tuple[list[str], list[Any]]:
        """SQL conditions (with their arguments) that every session ``listing`` keeps
        meets: they may let more through (each is checked again on the metadata), never
        fewer. Here: ``updated_since`` on the activity column."""
        if listing.updated_since is None:
            return [], []
        # updated_at >= since at microsecond precision, i.e. activity_ns // 1000 >= since
        return [f"activity_ns >= {self._MARK}"], [listing.updated_since * 1000]

    def _list(self, listing: Listing) -> SessionList:
        """The page in SQL when the sort is a column: ``WHERE`` (filters, and the keyset
        ``(value, key)`` past the cursor) ``ORDER BY value, key LIMIT``, in batches inside
        one read transaction until the page is full; each row is checked against the
        filters on its decoded metadata. An index on ``(activity_ns / 1000, key)`` and one
        on the key serve the sidebar's listings (no filter on the metadata object): then
        the cost is O(limit + offset) rows."""
        expr = self._LIST_KEY if listing.sort == "key" else self._LIST_ORDER.get(listing.sort)
        if expr is None:
            return super()._list(listing)
        return self._read(lambda c: self._list_rows(c, listing, expr))

    def _list_rows(self, c: Any, listing: Listing, expr: str) -> SessionList:
        mark, key = self._MARK, self._LIST_KEY
        direction = " DESC" if listing.descending else ""
        conditions, arguments = self._list_filters(listing)
        head = (f"SELECT key, id, meta, message_count, size_bytes, activity_ns, {expr} FROM {self._sessions_table}")
        order = f" ORDER BY {expr}{direction}, {key}{direction}"
        want = None if listing.limit is None else listing.offset + listing.limit + 1
        position = listing.after
        batch = want
        kept: list[SessionMetadata] = []
        while True:
            where = list(conditions)
            args = list(arguments)
            if position is not None:
                # (value, key) past the position, spelled so that SQLite seeks the index
                # (a row-value comparison on an expression scans it from its start)
                op = "<" if listing.descending else ">"
                where.append(f"{expr} {op}= {mark} AND ({expr} {op} {mark} OR {key} {op} {mark})")
                args.extend((position[0], position[0], position[1]))
            sql = head + (" WHERE " + " AND ".join(where) if where else "") + order
            if batch is not None:
                sql += f" LIMIT {int(batch)}"
            found = c.execute(sql, args).fetchall()
            for row in found:
                s = self._row(row[0], row[1:6])
                md = self._describe(s, self._listed_meta(s))
                if keeps(listing, md):
                    kept.append(md)
            if batch is None or len(found) < batch or (want is not None and len(kept) >= want):
                break
            position = (found[-1][6], found[-1][0])
            batch = min(batch * 4, 10_000)  # the filters left sessions out: read on, in growing batches
        return page(listing, kept)

    def _row(self, key: str, columns: Sequence[Any]) -> Any:
        """A session row object from ``(id, meta, message_count, size_bytes, activity_ns)``."""
        raise NotImplementedError

    def _listed_meta(self, s: Any) -> dict[str, Any] | None:
        """The metadata object of row ``s`` for a listing (None when unreadable: logged)."""
        try:
            return self._meta(s)
        except CorruptMetadataError as exc:
            rows.log.warning("%s", exc)
            return None

    def _existing(self, c: Any, key: str) -> Any:
        """The session's row; :class:`SessionNotFoundError` when it does not exist."""
        s = self._session(c, key)
        if s is None:
            raise SessionNotFoundError(key=key)
        return s

    # -- moving whole sessions ----------------------------------------------------------------
    def export_session(self, key: str) -> SessionSnapshot | None:
        """The session as stored (one snapshot); None when it does not exist.
        :class:`CorruptMetadataError` when its meta does not parse (a copy would lose it).
        Cost: O(rows)."""
        validate_key(key)

        def read(c: Any) -> SessionSnapshot | None:
            s = self._session(c, key)
            if s is None:
                return None
            return SessionSnapshot(key, [line for _seq, line in self._rows(c, s.id)], self._meta(s), s.activity_ns)

        return self._read(read)

    def import_session(self, snapshot: SessionSnapshot) -> None:
        """Create ``snapshot.key`` holding exactly the snapshot's lines (verbatim: a line
        that does not parse stays as it is), metadata and activity time, in one
        transaction under its guard. :class:`SessionExistsError` (nothing written) when it
        exists."""
        key = validate_key(snapshot.key)
        meta = {**snapshot.meta, "key": key}

        def write(c: Any) -> None:
            if self._locked(c, key) is not None:
                raise SessionExistsError(key=key)
            sid = self._create(c, key, meta)
            self._insert(c, sid, 0, snapshot.lines)
            self._set_counts(c, sid, len(snapshot.lines), rows.sizes(snapshot.lines), snapshot.activity_ns)

        self._write(key, write)

    def _insert(self, c: Any, sid: int, first_seq: int, lines: Sequence[bytes],
                records: Sequence[dict[str, Any]] | None = None) -> None:
        """Insert ``lines`` at positions ``first_seq...``, their index columns taken from
        ``records`` (the records they encode) or, without them, decoded from the lines."""
        raise NotImplementedError

    # -- transactions of one session ----------------------------------------------------------
    def compaction_report(self, key: str, *, repair: bool = False) -> CompactionReport:
        """:meth:`compact` returning its whole report instead of a count, logging nothing:
        the plan (rows kept, rows dropped with line number, byte offset in the export and
        reason) and, after a repair, where the original rows are (``quarantine``: the
        table and the repair's number). ``recovered`` is always False (the database
        completes or undoes an interrupted transaction itself). Same errors, atomicity
        and cost."""
        validate_key(key)

        def write(c: Any) -> CompactionReport:
            s = self._locked(c, key)
            if s is None:
                raise SessionNotFoundError(key=key)
            data = self._rows(c, s.id)
            plan = plan_lines(line for _seq, line in data)
            saved = None
            if plan.problem is not None:
                p = plan.problem
                if not repair:
                    raise CorruptTranscriptError(key=key, path=self._path, line=p.line, offset=p.offset,
                                                 reason=p.reason)
                saved = self._quarantine(c, key, data)
            if plan.dropped or plan.renumbered:
                self._replace_rows(c, s.id, [line[:-1] for line in plan.kept])
            return CompactionReport(key, plan, saved, False)

        return self._write(key, write)

    def _compaction_report(self, key: str, repair: bool) -> CompactionReport:
        return self.compaction_report(key, repair=repair)

    def _update(self, key: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply ``change`` to the metadata object of an existing session in one
        transaction (:class:`SessionNotFoundError` for a missing one; an unreadable object
        raises :class:`CorruptMetadataError` and is never overwritten)."""
        def write(c: Any) -> None:
            s = self._locked(c, key)
            if s is None:
                raise SessionNotFoundError(key=key)
            meta = self._meta(s)
            change(meta)
            self._write_meta(c, s, meta)

        self._write(key, write)

    def clear_messages(self, key: str) -> int:
        validate_key(key)

        def write(c: Any) -> int:
            s = self._locked(c, key)
            if s is None:
                return 0
            count = self._check_clean(c, s)
            self._replace_rows(c, s.id, [])
            return count

        return self._write(key, write)

    def _replace_state(self, key: str, msgs: list[ChatMessage], breadcrumb: bool, *, if_exists: bool) -> bool:
        def write(c: Any) -> bool:
            s = self._locked(c, key)
            if if_exists and s is None:  # the session first: never an error about the messages then
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

        return self._write(key, write)

    def _session_row(self, key: str) -> Any:
        """The session's row (``key``, ``meta``, counters, activity) read in one snapshot;
        None when it does not exist."""
        raise NotImplementedError

    def _meta_of(self, key: str) -> dict[str, Any] | None:
        s = self._session_row(key)
        return None if s is None else self._meta(s)

    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        # O(log sessions): counts and sizes are kept in the session row
        s = self._session_row(validate_key(key))
        return None if s is None else self._describe(s, self._meta(s))

    def _with_meta(self, found: Iterable[Any]) -> list[tuple[Any, dict[str, Any] | None]]:
        """Session rows ``found`` in key order, each with its metadata object (None when it
        cannot be read: logged, so one bad session never fails a listing)."""
        out: list[tuple[Any, dict[str, Any] | None]] = []
        for s in sorted(found, key=lambda s: s.key):
            out.append((s, self._listed_meta(s)))
        return out

    def _set_field(self, key: str, name: str, value: object) -> None:
        self._update(key, lambda meta: meta.__setitem__(name, value))

    def _set_state(self, key: str, state: str, turn: str | None) -> None:
        self._update(key, lambda meta: sidecar.set_state(meta, state, turn, self._clock()))

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

    def close(self) -> None:
        # further calls raise ValueError
        self._db.close()

    # -- reading ---------------------------------------------------------------------------
    def _read_page(self, key: str, limit: int, before: str | None, after: str | None, reading: Reading,
                   breakpoint: bool, whole_turns: bool) -> Page:
        raise NotImplementedError

    def _page(self, key: str, limit: int, before: str | None, after: str | None, ts_before: int | None,
              breakpoint: bool, whole_turns: bool) -> Page:
        reading = Reading(ts_before)
        got = self._read_page(key, limit, before, after, reading, breakpoint, whole_turns)
        if reading.bad:
            first = min(reading.bad)
            # its byte offset in the session's export: summed from the rows before it, only
            # for a page with damage (O(position))
            s = self._session_row(key)
            offset = -1 if s is None else self._read(lambda c: self._offset_of(c, s.id, first))
            rows.log.warning("skipped %d corrupt row(s) of session %r in %s; first at line %d, byte offset %d: %s",
                             len(reading.bad), key, self._path, first + 1, offset, reading.bad[first])
        return got

    # -- rows and metadata -------------------------------------------------------------------
    def _rows(self, c: Any, sid: int, start: int = 0, stop: int | None = None) -> list[tuple[int, bytes]]:
        raise NotImplementedError

    def _offset_of(self, c: Any, sid: int, seq: int) -> int:
        raise NotImplementedError

    #: :meth:`_check_strict`: how many rows are decoded at a time.
    _CHECK_ROWS = 1000

    def _check_strict(self, key: str) -> int:
        """What :meth:`try_load` raises (:class:`CorruptTranscriptError` naming the row and
        its byte offset in the export), found in one read transaction :data:`_CHECK_ROWS`
        rows at a time. Cost: O(n) reading, O(_CHECK_ROWS) memory."""
        validate_key(key)

        def check(c: Any) -> int:
            s = self._session(c, key)
            if s is None:
                return 0
            start = 0
            while True:
                data = self._rows(c, s.id, start, start + self._CHECK_ROWS)
                if not data and start >= s.count:
                    return int(s.count)
                self._strict(c, s, data)
                start += self._CHECK_ROWS

        return self._read(check)

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


__all__ = ["DatabaseFront", "SessionSnapshot", "usable_id"]
