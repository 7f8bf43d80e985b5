"""Message ids: ULIDs (26 Crockford base32 chars: 48-bit ms time, 80 random bits).

Within a session ids are strictly increasing in string order, which for ULIDs is also
numeric order. :func:`next_id` makes the next id after a given one: a fresh ULID when
the clock has moved on, else the previous value plus one, so ids stay monotonic within
one millisecond and after the clock steps backwards.
"""

from __future__ import annotations

import random
import re
import time

ULID_LENGTH = 26
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [_ALPHABET[i >> 5] + _ALPHABET[i & 31] for i in range(1024)]
_ULID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_TO_BASE32HEX = str.maketrans(_ALPHABET, "0123456789abcdefghijklmnopqrstuv")
_MAX = (1 << 128) - 1
_getrandbits = random.getrandbits


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def encode(value: int) -> str:
    """The 26-char ULID text of a 128-bit integer."""
    t = _PAIRS
    n = value
    return "".join((
        t[n >> 120], t[(n >> 110) & 1023], t[(n >> 100) & 1023], t[(n >> 90) & 1023],
        t[(n >> 80) & 1023], t[(n >> 70) & 1023], t[(n >> 60) & 1023], t[(n >> 50) & 1023],
        t[(n >> 40) & 1023], t[(n >> 30) & 1023], t[(n >> 20) & 1023], t[(n >> 10) & 1023], t[n & 1023],
    ))


def decode(text: str) -> int | None:
    """The integer value of a canonical (upper-case) ULID, or None when ``text`` is not one."""
    if _ULID_RE.fullmatch(text) is None:
        return None
    return int(text.translate(_TO_BASE32HEX), 32)


def timestamp_ms(text: str) -> int | None:
    """The millisecond timestamp inside a ULID, None when ``text`` is not a ULID."""
    value = decode(text)
    return None if value is None else value >> 80


def next_id(previous: str | None, now: int | None = None) -> str | None:
    """A new ULID (time ``now`` ms, default the wall clock) sorting strictly after
    ``previous``; None when no ULID can (``previous`` is a custom id sorting above every
    ULID, or the maximal ULID)."""
    global _memo
    candidate = ((now_ms() if now is None else now) << 80) | _getrandbits(80)
    if previous:
        memo = _memo
        prev_value = memo[1] if memo[0] == previous else decode(previous)
        if prev_value is not None:
            if candidate <= prev_value:
                if prev_value >= _MAX:
                    return None
                candidate = prev_value + 1
        elif encode(candidate) <= previous:
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
    first = next_id(previous, now)
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
