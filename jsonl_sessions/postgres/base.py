"""The core of the PostgreSQL backend: opening the store, ids, append / load / rewrite /
replace / clear / delete.

Every mutation is one transaction holding the session's guard (see :mod:`.db`): all or
nothing, also when the client is killed or its connection is terminated mid-transaction
(the server rolls it back); in fsync mode (``synchronous_commit = on``) durable on the
server when it returns. Reads run in one ``REPEATABLE READ READ ONLY`` transaction and see
one committed snapshot without waiting for writers.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from psycopg_pool import ConnectionPool

from .. import codec, records, rows, sidecar
from ..base import DEFAULT_MAX_MESSAGE_BYTES
from ..dbfront import DatabaseFront
from ..ids import assign_ids, replacement_record
from ..keys import validate_key
from ..listing import Listing
from ..types import ChatMessage, Durability
from .db import Conn, Database, bigint_array, lit, quoted, text_array
from .schema import SCHEMA_VERSION, current_version, upgrade

_INT64 = 2**63
_T = TypeVar("_T")


class SessionRow:
    """A session's row: its id, counters, meta (JSON text) and activity time."""

    __slots__ = ("activity_ns", "count", "id", "key", "meta", "size")

    def __init__(self, key: str, row: Sequence[Any]) -> None:
        self.key = key
        self.id, self.meta, self.count, self.size, self.activity_ns = row


_NUL_ESCAPE = re.compile("\x01(.)", re.DOTALL)


def nul_free(text: str | None) -> str | None:
    """``text`` as a ``text`` value: PostgreSQL's ``text`` cannot hold NUL, so a value
    holding NUL or U+0001 is escaped (U+0001 -> U+0001 U+0001, NUL -> U+0001 U+0002),
    reversibly and injectively: equal values stay equal, others stay apart."""
    if text is None or ("\x00" not in text and "\x01" not in text):
        return text
    return text.replace("\x01", "\x01\x01").replace("\x00", "\x01\x02")


def nul_back(text: str | None) -> str | None:
    """The value :func:`nul_free` escaped."""
    if text is None or "\x01" not in text:
        return text
    return _NUL_ESCAPE.sub(lambda m: "\x00" if m.group(1) == "\x02" else m.group(1), text)


def folded(line: bytes) -> str | None:
    """The searchable text of a line, case-folded (``str.casefold``), parts joined by a
    newline; None when the line does not parse or the text holds a NUL (``text`` cannot),
    which makes search read the line itself."""
    found = records.decode_or_none(line)
    if found is None:
        return None
    text = "\n".join(t.casefold() for t in records.texts(found.get("content")))
    return None if "\x00" in text else text


def columns(line: bytes, record: Mapping[str, Any] | None = None) -> tuple[Any, ...]:
    """The index columns of a line (``id, created_at, role, kind``; from ``record`` when
    given), then the line as text and its folded text. An id of "" is stored as NULL (the
    unique id index then ignores it); a ``created_at`` past bigint is clamped to its
    largest value, as the SQLite backend does (the line keeps the exact value); text
    columns go through :func:`nul_free`."""
    if record is None:
        mid, created, role, kind = rows.index_of(line)
    else:
        mid, created, role, kind = record["id"], record["created_at"], record["role"], record["kind"]
    if not isinstance(created, int) or created < -_INT64:
        created = None
    created = rows.created_column(created)
    return nul_free(mid or None), created, nul_free(role), nul_free(kind), line.decode("utf-8"), folded(line)


