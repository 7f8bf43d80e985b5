"""Message ids: ULIDs (26 Crockford base32 chars: 48-bit ms time, 80 random bits).

Within a session ids are strictly increasing in string order, which for ULIDs is also
numeric order. :func:`next_id` makes the next id after a given one: a fresh ULID when
the clock has moved on, else the previous value plus a random step (1 to 2**40), so ids
stay monotonic within one millisecond and after the clock steps backwards, and the id of
a message removed from the end is not handed out again.

Assigning them (:func:`assign_ids`): a message that carries an id keeps it if the store
can take it (:func:`check_caller_id`: a canonical ULID, at most :data:`MAX_AHEAD_MS` ahead
of the store's clock, sorting after the previous one); a run of messages without ids gets
new ULIDs after the previous id, or, when a message with an id follows the run, ids
between the two. ``created_at`` defaults to ``now``. Shared by every backend.

Why a caller's id must be a ULID: new ids are made after the session's newest id, so an
id above every ULID (``"msg_abc"``, a lower-case UUID) or at the top of the ULID space
(far in the future) would leave no id for the next plain append. A transcript written
by an earlier version (or another tool) may hold such foreign ids already: reads take
them, and new ids are made after the session's newest *ULID* (:func:`newest_ulid`), so
they never block an append.
"""

from __future__ import annotations

import operator
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

from . import codec
from .errors import DuplicateMessageError, InvalidMessageError
from .types import RESERVED_FIELDS, ChatMessage

ULID_LENGTH = 26
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [_ALPHABET[i >> 5] + _ALPHABET[i & 31] for i in range(1024)]
_ULID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_TO_BASE32HEX = str.maketrans(_ALPHABET, "0123456789abcdefghijklmnopqrstuv")
_MAX = (1 << 128) - 1
#: How far ahead of the store's clock a caller's id may be (ms): 24 h, room for clocks that
#: disagree, while the ids after it stay far from the top of the ULID space.
MAX_AHEAD_MS = 24 * 3600 * 1000
#: A new id in the millisecond of the previous one is previous + 1 + up to 2**40 - 1 (random),
#: so an id removed from the end comes back only with a chance of 2**-40.
_STEP_BITS = 40
_getrandbits = random.getrandbits


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def encode(value: int) -> str:
    """The 26-char ULID text of a 128-bit integer."""
    # The first 16 characters (the 48-bit time with its 2 pad bits, and the upper 30 random
    # bits) are reused while they are the same as last time: the next id of a session is
    # usually the previous one plus a step below 2**40, which changes only the last 10
    # characters (but once in about a thousand). Those are 5 lookups shifting a 50-bit
    # integer, not the 128-bit one.
    global _head_text
    t = _PAIRS
    top = value >> 50
    cached = _head_text
    if cached[0] == top:
        head = cached[1]
    else:
        ms, hi = top >> 30, top & 0x3FFFFFFF
        head = "".join((t[ms >> 40], t[(ms >> 30) & 1023], t[(ms >> 20) & 1023], t[(ms >> 10) & 1023], t[ms & 1023],
                        t[hi >> 20], t[(hi >> 10) & 1023], t[hi & 1023]))
        _head_text = (top, head)
    lo = value & _MASK50
    return "".join((head, t[lo >> 40], t[(lo >> 30) & 1023], t[(lo >> 20) & 1023], t[(lo >> 10) & 1023],
                    t[lo & 1023]))


#: The upper 78 bits :func:`encode` last wrote and their 16 characters (replaced as one
#: tuple: thread-safe).
_head_text: tuple[int, str] = (-1, "")
_MASK50 = (1 << 50) - 1


def decode(text: str) -> int | None:
    """The integer value of a canonical (upper-case) ULID, or None when ``text`` is not one."""
    if _ULID_RE.fullmatch(text) is None:
        return None
    return int(text.translate(_TO_BASE32HEX), 32)


def is_ulid(text: object) -> bool:
    """Whether ``text`` is a canonical ULID (26 chars, Crockford base32, upper case): an id
    the store makes, or takes from a caller. O(1)."""
    return isinstance(text, str) and _ULID_RE.fullmatch(text) is not None


def newest_ulid(ids_newest_first: Iterable[str | None]) -> str | None:
    """The first ULID of ``ids_newest_first`` (a session's ids from the newest back), None
    when it holds none: the id new ids are made after. Ids that are not ULIDs (left by an
    earlier version or another tool) are passed over. Cost: the ids up to the first ULID
    (one, normally)."""
    for found in ids_newest_first:
        if found and _ULID_RE.fullmatch(found) is not None:
            return found
    return None


def first_disorder(ids: Sequence[str]) -> tuple[int, str] | None:
    """Where a transcript's ids (in line order) first break the rules, as ``(index,
    reason)``; None when they keep them. The rules: no id twice, and each ULID greater than
    the ULID before it (ids that are not ULIDs, left by an earlier version or another
    tool, are passed over by the order; a line without an id by both). Cost: O(n), one
    C-level pass of comparisons when the ids strictly increase (the usual case)."""
    if all(map(operator.lt, ids, islice(ids, 1, None))):
        return None  # strictly increasing: no repeat, and the ULIDs among them increase
    order = IdOrder()
    for index, found in enumerate(ids):
        reason = order.check(found)
        if reason is not None:
            return index, reason
    return None


