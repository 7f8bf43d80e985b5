"""The optional full-text index of the PostgreSQL store: a ``pg_trgm`` GIN index on the
``folded`` column of ``messages`` (each message's searchable text, case-folded by Python's
``str.casefold`` when the row was written).

``search_messages`` always asks the server for the rows whose ``folded`` text holds every
term (``folded LIKE '%term%'``, a superset of the matches) and confirms each with the exact
matcher; with this index the server answers those ``LIKE`` conditions from trigrams
instead of reading every row (terms of three characters or more; shorter ones are read
from the rows). PostgreSQL keeps the index current in every write's own transaction, so
it is never behind, and a crash leaves it as consistent as the table. Without the
``pg_trgm`` extension (not installed, or not allowed to create it) :func:`build` says so
and searches go on without the index: never an error at search time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

INDEX = "messages_folded_trgm"


@dataclass
class Status:
    exists: bool
    #: Why there is no index when building one failed (no pg_trgm, no privilege), else None.
    problem: str | None = None
    bytes: int = 0


def _name(store: Any) -> str:
    return f"{store._s}.{INDEX}"


def status(store: Any) -> Status:
    """Whether the index exists, and its size."""
    def read(c: Any) -> Status:
        row = c.execute("SELECT to_regclass(%s)", (_name(store),)).fetchone()
        if row is None or row[0] is None:
            return Status(False)
        size = c.execute("SELECT pg_relation_size(to_regclass(%s))", (_name(store),)).fetchone()
        return Status(True, None, int(size[0]) if size else 0)

    return store._db.read(read)  # type: ignore[no-any-return]


def build(store: Any, *, rebuild: bool = False) -> Status:
    """Create ``pg_trgm`` when missing (it needs the privilege to) and the index (again with
    ``rebuild``); a :class:`Status` whose ``problem`` says why not, nothing changed then."""
    def create(c: Any) -> None:
        if c.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone() is None:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        if rebuild:
            c.execute(f"DROP INDEX IF EXISTS {_name(store)}")
        c.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON {store._s}.messages USING gin (folded gin_trgm_ops)")

    try:
        store._db.write([], create)
    except psycopg.Error as exc:
        return Status(False, f"cannot create the pg_trgm index: {str(exc).strip()}")
    return status(store)


def drop(store: Any) -> bool:
    """Remove the index; whether it existed."""
    had = status(store).exists
    store._db.write([], lambda c: c.execute(f"DROP INDEX IF EXISTS {_name(store)}"))
    return had


__all__ = ["INDEX", "Status", "build", "drop", "status"]
