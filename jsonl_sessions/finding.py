"""Message search, the backend-neutral half: the checked arguments (:class:`MessageSearch`),
the order of hits and its cursor, and the :class:`Collector` that every backend feeds the
candidate lines it reads (from a scan or from its full-text index), which confirms each
with the one matcher (:mod:`jsonl_sessions.matcher`) and keeps the newest.

**Order** (newest first): ``created_at`` descending, messages without ``created_at`` after
every message with one; ties by session key (ascending), then by position in the session
(the message's 0-based line in the transcript, descending: the later message first). A
cursor holds the order of the last hit of its page; the next page holds the hits strictly
after it, so a page never repeats a hit of an earlier one while messages are only
appended (a rewrite may shift positions).

A backend gives the collector every line of every session :meth:`MessageSearch.wants_session`
accepts, or a superset of the lines that may match (it may skip a line only when the line
cannot hold every term). Whatever it gives, the collector's result is the same.
Memory: O(limit) hits, whatever the number of candidates.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import matcher, records, sidecar
from .arguments import check_text
from .errors import InvalidArgumentError
from .keys import validate_key
from .types import SearchHit, SearchPage

log = logging.getLogger("jsonl_sessions")

#: The order of a hit as a tuple that sorts ascending in result order:
#: ``(1 when created_at is None else 0, -created_at or 0, key, -position)``.
Order = tuple[int, int, str, int]

#: The largest page ``search_messages`` returns.
MAX_LIMIT = 10_000


def order_of(created_at: int | None, key: str, position: int) -> Order:
    """The sort key of a hit (see the module docstring)."""
    if created_at is None:
        return (1, 0, key, -position)
    return (0, -created_at, key, -position)


def encode_cursor(order: Order) -> str:
    """The opaque cursor after the hit of ``order``."""
    missing, created, key, position = order
    raw = json.dumps([missing, created, key, position], ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> Order:
    """The order a cursor holds; :class:`InvalidArgumentError` for one this code did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        value = None
    if (isinstance(value, list) and len(value) == 4 and value[0] in (0, 1)
            and all(type(v) is int for v in (value[0], value[1], value[3])) and isinstance(value[2], str)):
        return (value[0], value[1], value[2], value[3])
    raise InvalidArgumentError(argument="cursor", reason=f"not a search cursor: {cursor!r}")


@dataclass(frozen=True)
class MessageSearch:
    """The checked arguments of one ``search_messages`` call (:func:`check_search`)."""

    #: Casefolded terms (:func:`jsonl_sessions.matcher.parse`); empty: every message.
    terms: tuple[str, ...]
    roles: frozenset[str] | None
    keys: frozenset[str] | None
    agent_alias: str | None
    #: Casefolded; the session name must contain it.
    name: str | None
    since: int | None
    until: int | None
    limit: int
    #: The order of the last hit of the previous page (from ``cursor``); None: the first page.
    after: Order | None

    @property
    def longest(self) -> str:
        """The longest term ("" without terms): the one a prefilter or an index looks for."""
        return max(self.terms, key=len, default="")

    def may_hold(self, line: bytes) -> bool:
        """False only when the line cannot hold the longest term: a pure-ASCII line without
        escapes holds its text as it is, and ASCII text casefolds to ASCII, so such a line
        without the term (ASCII-lowercased) is ruled out without decoding. O(len(line))."""
        term = self.longest
        if not term or not line.isascii() or b"\\" in line:
            return True
        return term.isascii() and term.encode("ascii") in line.lower()

    def wants_session(self, key: str, meta: Mapping[str, Any] | None) -> bool:
        """Whether the session-level filters (keys, agent alias, name) accept the session
        ``key`` whose metadata object is ``meta`` (None: unreadable, so no alias or name)."""
        if self.keys is not None and key not in self.keys:
            return False
        if self.agent_alias is not None and sidecar.text(meta, "agent_alias") != self.agent_alias:
            return False
        if self.name is not None:
            name = sidecar.text(meta, "name")
            if name is None or self.name not in name.casefold():
                return False
        return True

    def collector(self) -> Collector:
        return Collector(self)