class IdOrder:
    """The rules of :func:`first_disorder`, one id at a time (for a scan that streams)."""

    __slots__ = ("previous", "seen")

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.previous = ""

    def check(self, message_id: str) -> str | None:
        """Why ``message_id``, the id of the next line, breaks the rules; None when it
        keeps them ("": a line without an id keeps them)."""
        if not message_id:
            return None
        if message_id in self.seen:
            return f"id {message_id!r} repeats the id of an earlier line"
        self.seen.add(message_id)
        if _ULID_RE.fullmatch(message_id) is not None:
            if message_id <= self.previous:
                return f"id {message_id!r} does not sort after the previous id {self.previous!r} (ids must increase)"
            self.previous = message_id
        return None


def check_caller_id(key: str, message_id: str, now: int) -> None:
    """Raise :class:`InvalidMessageError` unless ``message_id`` (an id a caller gave) is one
    the store can take: a canonical ULID whose time is at most :data:`MAX_AHEAD_MS` after
    ``now`` (the store's clock, ms). (Its order in the session is checked by the caller.)"""
    value = decode(message_id)
    if value is None:
        raise InvalidMessageError(
            key=key, message_id=message_id,
            reason=f"id {message_id!r} is not a ULID (26 chars, Crockford base32, upper case); a message's id "
            "is the store's: leave id empty and the store assigns one. Keep a provider's or tool's id in a "
            f"field of its own, e.g. {{'provider_id': {message_id!r}}} (kept unchanged in ChatMessage.extra)")
    if (value >> 80) - now > MAX_AHEAD_MS:
        raise InvalidMessageError(
            key=key, message_id=message_id,
            reason=f"id {message_id!r} is from the future (its time is more than 24 h after the store's clock); "
            "leave id empty and the store assigns one")


def timestamp_ms(text: str) -> int | None:
    """The millisecond timestamp inside a ULID, None when ``text`` is not a ULID."""
    value = decode(text)
    return None if value is None else value >> 80


def next_id(previous: str | None, now: int | None = None, reserve: int = 0) -> str | None:
    """A new ULID (time ``now`` ms, default the wall clock) sorting strictly after
    ``previous`` (the session's newest ULID, see :func:`newest_ulid`); None when no ULID
    can (``previous`` is the maximal ULID) or ``previous`` is not a ULID (the caller then
    looks for the newest ULID before it). When the fresh id would not sort after ``previous`` (the
    same millisecond, or a clock that stepped back), it is ``previous`` plus a random step
    of 1 to 2**40, not plus one: the id of a message just removed from the end is not
    given out again (except with a chance of 2**-40). ``reserve``: keep that many ids free
    above the result (for a run that follows it)."""
    global _memo
    candidate = ((now_ms() if now is None else now) << 80) | _getrandbits(80)
    if previous:
        memo = _memo
        prev_value = memo[1] if memo[0] == previous else decode(previous)
        if prev_value is not None:
            if candidate <= prev_value:
                top = _MAX - reserve
                if prev_value >= top:
                    return None
                # Not previous + 1: after a remove_last that +1 may be the id just removed,
                # and a compare-and-remove by id would then take the newcomer for it.
                candidate = min(prev_value + 1 + _getrandbits(_STEP_BITS), top)
        else:
            return None
    text = encode(candidate)
    _memo = (text, candidate)
    return text


def next_ids(previous: str | None, count: int, now: int | None = None) -> list[str] | None:
    """``count`` increasing ULIDs after ``previous``: the first as :func:`next_id`, each
    next one the previous plus one (the monotonic ULID rule within a millisecond; one
    random draw per run instead of one per id). None when they do not fit."""
    global _memo
    if count <= 0:
        return []
    first = next_id(previous, now, count - 1)
    if first is None:
        return None
    value = decode(first)  # not _memo: another thread may have replaced it meanwhile
    assert value is not None  # next_id makes canonical ULIDs
    if value + count - 1 > _MAX:
        return None
    out = [first]
    out.extend(encode(value + k) for k in range(1, count))
    _memo = (out[-1], value + count - 1)
    return out


#: The last id made here and its value: the next append's "previous" is usually it, and
#: reusing the value skips a decode on the append path. (Replaced as one tuple: thread-safe.)
_memo: tuple[str, int] = ("", 0)


def ids_between(low: str | None, high: str, count: int, now: int | None = None) -> list[str] | None:
    """``count`` increasing ULIDs strictly between ``low`` and ``high``; None when impossible.

    Fresh time-based ids are used when they fit below ``high``; otherwise (``high`` is
    older than now, e.g. a breadcrumb inserted before kept history) the ids just below
    ``high`` are taken.
    """
    out: list[str] = []
    prev = low
    for _ in range(count):
        nxt = next_id(prev, now)
        if nxt is None or nxt >= high:
            break
        out.append(nxt)
        prev = nxt
    if len(out) == count:
        return out
    high_value = decode(high)
    if high_value is None:
        return None
    low_value = -1 if low is None else decode(low)
    if low_value is None and low is not None:
        return None
    first = high_value - count
    if first <= (low_value if low_value is not None else -1):
        return None
    return [encode(first + i) for i in range(count)]

