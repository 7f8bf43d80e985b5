"""Ids and times for messages being written: the store's id rules, in one function.

Ids a caller gave are kept; the others get ULIDs, so that the ids of a session strictly
increase (also within one millisecond and after the clock steps back): id-less messages
after the last id get fresh ULIDs after it, id-less messages before a caller's id get ids
between their neighbours. A caller's id that does not sort after the previous one is
refused: :class:`DuplicateMessageError` when the session (or the batch) already holds it,
:class:`InvalidMessageError` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import codec, ids
from ..errors import DuplicateMessageError, InvalidMessageError
from ..types import ChatMessage


def assign_ids(key: str, messages: Sequence[ChatMessage], previous: str | None, now: int,
               exists: Callable[[str], bool]) -> list[dict[str, Any]]:
    """Records for ``messages`` with ids (kept when given, new ULIDs otherwise) that
    strictly increase after ``previous``, and created_at (now when missing). ``exists``
    tells a duplicate id from one merely out of order."""
    records: list[dict[str, Any]] = []
    prev = previous
    i, n = 0, len(messages)

    def order_error(mid: str, prev_id: str) -> InvalidMessageError:
        if any(r["id"] == mid for r in records) or exists(mid):
            return DuplicateMessageError(key=key, message_id=mid)
        return InvalidMessageError(key=key, message_id=mid, reason=f"id {mid!r} does not sort after the "
                                   f"previous id {prev_id!r} (ids in a session must strictly increase)")

    while i < n:
        m = messages[i]
        if m.id:
            if prev is not None and m.id <= prev:
                raise order_error(m.id, prev)
            records.append(codec.record_of(m, m.id, now if m.created_at is None else m.created_at))
            prev = m.id
            i += 1
            continue
        j = i + 1
        while j < n and not messages[j].id:
            j += 1
        if j == n:
            fresh: list[str] = []
            for _ in range(i, j):
                nxt = ids.next_id(prev, now)
                if nxt is None:
                    raise InvalidMessageError(key=key, reason=f"no ULID sorts after the custom id {prev!r}; "
                                              "give the message an id explicitly")
                fresh.append(nxt)
                prev = nxt
        else:
            if prev is not None and messages[j].id <= prev:
                raise order_error(messages[j].id, prev)
            got = ids.ids_between(prev, messages[j].id, j - i, now)
            if got is None:
                raise InvalidMessageError(key=key, reason=f"no id fits between {prev!r} and "
                                          f"{messages[j].id!r}; give the messages ids explicitly")
            fresh = got
        for m2, mid in zip(messages[i:j], fresh):
            records.append(codec.record_of(m2, mid, now if m2.created_at is None else m2.created_at))
        prev = fresh[-1]
        i = j
    return records
