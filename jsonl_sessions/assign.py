"""Giving messages their ids and times before they are written.

Ids in a session strictly increase (string order) down the transcript. A message that
carries an id keeps it (it must sort after the previous one); a run of messages without
ids gets new ULIDs after the previous id, or, when a message with an id follows the run,
ids between the two (:func:`jsonl_sessions.ids.ids_between`). ``created_at`` defaults to
``now``. Shared by the store and by :class:`jsonl_sessions.testing.MemorySessionStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import codec, ids
from .errors import DuplicateMessageError, InvalidMessageError
from .types import ChatMessage


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
    ``previous`` (the session's last id, None when empty) and ``created_at`` (``now`` when
    missing). ``exists(id)`` tells whether an id is already in the session, to report an
    out-of-order id that is a duplicate as :class:`DuplicateMessageError`.

    Raises :class:`InvalidMessageError` when an id does not sort after the one before it
    or no id fits. Cost: O(len(messages)) (plus ``exists`` once on an order error)."""
    n = len(messages)
    if n == 1 and not messages[0].id:  # the common append
        m = messages[0]
        nxt = ids.next_id(previous, now)
        if nxt is None:
            raise _no_id_after(key, previous)
        return [codec.record_of(m, nxt, now if m.created_at is None else m.created_at)]
    records: list[dict[str, Any]] = []
    i = 0
    prev = previous
    while i < n:
        m = messages[i]
        if m.id:
            if prev is not None and m.id <= prev:
                raise _order_error(key, m.id, prev, records, exists)
            records.append(codec.record_of(m, m.id, now if m.created_at is None else m.created_at))
            prev = m.id
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
    it keeps ``old``'s id and ``created_at`` unless ``message`` carries its own. A new id
    (or a first one) is assigned as by :func:`assign_ids` after ``previous()`` (the id
    before ``old``), with ``exists`` telling a duplicate. ``clock`` is called once when a
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
        new_ids = ids.next_ids(prev, j - i, now)
        if new_ids is None:
            raise _no_id_after(key, prev)
        return new_ids
    # A duplicate / out-of-order id after id-less messages is reported as such, not as
    # "no id fits" between it and the previous one.
    high = messages[j].id
    if prev is not None and high <= prev:
        raise _order_error(key, high, prev, records, exists)
    got = ids.ids_between(prev, high, j - i, now)
    if got is None:
        raise InvalidMessageError(key=key, reason=f"no id fits between {prev!r} and {high!r}; "
                                  "give the messages ids explicitly")
    return got


def _no_id_after(key: str, previous: str | None) -> InvalidMessageError:
    return InvalidMessageError(key=key, reason=f"no ULID sorts after the custom id {previous!r}; "
                               "give the message an id explicitly")


def _order_error(key: str, message_id: str, prev: str, records: list[dict[str, Any]],
                 exists: Callable[[str], bool]) -> InvalidMessageError:
    if any(r["id"] == message_id for r in records) or exists(message_id):
        return DuplicateMessageError(key=key, message_id=message_id)
    return InvalidMessageError(key=key, message_id=message_id,
                               reason=f"id {message_id!r} does not sort after the previous id {prev!r} "
                               "(ids in a session must strictly increase)")