def _never(_message_id: str) -> bool:
    return False


def assign_ids(
    key: str,
    messages: Sequence[ChatMessage],
    previous: str | None,
    now: int,
    exists: Callable[[str], bool] = _never,
) -> list[dict[str, Any]]:
    """The records (dicts in line order) of ``messages`` with ids strictly increasing after
    ``previous`` (the session's newest ULID, :func:`newest_ulid`; None when it has none)
    and ``created_at`` (``now`` when missing). ``exists(id)`` tells whether an id is
    already in the session, to report an out-of-order id that is a duplicate as
    :class:`DuplicateMessageError`.

    Raises :class:`InvalidMessageError` when a caller's id is not one the store takes
    (:func:`check_caller_id`), does not sort after the one before it, or no id fits.
    Cost: O(len(messages)) (plus ``exists`` once on an order error)."""
    n = len(messages)
    if n == 1 and not messages[0].id:  # the common append
        m = messages[0]
        nxt = next_id(previous, now)
        if nxt is None:
            raise _no_id_after(key, previous)
        return [codec.record_of(m, nxt, now if m.created_at is None else m.created_at)]
    records: list[dict[str, Any]] = []
    record_of = codec.record_of
    i = 0
    prev = previous
    while i < n:
        m = messages[i]
        data = m._data
        mid = data.get("id")
        if mid:
            check_caller_id(key, mid, now)
            if prev is not None and mid <= prev:
                raise _order_error(key, mid, prev, records, exists)
            created = data.get("created_at")
            if created is not None and data.get("kind") and tuple(data)[:5] == RESERVED_FIELDS:
                records.append(data)  # already its own record: codec.record_of's first case, inlined
            else:
                records.append(record_of(m, mid, now if created is None else created))
            prev = mid
            i += 1
            continue
        j = i + 1
        while j < n and not messages[j].id:
            j += 1
        new_ids = _run_ids(key, messages, i, j, prev, now, records, exists)
        for m2, mid in zip(messages[i:j], new_ids):
            records.append(codec.record_of(m2, mid, now if m2.created_at is None else m2.created_at))
        prev = new_ids[-1]
        i = j
    return records


def replacement_record(key: str, message: ChatMessage, old: Mapping[str, Any], clock: Callable[[], int],
                       previous: Callable[[], str | None], exists: Callable[[str], bool]) -> dict[str, Any]:
    """The record that replaces the newest record ``old`` by ``message`` (``update_last``):
    it keeps ``old``'s id and ``created_at`` unless ``message`` carries its own (``old``'s
    id is kept as it is, even one an earlier version took from a caller). A new id (or a
    first one) is assigned and checked as by :func:`assign_ids` after ``previous()`` (the
    newest ULID before ``old``), with ``exists`` telling a duplicate. ``clock`` is called once when a
    time is needed. Raises :class:`InvalidMessageError` / :class:`DuplicateMessageError`."""
    old_id = old.get("id") or ""
    new_id = message.id or old_id
    if message.created_at is None and isinstance(old.get("created_at"), int):
        message = message.replace(created_at=old["created_at"])
    if new_id != old_id or not new_id:
        return assign_ids(key, [message], previous(), clock(), exists)[0]
    return codec.record_of(message, new_id, message.created_at if message.created_at is not None else clock())


def _run_ids(key: str, messages: Sequence[ChatMessage], i: int, j: int, prev: str | None, now: int,
             records: list[dict[str, Any]], exists: Callable[[str], bool]) -> list[str]:
    """Ids for the id-less messages ``[i, j)``: after ``prev``, and before ``messages[j]``'s id."""
    if j == len(messages):
        new_ids = next_ids(prev, j - i, now)
        if new_ids is None:
            raise _no_id_after(key, prev)
        return new_ids
    # A duplicate / out-of-order id after id-less messages is reported as such, not as
    # "no id fits" between it and the previous one.
    high = messages[j].id
    check_caller_id(key, high, now)
    if prev is not None and high <= prev:
        raise _order_error(key, high, prev, records, exists)
    got = ids_between(prev, high, j - i, now)
    if got is None:
        raise InvalidMessageError(key=key, reason=f"no id fits between {prev!r} and {high!r}; "
                                  "give the messages ids explicitly")
    return got


def _no_id_after(key: str, previous: str | None) -> InvalidMessageError:
    return InvalidMessageError(key=key, reason=f"no ULID sorts after the session's newest id {previous!r}")


def _order_error(key: str, message_id: str, prev: str, records: list[dict[str, Any]],
                 exists: Callable[[str], bool]) -> InvalidMessageError:
    if any(r["id"] == message_id for r in records) or exists(message_id):
        return DuplicateMessageError(key=key, message_id=message_id)
    return InvalidMessageError(key=key, message_id=message_id,
                               reason=f"id {message_id!r} does not sort after the previous id {prev!r} "
                               "(ids in a session must strictly increase)")
