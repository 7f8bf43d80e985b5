"""The argument checks every backend applies, in one place, so that bad input raises the
same error with the same message whichever backend gets it.

Each check returns the checked value (or nothing) and raises before anything is read or
written: ``TypeError`` for a value of the wrong type, :class:`InvalidArgumentError` (a
``ValueError``) for one out of range. None of them touches a store. Cost: O(1), or
O(size of the value) for text and context maps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .errors import InvalidArgumentError
from .types import SESSION_STATES, SessionQuery


def _invalid(argument: str, reason: str) -> InvalidArgumentError:
    return InvalidArgumentError(argument=argument, reason=reason)


def check_options(durability: object, lock_timeout: float | None, max_message_bytes: int) -> None:
    """ValueError for store options out of range (``durability`` other than "fsync" or
    "flush", a negative ``lock_timeout``, a ``max_message_bytes`` that is not positive)."""
    if durability not in ("fsync", "flush"):
        raise _invalid("durability", f"durability must be 'fsync' or 'flush', not {durability!r}")
    if lock_timeout is not None and lock_timeout < 0:
        raise _invalid("lock_timeout", "lock_timeout must be >= 0 or None")
    if max_message_bytes <= 0:
        raise _invalid("max_message_bytes", "max_message_bytes must be positive")


def check_text(what: str, value: object, *, empty: bool = True) -> str:
    """``value`` if it is a string JSON can hold: TypeError for a non-string, ValueError
    for a lone surrogate (or for "" when ``empty`` is False). ``what`` names it in the error."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not empty and not value:
        raise _invalid(what, f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid(what, f"{what} is not valid Unicode text (lone surrogate): {value!r}") from None
    return str(value)


def check_number(what: str, value: object) -> float:
    """``value`` as a float if it is a finite number >= 0 (a bool is not a number):
    TypeError / ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise _invalid(what, f"{what} must be a finite number >= 0, not {value!r}")
    return float(value)


def check_context(context: object) -> dict[str, str]:
    """A copy of a session context: a mapping of text to text (TypeError / ValueError
    naming the bad key or value otherwise)."""
    if not isinstance(context, Mapping):
        raise TypeError(f"context must be a mapping of str to str, not {type(context).__name__}")
    return {check_text("context key", k): check_text(f"context[{k!r}]", v) for k, v in context.items()}


def check_state(state: object, turn_id: object) -> tuple[str, str | None]:
    """``(state, turn)`` of a run-state change: ValueError for a state other than "idle",
    "running", "error"; the turn checked as text, and dropped for "idle"."""
    if not isinstance(state, str) or state not in SESSION_STATES:
        raise _invalid("state", f"state must be one of {sorted(SESSION_STATES)}, not {state!r}")
    turn = None if turn_id is None else check_text("turn_id", turn_id)
    return state, None if state == "idle" else turn


def check_query(query: object) -> tuple[str, int | None, str | None]:
    """``(casefolded keyword, limit, agent alias)`` of a search: TypeError for a query that
    is not a :class:`SessionQuery` or text that is not a str, ValueError for a limit that
    is not None or an int >= 0."""
    if not isinstance(query, SessionQuery):
        raise TypeError(f"query must be a SessionQuery, not {type(query).__name__}")
    needle = check_text("keyword", query.keyword).casefold()
    limit = query.limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise _invalid("limit", f"limit must be None or an int >= 0, not {limit!r}")
    alias = None if query.agent_alias is None else check_text("agent_alias", query.agent_alias)
    return needle, limit, alias


def check_window(limit: object, offset: object) -> None:
    """The checks of ``get_messages``: ValueError for a ``limit`` that is not None or an
    int >= 0, or an ``offset`` that is not an int >= 0."""
    if limit is not None and (type(limit) is not int or limit < 0):
        raise _invalid("limit", f"limit must be None or an int >= 0, not {limit!r}")
    if type(offset) is not int or offset < 0:
        raise _invalid("offset", f"offset must be an int >= 0, not {offset!r}")


def check_page_arguments(limit: object, before: object, after: object, ts_before: object) -> None:
    """The checks of ``page``: ValueError for a limit that is not a positive int, both
    cursors given, a ``ts_before`` that is not int milliseconds."""
    if type(limit) is not int or limit < 1:
        raise _invalid("limit", f"limit must be a positive int, not {limit!r}")
    if before is not None and after is not None:
        raise _invalid("before", "page takes at most one of before= and after=")
    if ts_before is not None and type(ts_before) is not int:
        raise _invalid("ts_before", f"ts_before must be int milliseconds or None, not {ts_before!r}")


__all__ = ["check_context", "check_number", "check_options", "check_page_arguments", "check_query", "check_state",
           "check_text", "check_window"]