class PostgresCore(DatabaseFront):
    """A session store in a PostgreSQL schema: the core (see :class:`PostgresSessionStore`)."""

    _db: Database

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: ConnectionPool[Any] | None = None,
        schema: str = "jsonl_sessions",
        durability: Durability = "fsync",
        lock_timeout: float | None = 30.0,
        statement_timeout: float | None = 60.0,
        connect_timeout: float = 10.0,
        pool_size: int = 10,
        prepare_threshold: int | None = 5,
        keepalives_idle: int = 30,
        application_name: str = "jsonl_sessions",
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._options(durability, lock_timeout, max_message_bytes, clock)
        if not isinstance(schema, str) or not schema or "\x00" in schema or len(schema.encode()) > 63:
            raise ValueError(f"schema must be a PostgreSQL name (1 to 63 bytes, no NUL), not {schema!r}")
        if pool_size < 1:
            raise ValueError("pool_size must be >= 1")
        self._schema = schema
        self._s = quoted(schema)
        self._db = Database(dsn, pool, schema=schema, durability=durability, lock_timeout=lock_timeout,
                            statement_timeout=statement_timeout, connect_timeout=connect_timeout,
                            pool_size=pool_size, prepare_threshold=prepare_threshold,
                            keepalives_idle=keepalives_idle, application_name=application_name)
        self._path = f"{self._db.dsn} schema {schema}"
        try:
            if self._db.read(lambda c: current_version(c, self._s, schema)) != SCHEMA_VERSION:
                self._migrate()
        except BaseException:
            self._db.close()
            raise

    def _migrate(self) -> None:
        pool = self._db.pool()
        with pool.connection() as conn:
            upgrade(conn, self._s, self._schema, self._path)

    # -- properties ----------------------------------------------------------------------
    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the store's tables."""
        return self._schema

    # -- guard ---------------------------------------------------------------------------
    def lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        # see the class docstring and .db for the design; a bad key raises here, not at `with`
        validate_key(key)
        return self._db.guard(key)

    # -- rows ------------------------------------------------------------------------------
    # -- listing ---------------------------------------------------------------------------
    _LIST_KEY = 'key COLLATE "C"'  # code point order, as Python's str (the default collation may not be)
    _MARK = "%s"

    @property
    def _sessions_table(self) -> str:
        return f"{self._s}.sessions"

    def _row(self, key: str, columns: Sequence[Any]) -> SessionRow:
        return SessionRow(key, columns)

    def _list_filters(self, listing: Listing) -> tuple[list[str], list[Any]]:
        # agent_alias and state are columns every writer copies from the metadata object
        where, args = super()._list_filters(listing)
        if listing.agent_alias is not None:
            where.append("agent_alias = %s")
            args.append(nul_free(listing.agent_alias))
        if listing.state is not None:
            where.append("state = %s")
            args.append(listing.state)
        return where, args

    def _read(self, fn: Callable[[Conn], _T]) -> _T:
        return self._db.read(fn)

    def _write(self, key: str, fn: Callable[[Conn], _T]) -> _T:
        return self._db.write([key], fn)

    def _locked(self, c: Conn, key: str) -> SessionRow | None:
        return self._session(c, key, for_update=True)

    def _session(self, c: Conn, key: str, *, for_update: bool = False) -> SessionRow | None:
        row = c.execute(f"SELECT id, meta, message_count, size_bytes, activity_ns FROM {self._s}.sessions "
                        f"WHERE key = %s{' FOR UPDATE' if for_update else ''}", (key,)).fetchone()
        return None if row is None else SessionRow(key, row)

    def _rows(self, c: Conn, sid: int, start: int = 0, stop: int | None = None) -> list[tuple[int, bytes]]:
        """``(seq, line)`` of the rows at positions ``[start, stop)``, in order."""
        if stop is None:
            got = c.execute(f"SELECT seq, line FROM {self._s}.messages WHERE session = %s AND seq >= %s ORDER BY seq",
                            (sid, start))
        else:
            got = c.execute(f"SELECT seq, line FROM {self._s}.messages WHERE session = %s AND seq >= %s AND seq < %s "
                            "ORDER BY seq", (sid, start, stop))
        return [(seq, line.encode()) for seq, line in got]

    def _offset_of(self, c: Conn, sid: int, seq: int) -> int:
        """The byte offset of row ``seq`` in the session's export. O(seq): error paths only."""
        row = c.execute(f"SELECT coalesce(sum(octet_length(line) + 1), 0) FROM {self._s}.messages "
                        "WHERE session = %s AND seq < %s", (sid, seq)).fetchone()
        return int(row[0]) if row else 0

    def _last_id(self, c: Conn, sid: int, before: int | None = None) -> str | None:
        """The newest ULID of the session (of the rows before position ``before``), the id
        new ids are made after (None: none); ids that are not ULIDs are passed over. O(log n)
        (plus the rows passed over)."""
        row = c.execute(f"SELECT id FROM {self._s}.messages WHERE session = %s AND seq < %s AND id ~ %s "
                        "ORDER BY seq DESC LIMIT 1", (sid, _INT64 - 1 if before is None else before,
                                                      rows.ULID_REGEX)).fetchone()
        return None if row is None else nul_back(row[0])

    def _has_id(self, c: Conn, sid: int, message_id: str) -> bool:
        # md5(id): the id index (see .schema)
        mid = nul_free(message_id)
        return c.execute(f"SELECT 1 FROM {self._s}.messages WHERE session = %s AND md5(id) = md5(%s) AND id = %s",
                         (sid, mid, mid)).fetchone() is not None

    def _insert(self, c: Conn, sid: int, first_seq: int, lines: Sequence[bytes],
                recs: Sequence[Mapping[str, Any]] | None = None) -> None:
        # in one statement
        if not lines:
            return
        cols = [columns(line, None if recs is None else recs[i]) for i, line in enumerate(lines)]
        c.execute(f"INSERT INTO {self._s}.messages (session, seq, id, created_at, role, kind, line, folded) "
                  "SELECT %s, %s + n - 1, i, t, r, k, l, f FROM unnest(%s::text[], %s::bigint[], %s::text[], "
                  "%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS u(i, t, r, k, l, f, n)",
                  (sid, first_seq, *map(list, zip(*cols))))

    def _create(self, c: Conn, key: str, meta: Mapping[str, Any]) -> int:
        row = c.execute(f"INSERT INTO {self._s}.sessions (key, meta, agent_alias, principal_id, state, activity_ns) "
                        "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id", (key, *self._meta_columns(meta),
                                                                       time.time_ns())).fetchone()
        assert row is not None
        return int(row[0])

    @staticmethod
    def _meta_columns(meta: Mapping[str, Any]) -> tuple[str, str | None, str | None, str | None]:
        """The ``meta`` text and the columns copied from it."""
        return (rows.encode_meta(meta).decode(), nul_free(sidecar.text(meta, "agent_alias")),
                nul_free(sidecar.text(meta, "principal_id")), nul_free(sidecar.state(meta)))

    def _set_counts(self, c: Conn, sid: int, count: int, size: int, activity_ns: int | None = None) -> None:
        c.execute(f"UPDATE {self._s}.sessions SET message_count = %s, size_bytes = %s, activity_ns = %s WHERE id = %s",
                  (count, size, time.time_ns() if activity_ns is None else activity_ns, sid))

    def _replace_rows(self, c: Conn, sid: int, lines: Sequence[bytes],
                      recs: Sequence[Mapping[str, Any]] | None = None) -> None:
        c.execute(f"DELETE FROM {self._s}.messages WHERE session = %s", (sid,))
        self._insert(c, sid, 0, lines, recs)
        self._set_counts(c, sid, len(lines), rows.sizes(lines))

    def _write_meta(self, c: Conn, s: SessionRow, meta: dict[str, Any]) -> None:
        meta["updated_at"] = self._clock()
        c.execute(f"UPDATE {self._s}.sessions SET meta = %s, agent_alias = %s, principal_id = %s, state = %s, "
                  "activity_ns = %s WHERE id = %s", (*self._meta_columns(meta), time.time_ns(), s.id))

    def _newest(self, c: Conn, s: SessionRow) -> tuple[int, bytes, dict[str, Any]] | None:
        """``(seq, line, record)`` of the newest row; None when there is none. A row that does
        not parse raises :class:`CorruptTranscriptError`. O(log n)."""
        row = c.execute(f"SELECT seq, line FROM {self._s}.messages WHERE session = %s ORDER BY seq DESC LIMIT 1",
                        (s.id,)).fetchone()
        if row is None:
            return None
        seq, text = row
        line = text.encode()
        try:
            return seq, line, codec.decode_record(line)
        except ValueError as exc:
            # summed from the rows before it: size_bytes goes stale when another tool edits a row
            raise rows.corrupt(s.key, self._path, seq, self._offset_of(c, s.id, seq), str(exc)) from None

    # -- reading ---------------------------------------------------------------------------
    def _load(self, key: str, *, strict: bool) -> list[ChatMessage]:
        def read(c: Conn) -> list[tuple[int, bytes]]:
            got = c.execute(f"SELECT m.seq, m.line FROM {self._s}.messages m JOIN {self._s}.sessions s "
                            "ON m.session = s.id WHERE s.key = %s ORDER BY m.seq", (key,))
            return [(seq, line.encode()) for seq, line in got]

        return rows.decode_rows(self._db.read(read), key=key, path=self._path, strict=strict)

    def session_exists(self, key: str) -> bool:
        # O(log sessions)
        validate_key(key)
        return bool(self._db.read_one(f"SELECT 1 FROM {self._s}.sessions WHERE key = {lit(key)}"))

    def list_sessions(self) -> list[str]:
        # sorted by Python's string order: O(sessions)
        return sorted(k for (k,) in self._db.read_one(f"SELECT key FROM {self._s}.sessions"))

    # -- appending -------------------------------------------------------------------------
    def _append_many(self, key: str, msgs: list[ChatMessage]) -> list[str]:
        # Ids come from the session's last id under the guard (never from the server's
        # clock), so they strictly increase whatever machine appends.
        s = self._s
        first = (f"SELECT x.id, x.message_count, x.size_bytes, (SELECT m.id FROM {s}.messages m WHERE m.session = x.id "
                 f"AND m.id ~ {lit(rows.ULID_REGEX)} ORDER BY m.seq DESC LIMIT 1) FROM {s}.sessions x WHERE x.key = {lit(key)} "
                 "FOR UPDATE OF x")

        def write(c: Conn, row: Any) -> tuple[list[dict[str, Any]], str]:
            # Two round trips: the session row and its last id come with BEGIN and the lock;
            # the rows, the counters (or the new session) go with COMMIT.
            if row is None:
                recs = assign_ids(key, msgs, None, self._clock())
                lines = self._encode(key, recs)
                meta = self._meta_columns(sidecar.new_sidecar(key, self._clock()))
                return recs, (f"WITH x AS (INSERT INTO {s}.sessions (key, meta, agent_alias, principal_id, state, "
                              f"message_count, size_bytes, activity_ns) VALUES ({lit(key)}, "
                              f"{', '.join(map(lit, meta))}, {len(lines)}, {rows.sizes(lines)}, {time.time_ns()}) "
                              f"RETURNING id) {self._insert_sql('x.id', 0, lines, recs, 'x, ')}")
            sid, count, size, last = row
            recs = assign_ids(key, msgs, nul_back(last), self._clock(), lambda mid: self._has_id(c, sid, mid))
            lines = self._encode(key, recs)
            return recs, (f"WITH i AS ({self._insert_sql(str(int(sid)), count, lines, recs)}) UPDATE {s}.sessions "
                          f"SET message_count = {count + len(lines)}, size_bytes = {size + rows.sizes(lines)}, "
                          f"activity_ns = {time.time_ns()} WHERE id = {int(sid)}")

        return [r["id"] for r in self._db.write_in_two([key], first, write)]

    def _insert_sql(self, sid: str, first_seq: int, lines: Sequence[bytes], recs: Sequence[Mapping[str, Any]],
                    source: str = "") -> str:
        """The INSERT of ``lines`` at positions ``first_seq...`` of session ``sid`` (an SQL
        expression), values inlined as literals (see :meth:`_insert` for the columns)."""
        mids, created, roles, kinds, texts, folds = zip(*(columns(line, rec) for line, rec in zip(lines, recs)))
        arrays = ", ".join([text_array(mids), bigint_array(created), text_array(roles), text_array(kinds),
                            text_array(texts), text_array(folds)])
        return (f"INSERT INTO {self._s}.messages (session, seq, id, created_at, role, kind, line, folded) "
                f"SELECT {sid}, {int(first_seq)} + n - 1, i, t, r, k, l, f FROM {source}unnest({arrays}) "
                "WITH ORDINALITY AS u(i, t, r, k, l, f, n)")

    # -- changing the end ------------------------------------------------------------------
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        # one DELETE ... RETURNING of the newest row and the counters: O(log n)
        validate_key(key)
        if expected_id is not None and not isinstance(expected_id, str):
            return False

        class _Mismatch(Exception):
            pass

        def write(c: Conn) -> bool:
            row = c.execute(
                f"WITH s AS (SELECT id, size_bytes FROM {self._s}.sessions WHERE key = %(key)s FOR UPDATE), "
                f"d AS (DELETE FROM {self._s}.messages m USING s WHERE m.session = s.id AND m.seq = "
                f"(SELECT max(seq) FROM {self._s}.messages WHERE session = s.id) "
                "AND (%(exp)s::text IS NULL OR m.id IS NULL OR m.id = %(exp)s) RETURNING m.session, m.seq, m.line), "
                f"u AS (UPDATE {self._s}.sessions x SET message_count = message_count - 1, "
                "size_bytes = x.size_bytes - octet_length(d.line) - 1, activity_ns = %(now)s FROM d "
                "WHERE x.id = d.session RETURNING x.size_bytes) "
                "SELECT d.seq, d.line, s.id FROM d, s",
                {"key": key, "exp": nul_free(expected_id), "now": time.time_ns()}).fetchone()
            if row is None:
                return False
            seq, text, sid = row
            line = text.encode()
            try:
                record = codec.decode_record(line)
            except ValueError as exc:  # rolled back; its offset summed from the rows before it
                raise rows.corrupt(key, self._path, seq, self._offset_of(c, sid, seq), str(exc)) from None
            if expected_id is not None and (record.get("id") or "") != expected_id:
                raise _Mismatch  # a row stored without its id column (repeated id): not the expected one
            return True

        try:
            return self._db.write([key], write)
        except _Mismatch:
            return False

    def _update_last(self, key: str, m: ChatMessage, expected_id: str | None) -> bool:
        # One transaction: the newest row is read under the guard, then one
        # UPDATE ... RETURNING replaces it and the counters. O(log n).
        def write(c: Conn) -> bool:
            s = self._session(c, key, for_update=True)
            newest = None if s is None else self._newest(c, s)
            if s is None or newest is None:
                return False
            seq, old_line, old = newest
            old_id = old.get("id") or ""
            if expected_id is not None and old_id != expected_id:
                return False
            sid = s.id
            rec = replacement_record(key, m, old, self._clock, lambda: self._last_id(c, sid, seq),
                                     lambda mid: mid != old_id and self._has_id(c, sid, mid))
            line = self._encode(key, [rec])[0]
            mid, created, role, kind, text, fold = columns(line, rec)
            c.execute(f"WITH u AS (UPDATE {self._s}.messages SET id = %s, created_at = %s, role = %s, kind = %s, "
                      "line = %s, folded = %s WHERE session = %s AND seq = %s RETURNING 1) "
                      f"UPDATE {self._s}.sessions SET size_bytes = size_bytes + %s, activity_ns = %s "
                      "WHERE id = %s AND EXISTS (SELECT 1 FROM u)",
                      (mid, created, role, kind, text, fold, sid, seq, len(line) - len(old_line), time.time_ns(), sid))
            return True

        return self._db.write([key], write)

    # -- replacing everything --------------------------------------------------------------
    def _rewrite(self, key: str, msgs: list[ChatMessage]) -> None:
        recs = assign_ids(key, msgs, None, self._clock())
        lines = self._encode(key, recs)

        def write(c: Conn) -> None:
            s = self._session(c, key, for_update=True)
            if s is None:
                sid = self._create(c, key, sidecar.new_sidecar(key, self._clock()))
            else:
                self._check_clean(c, s)
                sid = s.id
            self._replace_rows(c, sid, lines, recs)

        self._db.write([key], write)

    def _session_row(self, key: str) -> SessionRow | None:
        # one round trip
        found = self._db.read_one(f"SELECT id, meta, message_count, size_bytes, activity_ns FROM {self._s}.sessions "
                                  f"WHERE key = {lit(key)}")
        return SessionRow(key, found[0]) if found else None

    # -- clearing and deleting -------------------------------------------------------------
    def delete_session(self, key: str) -> bool:
        # its messages go with it (ON DELETE CASCADE)
        validate_key(key)
        return self._db.write([key], lambda c: c.execute(f"DELETE FROM {self._s}.sessions WHERE key = %s RETURNING 1",
                                                         (key,)).fetchone() is not None)


__all__ = ["PostgresCore", "SessionRow", "columns", "folded", "nul_back", "nul_free"]
