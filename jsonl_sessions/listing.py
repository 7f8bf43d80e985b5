"""The rules of ``list_sessions_with_metadata``, written once so that every backend agrees:
the argument checks, the order, the filters, the cursor, and the selection of one page
out of a full listing (what a backend without a faster way applies, and what the tests
compare every backend with).

**Order.** ``sort`` names a :class:`~jsonl_sessions.types.SessionMetadata` field: ``key``,
``updated_at``, ``created_at``, ``name`` or ``message_count``. Sessions are ordered by
``(value, key)``, ascending, or all of it reversed with ``descending``: ties on the value
are broken by the key in the same direction, so the order is total. Text compares by code
point (Python's ``str`` order, ``COLLATE "C"`` in PostgreSQL); times compare at the
microsecond the :class:`datetime` holds. A session without the value (no ``name``, no
``created_at``) comes after every session with one, in both directions, those among
themselves in key order (ascending, or descending with ``descending``).

**Filters** (all given must hold): ``state`` equals the run state; ``agent_alias`` equals
the alias; the name starts with ``name_prefix`` (case-sensitive; a session without a name
never matches); ``updated_at >= updated_since``.

**Cursor.** A listing with a ``limit`` that stopped before the end carries the cursor of
the next page: an opaque string that encodes the sort, the direction, and the sort value
and key of the last session returned. The next page holds the sessions that come after
that position in the order, read when the next page is asked for (keyset paging, not an
offset). So, walking pages by cursor, a session that exists during the whole walk and
whose sort value does not change appears exactly once, in order; sessions added meanwhile
appear when their position is after the cursor; a session whose sort value changed between
two pages (sort by ``updated_at`` and it was written) may appear a second time at its new
position or not at all. Offsets give no such guarantee (a session added before the offset
shifts the next page). A cursor names a position, not a snapshot: a session deleted
meanwhile is simply not listed, and a cursor stays valid forever (for the same sort and
direction, with any filters and limit).

Cost of :func:`select`: O(N log N) in the sessions listed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeAlias

import orjson

from .arguments import check_text
from .errors import InvalidArgumentError
from .sidecar import EPOCH
from .types import SESSION_STATES, SessionList, SessionMetadata

#: What ``sort=`` accepts.
Sort = Literal["key", "updated_at", "created_at", "name", "message_count"]
SORTS: tuple[str, ...] = ("key", "updated_at", "created_at", "name", "message_count")
#: The sorts whose value can be missing (None).
NULLABLE = frozenset({"created_at", "name"})
#: The sorts whose value is text (the others are integers: microseconds, or a count).
TEXT_SORTS = frozenset({"key", "name"})

Value: TypeAlias = "int | str | None"
_MICROSECOND = timedelta(microseconds=1)
_CURSOR_VERSION = 1


@dataclass(frozen=True)
class Listing:
    """The checked arguments of one listing call. ``after``: the position the cursor names
    (sort value, key), None without a cursor. ``updated_since``: microseconds since the
    epoch. A backend receives this, never the raw arguments."""

    sort: str = "key"
    descending: bool = False
    limit: int | None = None
    offset: int = 0
    after: tuple[Value, str] | None = None
    state: str | None = None
    agent_alias: str | None = None
    name_prefix: str | None = None
    updated_since: int | None = None

    @property
    def everything(self) -> bool:
        """Whether this is the plain listing: every session, in key order."""
        return self == _EVERYTHING

    @property
    def filtered(self) -> bool:
        """Whether a filter is set (a session may be left out)."""
        return (self.state is not None or self.agent_alias is not None or self.name_prefix is not None
                or self.updated_since is not None)


_EVERYTHING = Listing()


def _invalid(argument: str, reason: str) -> InvalidArgumentError:
    return InvalidArgumentError(argument=argument, reason=reason)


def micros(value: datetime) -> int:
    """An aware datetime as microseconds since the epoch (what the order compares)."""
    return (value - EPOCH) // _MICROSECOND


def value_of(md: SessionMetadata, sort: str) -> Value:
    """The value a session is sorted by (None: it has none)."""
    if sort == "key":
        return md.key
    if sort == "name":
        return md.name
    if sort == "message_count":
        return md.message_count
    when = md.updated_at if sort == "updated_at" else md.created_at
    return None if when is None else micros(when)


def check_listing(sort: object = "key", descending: object = False, limit: object = None, offset: object = 0,
                  cursor: object = None, state: object = None, agent_alias: object = None,
                  name_prefix: object = None, updated_since: object = None) -> Listing:
    """The checked arguments of ``list_sessions_with_metadata``:
    :class:`InvalidArgumentError` (a ``ValueError``) for an unknown sort or state, a
    negative or non-int limit or offset, both a cursor and an offset, a malformed cursor
    or one of another sort or direction, a naive ``updated_since``; ``TypeError`` for a
    filter of the wrong type. Touches no store."""
    if not isinstance(sort, str) or sort not in SORTS:
        raise _invalid("sort", f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
    if not isinstance(descending, bool):
        raise TypeError(f"descending must be a bool, not {type(descending).__name__}")
    if limit is not None and (type(limit) is not int or limit < 0):
        raise _invalid("limit", f"limit must be None or an int >= 0, not {limit!r}")
    if type(offset) is not int or offset < 0:
        raise _invalid("offset", f"offset must be an int >= 0, not {offset!r}")
    after = None
    if cursor is not None:
        if offset:
            raise _invalid("cursor", "list_sessions_with_metadata takes a cursor or an offset, not both")
        after = decode_cursor(cursor, sort, descending)
    if state is not None and (not isinstance(state, str) or state not in SESSION_STATES):
        raise _invalid("state", f"state must be None or one of {sorted(SESSION_STATES)}, not {state!r}")
    alias = None if agent_alias is None else check_text("agent_alias", agent_alias)
    prefix = None if name_prefix is None else check_text("name_prefix", name_prefix)
    since = None
    if updated_since is not None:
        if not isinstance(updated_since, datetime):
            raise TypeError(f"updated_since must be a datetime, not {type(updated_since).__name__}")
        if updated_since.tzinfo is None or updated_since.utcoffset() is None:
            raise _invalid("updated_since", "updated_since must be an aware datetime (with a tzinfo), "
                           f"not the naive {updated_since!r}")
        since = micros(updated_since)
    return Listing(sort, descending, limit, offset, after, state, alias, prefix, since)


# -- the cursor -------------------------------------------------------------------------------
def encode_cursor(sort: str, descending: bool, value: Value, key: str) -> str:
    """The opaque cursor of the position ``(value, key)`` in a listing by ``sort``."""
    raw = orjson.dumps([_CURSOR_VERSION, sort, descending, value, key])
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: object, sort: str, descending: bool) -> tuple[Value, str]:
    """The position ``(value, key)`` a cursor names; :class:`InvalidArgumentError` when it
    is not a cursor of this package or belongs to another sort or direction."""
    if not isinstance(cursor, str):
        raise TypeError(f"cursor must be a str or None, not {type(cursor).__name__}")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = orjson.loads(raw)
    except (binascii.Error, ValueError):
        raise _invalid("cursor", f"not a listing cursor: {cursor!r}") from None
    if (not isinstance(data, list) or len(data) != 5 or data[0] != _CURSOR_VERSION
            or not isinstance(data[1], str) or not isinstance(data[2], bool) or not isinstance(data[4], str)
            or not data[4]):
        raise _invalid("cursor", f"not a listing cursor: {cursor!r}")
    _version, its_sort, its_descending, value, key = data
    if its_sort != sort or its_descending != descending:
        order = "descending" if its_descending else "ascending"
        raise _invalid("cursor", f"the cursor continues a listing by {its_sort} ({order}), not this one")
    if value is None:
        ok = sort in NULLABLE
    elif sort in TEXT_SORTS:
        ok = isinstance(value, str)
    else:
        ok = type(value) is int
    if not ok or (sort == "key" and value != key):
        raise _invalid("cursor", f"not a listing cursor: {cursor!r}")
    return value, key


# -- order, filters, and one page of a full listing -------------------------------------------
def follows(value: Value, key: str, after: tuple[Value, str], descending: bool) -> bool:
    """Whether the session at ``(value, key)`` comes after position ``after`` in the order."""
    at, at_key = after
    if at is None:
        return value is None and (key < at_key if descending else key > at_key)
    if value is None:
        return True
    if value != at:
        return value < at if descending else value > at  # type: ignore[operator]  # same sort: same type
    return key < at_key if descending else key > at_key


def keeps(listing: Listing, md: SessionMetadata) -> bool:
    """Whether session ``md`` passes the filters of ``listing``."""
    if listing.state is not None and md.state != listing.state:
        return False
    if listing.agent_alias is not None and md.agent_alias != listing.agent_alias:
        return False
    if listing.name_prefix is not None and (md.name is None or not md.name.startswith(listing.name_prefix)):
        return False
    return not (listing.updated_since is not None
                and (md.updated_at is None or micros(md.updated_at) < listing.updated_since))


def ordered(sessions: Iterable[SessionMetadata], sort: str, descending: bool) -> list[SessionMetadata]:
    """``sessions`` in the order of a listing by ``sort``."""
    valued: list[tuple[Value, SessionMetadata]] = []
    missing: list[SessionMetadata] = []
    for md in sessions:
        value = value_of(md, sort)
        if value is None:
            missing.append(md)
        else:
            valued.append((value, md))
    valued.sort(key=lambda vm: (vm[0], vm[1].key), reverse=descending)
    missing.sort(key=lambda md: md.key, reverse=descending)
    return [md for _value, md in valued] + missing


def page(listing: Listing, ordered_sessions: Iterable[SessionMetadata]) -> SessionList:
    """The page of ``listing`` from sessions already filtered and in its order: those after
    its cursor, from ``offset`` on, at most ``limit``, with the next page's cursor. Reads
    one session past the page (to know whether there is a next one), no more."""
    sort = listing.sort
    return page_at(listing, ((md, value_of(md, sort)) for md in ordered_sessions))


def page_at(listing: Listing, positioned: Iterable[tuple[SessionMetadata, Value]]) -> SessionList:
    """:func:`page` of sessions each with the sort value it was ordered by (the next
    cursor names that value: a backend that orders by values read before the metadata
    continues from where it was in its order, also when a session changed meanwhile)."""
    out: list[SessionMetadata] = []
    last: Value = None
    skip = listing.offset
    limit = listing.limit
    for md, value in positioned:
        if skip:
            skip -= 1
            continue
        if limit is not None and len(out) >= limit:
            cursor = encode_cursor(listing.sort, listing.descending, last, out[-1].key) if out else None
            return SessionList(out, cursor)
        out.append(md)
        last = value
    return SessionList(out)


def select(listing: Listing, sessions: Iterable[SessionMetadata]) -> SessionList:
    """The page of ``listing`` out of a full listing ``sessions`` (any order): filter,
    order, cursor, offset, limit. The model every backend's listing equals."""
    kept = [md for md in sessions if keeps(listing, md)]
    if listing.after is not None:
        sort, after, descending = listing.sort, listing.after, listing.descending
        kept = [md for md in kept if follows(value_of(md, sort), md.key, after, descending)]
    return page(listing, ordered(kept, listing.sort, listing.descending))


__all__ = ["NULLABLE", "SORTS", "TEXT_SORTS", "Listing", "Sort", "Value", "check_listing",
           "decode_cursor", "encode_cursor", "follows", "keeps", "micros", "ordered", "page", "page_at", "select",
           "value_of"]