def _iterable_of_text(what: str, value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be an iterable of str or None, not {type(value).__name__}")
    return frozenset(check_text(what, v) for v in value)


def _millis(what: str, value: object) -> int | None:
    if value is not None and type(value) is not int:
        raise TypeError(f"{what} must be int milliseconds or None, not {type(value).__name__}")
    return value


def check_search(text: object, roles: object, keys: object, agent_alias: object, name: object, since: object,
                 until: object, limit: object, cursor: object) -> MessageSearch:
    """The checked arguments of ``search_messages``: TypeError for a value of the wrong
    type, :class:`InvalidArgumentError` (a ``ValueError``) for a ``limit`` that is not an
    int from 1 to :data:`MAX_LIMIT` or a ``cursor`` this package did not make,
    :class:`InvalidSessionKeyError` for a key that cannot name a session."""
    terms = matcher.parse(check_text("text", text))
    role_set = _iterable_of_text("roles", roles)
    key_set = _iterable_of_text("keys", keys)
    if key_set is not None:
        for key in key_set:
            validate_key(key)
    alias = None if agent_alias is None else check_text("agent_alias", agent_alias)
    name_part = None if name is None else check_text("name", name).casefold()
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError(argument="limit", reason=f"limit must be an int from 1 to {MAX_LIMIT}, "
                                   f"not {limit!r}")
    if cursor is not None and not isinstance(cursor, str):
        raise TypeError(f"cursor must be a str or None, not {type(cursor).__name__}")
    return MessageSearch(terms, role_set, key_set, alias, name_part, _millis("since", since), _millis("until", until),
                         limit, None if cursor is None else decode_cursor(cursor))


class Collector:
    """The newest hits of one search among the candidate lines offered to it.

    :meth:`offer` decodes a line, applies the message filters (role, time), the cursor and
    the terms, and keeps the line when it may be among the ``limit + 1`` first hits; the
    snippets are made once, for the page. A backend whose read of one session may be
    retried offers that session's lines to a :meth:`fork` and :meth:`merge` s it once the
    read stood."""

    __slots__ = ("_bound", "_kept", "_search")

    def __init__(self, search: MessageSearch) -> None:
        self._search = search
        #: ``(order, key, record, text)`` of the lines kept so far, unsorted.
        self._kept: list[tuple[Order, str, dict[str, Any], str]] = []
        #: The order no kept line can beat once ``limit + 1`` lines are kept (None: not yet).
        self._bound: Order | None = None

    def fork(self) -> Collector:
        """An empty collector of the same search that skips what this one would skip."""
        other = Collector(self._search)
        other._bound = self._bound
        return other

    def merge(self, other: Collector) -> None:
        """Take the lines ``other`` (a :meth:`fork`) kept."""
        for item in other._kept:
            self._keep(item)

    @property
    def bound(self) -> Order | None:
        """The order a new hit must be before to be kept; None while any hit would be."""
        return self._bound

    def past(self, created_at: int | None, clamp: int = 2**63 - 1) -> bool:
        """Whether no message created at ``created_at`` (or later in the order: older, or
        without a time) can be kept any more: for a backend that offers its candidates in
        order of ``created_at`` descending (missing last) and may stop then. ``clamp``:
        the largest value the backend's ``created_at`` column holds (larger ones are stored
        as it; the comparison is made on clamped values, so a tie never stops)."""
        bound = self._bound
        if bound is None:
            return False
        missing = created_at is None
        if bound[0] != missing:
            return missing  # a message with a time is before every one without
        if created_at is None:
            return False
        return min(created_at, clamp) < min(-bound[1], clamp)

    def offer(self, key: str, position: int, line: bytes, offset: int | None = None) -> None:
        """Consider the transcript line ``line`` (without its newline) at ``position`` (0-based)
        of session ``key``, ``offset`` bytes into its file when known. A line that does not
        parse is not a message: skipped, with a logged warning naming its line and offset."""
        record = records.decode_or_none(line)
        if record is None:
            log.warning("session %r: line %d%s does not parse: skipped by the search", key, position + 1,
                        "" if offset is None else f", byte offset {offset},")
            return
        search = self._search
        created = record.get("created_at")
        if search.since is not None and (created is None or created < search.since):
            return
        if search.until is not None and (created is None or created >= search.until):
            return
        if search.roles is not None and record["role"] not in search.roles:
            return
        order = order_of(created, key, position)
        if (search.after is not None and order <= search.after) or (self._bound is not None and order >= self._bound):
            return
        text = matcher.searchable(record.get("content"))
        if search.terms and not matcher.matches_all(search.terms, text.casefold()):
            return
        self._keep((order, key, record, text))

    def _keep(self, item: tuple[Order, str, dict[str, Any], str]) -> None:
        if self._bound is not None and item[0] >= self._bound:
            return
        kept = self._kept
        kept.append(item)
        want = self._search.limit + 1
        if len(kept) == want and self._bound is None:  # a first bound (loose until the next trim)
            self._bound = max(k[0] for k in kept)
        elif len(kept) >= 2 * want:
            kept.sort(key=lambda k: k[0])
            del kept[want:]
            self._bound = kept[-1][0]

    def page(self) -> SearchPage:
        """The hits, newest first, with the cursor of the next page."""
        kept = sorted(self._kept, key=lambda k: k[0])
        limit = self._search.limit
        more = len(kept) > limit
        kept = kept[:limit]
        hits = []
        for _order, key, record, text in kept:
            shown, offsets = matcher.snippet(self._search.terms, text)
            hits.append(SearchHit(key, record.get("id") or "", record["role"], record.get("created_at"), shown,
                                  offsets))
        return SearchPage(hits, encode_cursor(kept[-1][0]) if more and kept else None)


__all__ = ["MAX_LIMIT", "Collector", "MessageSearch", "Order", "check_search", "decode_cursor", "encode_cursor",
           "order_of"]
