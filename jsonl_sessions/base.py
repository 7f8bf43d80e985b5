"""BaseStore: what every session store of this package does the same way, written once.

:class:`BaseStore` implements the public methods whose logic does not depend on where
sessions are kept (argument checks and limits, the conversions of messages, the loads,
the page and window checks, the metadata setters and getters, the listings by run
state, attribution, ``compact`` over a compaction report) on a small set of primitives
each backend provides (listed below as the methods starting with ``_``). The methods that
are one storage operation (``session_exists``, ``get_message_count``, ``remove_last``,
``copy_messages``, ...) are the backend's own. A backend's class inherits
:class:`BaseStore` and adds its primitives and those methods.

The contract of every public method (arguments, results, errors, atomicity, durability,
cost) is written once, on :class:`jsonl_sessions.protocol.SessionBackend`, which
:class:`BaseStore` inherits: ``help()`` and :func:`inspect.getdoc` show it for every
store. A backend states its own costs and mechanisms in its class docstring, not on the
methods.

Rules the primitives can rely on: the key is valid (:func:`jsonl_sessions.keys.validate_key`
was called), messages are :class:`ChatMessage` objects, and every other argument was
checked (a primitive receives values, never raw input). A primitive checks nothing of
that again, and raises what the contract says for the state it finds (a missing
session, a corrupt row or line, a held guard).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from . import sidecar
from .arguments import (
    check_context,
    check_number,
    check_options,
    check_page_arguments,
    check_query,
    check_state,
    check_text,
    check_window,
)
from .compaction import CompactionReport
from .finding import Collector, MessageSearch, check_search
from .ids import now_ms
from .keys import validate_key
from .listing import Listing, Sort, check_listing, select
from .protocol import SessionBackend
from .types import (
    ChatMessage,
    Durability,
    MessageLike,
    Page,
    SearchPage,
    SessionList,
    SessionMetadata,
    SessionQuery,
    SessionState,
    TimestampedMessage,
    as_message,
    datetime_of_ms,
)

if TYPE_CHECKING:
    from typing_extensions import Self

log = logging.getLogger("jsonl_sessions")

#: The default bound on one encoded message (``max_message_bytes``) of every store.
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: The default ``lock_timeout`` of every store (seconds), which the command line uses too.
DEFAULT_LOCK_TIMEOUT = 30.0

#: A test of one session's metadata object (None: the object cannot be read).
Keep = Callable[[Mapping[str, Any] | None], bool]


_T = TypeVar("_T")


# -- search: the ranking every backend applies ----------------------------------------------
def search_order(found: Iterable[tuple[int, str, Mapping[str, Any] | None, _T]],
                 alias: str | None) -> list[tuple[Mapping[str, Any] | None, _T]]:
    """The sessions of ``found`` (``(activity ns, key, metadata object, item)``; the object
    None when unreadable) that a search with agent alias ``alias`` (None: any) looks at,
    in the order of its results: newest activity first, ties in key order. Each comes as
    ``(metadata object, item)``."""
    chosen = [f for f in found if alias is None or sidecar.text(f[2], "agent_alias") == alias]
    chosen.sort(key=lambda f: (-f[0], f[1]))
    return [(meta, item) for _activity, _key, meta, item in chosen]


def search_results(ordered: Iterable[tuple[Mapping[str, Any] | None, _T]], needle: str, limit: int | None,
                   mentions: Callable[[_T], bool],
                   describe: Callable[[_T], SessionMetadata | None]) -> list[SessionMetadata]:
    """The results of a search for the casefolded ``needle`` over ``ordered`` (see
    :func:`search_order`): a session matches when the keyword is empty, its name holds
    it, or ``mentions(item)`` (its message text holds it; asked only when the name does
    not); each match is ``describe(item)`` (None: it vanished meanwhile, skipped). Stops
    once ``limit`` sessions matched, so the sessions after them are never scanned."""
    out: list[SessionMetadata] = []
    for meta, item in ordered:
        if limit is not None and len(out) >= limit:
            break
        name = sidecar.text(meta, "name")
        if not needle or (name is not None and needle in name.casefold()) or mentions(item):
            found = describe(item)
            if found is not None:
                out.append(found)
    return out


def _running(meta: Mapping[str, Any] | None) -> bool:
    return sidecar.state(meta) == "running"


def _everything(_meta: Mapping[str, Any] | None) -> bool:
    return True


class BaseStore(SessionBackend):
    """The backend-neutral half of a session store (see the module docstring). A backend
    sets ``_durability`` and ``_clock`` (milliseconds since the epoch) and provides the
    abstract primitives below plus the contract's storage methods."""

    _durability: Durability
    _lock_timeout: float | None
    _max_message_bytes: int
    _clock: Callable[[], int]

    def _options(self, durability: Durability, lock_timeout: float | None, max_message_bytes: int,
                 clock: Callable[[], int] | None) -> None:
        """Check the options every store takes (ValueError, before anything is opened) and
        keep them; ``clock`` None is the wall clock."""
        check_options(durability, lock_timeout, max_message_bytes)
        self._durability = durability
        self._lock_timeout = lock_timeout
        self._max_message_bytes = max_message_bytes
        self._clock = clock or now_ms

    # -- primitives: reading --------------------------------------------------------------
    @abc.abstractmethod
    def _load(self, key: str, *, strict: bool) -> list[ChatMessage]:
        """Every message of ``key``; ``strict``: raise :class:`CorruptTranscriptError` for
        one that does not parse, else skip it with a logged warning."""

    @abc.abstractmethod
    def _get_messages(self, key: str, limit: int | None, offset: int) -> list[ChatMessage]:
        """The window ``[offset, offset + limit)`` (``limit``/``offset`` checked)."""

    @abc.abstractmethod
    def _page(self, key: str, limit: int, before: str | None, after: str | None, ts_before: int | None,
              breakpoint: bool, whole_turns: bool) -> Page:
        """One page (every argument checked: :func:`~jsonl_sessions.arguments.check_page_arguments`)."""

    # -- primitives: writing --------------------------------------------------------------
    @abc.abstractmethod
    def _append_many(self, key: str, messages: list[ChatMessage]) -> list[str]:
        """Append ``messages`` (at least one) as one unit; their ids."""

    @abc.abstractmethod
    def _update_last(self, key: str, message: ChatMessage, expected_id: str | None) -> bool:
        """Replace the newest message (see :meth:`update_last`)."""

    @abc.abstractmethod
    def _rewrite(self, key: str, messages: list[ChatMessage]) -> None:
        """Replace every message (see :meth:`rewrite_messages`)."""

    @abc.abstractmethod
    def _replace_state(self, key: str, messages: list[ChatMessage], breadcrumb: bool, *, if_exists: bool) -> bool:
        """Replace messages and breadcrumb flag as one unit; with ``if_exists``, False (and
        nothing written) for a missing session, which is checked before the messages."""

    @abc.abstractmethod
    def _delete_session_owned(self, key: str, owner: str) -> bool:
        """Delete ``key`` when its recorded principal is ``owner`` (non-empty), checked
        and deleted under the session's guard."""

    @abc.abstractmethod
    def _cleanup_stale(self, ttl_hours: float) -> int:
        """Delete the sessions idle for ``ttl_hours`` (checked: finite, >= 0)."""

    @abc.abstractmethod
    def _compaction_report(self, key: str, repair: bool) -> CompactionReport:
        """What ``compact`` did to ``key``, without logging."""

    @abc.abstractmethod
    def _search(self, needle: str, limit: int | None, alias: str | None) -> list[SessionMetadata]:
        """:meth:`search` for the casefolded keyword ``needle`` (checked query)."""

    @abc.abstractmethod
    def _find_messages(self, search: MessageSearch, collector: Collector) -> None:
        """Offer ``collector`` every message line (with its session key and 0-based
        position) of every session ``search.wants_session`` accepts; lines that cannot
        hold every term may be left out (see :mod:`jsonl_sessions.finding`)."""

    # -- primitives: metadata -------------------------------------------------------------
    @abc.abstractmethod
    def _meta_of(self, key: str) -> Mapping[str, Any] | None:
        """The metadata object of ``key`` (a sidecar's fields); None when the session does
        not exist. :class:`CorruptMetadataError` when it cannot be read."""

    @abc.abstractmethod
    def _set_field(self, key: str, name: str, value: object) -> None:
        """Set field ``name`` (``name``, ``agent_alias``, ``context``, ``principal_id``,
        ``trim_breadcrumb``) of an existing session to the checked ``value``, atomically
        under its guard. :class:`SessionNotFoundError` for a missing session; an unreadable
        object raises :class:`CorruptMetadataError` and is never overwritten."""

    @abc.abstractmethod
    def _set_state(self, key: str, state: str, turn: str | None) -> None:
        """Enter run state ``state`` for ``turn`` (checked; None for ``idle``) as
        :func:`jsonl_sessions.sidecar.set_state` does, under the guard.
        :class:`SessionNotFoundError` for a missing session."""

    @abc.abstractmethod
    def _where(self, keep: Keep) -> list[SessionMetadata]:
        """The metadata of every session whose metadata object ``keep`` accepts, in key
        order (an unreadable object is None to ``keep``, logged, never an error)."""

    def _list(self, listing: Listing) -> SessionList:
        """One page of :meth:`list_sessions_with_metadata` (arguments checked). By default
        the rules of :func:`jsonl_sessions.listing.select` over the full listing; a backend
        that can order, filter and stop early on its storage overrides it, and must
        return what that would."""
        return select(listing, self._where(_everything))

    def _count_where(self, keep: Keep) -> int:
        """How many sessions ``keep`` accepts (a backend may count without describing)."""
        return len(self._where(keep))

    def _list_all(self) -> list[SessionMetadata]:
        """Every session's metadata, in key order (the plain listing); by default
        :meth:`_where` of every session."""
        return self._where(_everything)

    @abc.abstractmethod
    def _reattribute(self, old: str, new: str | None) -> int:
        """Set ``agent_alias`` from ``old`` to ``new`` (None: remove it) on every session;
        the number changed. ``old != new``, both checked."""

    # -- the store object -------------------------------------------------------------------
    @property
    def durability(self) -> Durability:
        return self._durability

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------
    def load(self, key: str) -> list[ChatMessage]:
        return self._load(validate_key(key), strict=False)

    def try_load(self, key: str) -> list[ChatMessage]:
        return self._load(validate_key(key), strict=True)

    def _check_strict(self, key: str) -> int:
        """Raise what :meth:`try_load` raises, for a caller that then reads the session page
        by page (``export``); the number of messages (0 for a missing session). A backend
        that can overrides it to hold part of the session at a time (the JSONL file a block
        at a time, the databases a batch of rows at a time); this default loads it whole."""
        return len(self.try_load(key))

    def load_with_timestamps(self, key: str) -> list[TimestampedMessage]:
        return [TimestampedMessage(m, datetime_of_ms(m.created_at)) for m in self.load(key)]

    def get_messages(self, key: str, *, limit: int | None = None, offset: int = 0) -> list[ChatMessage]:
        validate_key(key)  # the key first, as every check
        check_window(limit, offset)
        return self._get_messages(key, limit, offset)

    def page(
        self,
        key: str,
        *,
        limit: int = 100,
        before: str | None = None,
        after: str | None = None,
        ts_before: int | None = None,
        breakpoint: bool = False,
        whole_turns: bool = False,
    ) -> Page:
        validate_key(key)
        check_page_arguments(limit, before, after, ts_before)
        return self._page(key, limit, before, after, ts_before, breakpoint, whole_turns)

    # -- writing ---------------------------------------------------------------------------
    def append(self, key: str, message: MessageLike) -> str:
        return self.append_many(key, (message,))[0]

    def append_message(self, key: str, message: MessageLike) -> str:
        return self.append(key, message)

    def append_many(self, key: str, messages: Iterable[MessageLike]) -> list[str]:
        validate_key(key)
        msgs = [as_message(m) for m in messages]
        return self._append_many(key, msgs) if msgs else []

    def update_last(self, key: str, message: MessageLike, *, expected_id: str | None = None) -> bool:
        validate_key(key)
        return self._update_last(key, as_message(message), expected_id)

    def rewrite_messages(self, key: str, messages: Iterable[MessageLike]) -> None:
        validate_key(key)
        self._rewrite(key, [as_message(m) for m in messages])

    def replace_conversation_state(self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool) -> None:
        validate_key(key)
        self._replace_state(key, [as_message(m) for m in messages], breadcrumb_present, if_exists=False)

    def replace_conversation_state_if_exists(
        self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool
    ) -> bool:
        validate_key(key)
        return self._replace_state(key, [as_message(m) for m in messages], breadcrumb_present, if_exists=True)

    # -- sessions --------------------------------------------------------------------------
    def delete_session_owned(self, key: str, owner_principal_id: str) -> bool:
        owner = check_text("owner_principal_id", owner_principal_id)
        validate_key(key)
        return bool(owner) and self._delete_session_owned(key, owner)

    def cleanup_stale(self, ttl_hours: float) -> int:
        return self._cleanup_stale(check_number("ttl_hours", ttl_hours))

    def compact(self, key: str, *, repair: bool = False) -> int:
        report = self._compaction_report(validate_key(key), repair)
        if report.quarantine is not None:
            log.warning("compact(repair=True) of session %r: the original is kept in %s", key, report.quarantine)
        return report.dropped

    def search(self, query: SessionQuery) -> list[SessionMetadata]:
        needle, limit, alias = check_query(query)
        return self._search(needle, limit, alias)

    def search_messages(self, text: str, *, roles: Iterable[str] | None = None, keys: Iterable[str] | None = None,
                        agent_alias: str | None = None, name: str | None = None, since: int | None = None,
                        until: int | None = None, limit: int = 50, cursor: str | None = None) -> SearchPage:
        search = check_search(text, roles, keys, agent_alias, name, since, until, limit, cursor)
        collector = search.collector()
        self._find_messages(search, collector)
        return collector.page()

    # -- metadata --------------------------------------------------------------------------
    def list_sessions_with_metadata(
        self,
        *,
        sort: Sort = "key",
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
        cursor: str | None = None,
        state: str | None = None,
        agent_alias: str | None = None,
        name_prefix: str | None = None,
        updated_since: datetime | None = None,
    ) -> SessionList:
        spec = check_listing(sort, descending, limit, offset, cursor, state, agent_alias, name_prefix, updated_since)
        if spec.everything:
            return SessionList(self._list_all())
        return self._list(spec)

    def get_session_name(self, key: str) -> str | None:
        return sidecar.text(self._meta_of(validate_key(key)), "name")

    def set_session_name(self, key: str, name: str) -> None:
        value = check_text("name", name)
        self._set_field(validate_key(key), "name", value)

    def get_session_agent_alias(self, key: str) -> str | None:
        return sidecar.text(self._meta_of(validate_key(key)), "agent_alias")

    def set_session_agent_alias(self, key: str, agent_alias: str) -> None:
        value = check_text("agent_alias", agent_alias)
        self._set_field(validate_key(key), "agent_alias", value)

    def get_session_trim_breadcrumb(self, key: str) -> bool | None:
        meta = self._meta_of(validate_key(key))
        value = None if meta is None else meta.get("trim_breadcrumb")
        return value if isinstance(value, bool) else None

    def set_session_trim_breadcrumb(self, key: str, present: bool) -> None:
        self._set_field(validate_key(key), "trim_breadcrumb", bool(present))

    def set_session_context(self, key: str, context: Mapping[str, str]) -> None:
        value = check_context(context)
        self._set_field(validate_key(key), "context", value)

    def set_session_principal(self, key: str, principal_id: str) -> None:
        value = check_text("principal_id", principal_id, empty=False)
        self._set_field(validate_key(key), "principal_id", value)

    def set_session_state(self, key: str, state: str, turn_id: str | None = None) -> None:
        new_state, turn = check_state(state, turn_id)
        self._set_state(validate_key(key), new_state, turn)

    def get_session_state(self, key: str) -> SessionState | None:
        return sidecar.run_state(self._meta_of(validate_key(key)))

    def list_running_sessions(self) -> list[SessionMetadata]:
        return self._where(_running)

    def list_stuck_sessions(self, threshold_secs: float) -> list[SessionMetadata]:
        threshold_ms = check_number("threshold_secs", threshold_secs) * 1000
        now = self._clock()

        def stuck(meta: Mapping[str, Any] | None) -> bool:
            since = sidecar.millis(meta, "state_since")
            return sidecar.state(meta) == "running" and since is not None and now - since > threshold_ms

        return self._where(stuck)

    # -- agent attribution -----------------------------------------------------------------
    def count_agent_attribution(self, agent_alias: str) -> int:
        alias = check_text("agent_alias", agent_alias)
        return self._count_where(lambda meta: sidecar.text(meta, "agent_alias") == alias)

    def rename_agent_attribution(self, old_alias: str, new_alias: str) -> int:
        old = check_text("old_alias", old_alias)
        new = check_text("new_alias", new_alias)
        if old == new:  # nothing to write: the sessions attributed to it
            return self.count_agent_attribution(old)
        return self._reattribute(old, new)

    def clear_agent_attribution(self, agent_alias: str) -> int:
        return self._reattribute(check_text("agent_alias", agent_alias), None)


__all__ = ["DEFAULT_LOCK_TIMEOUT", "DEFAULT_MAX_MESSAGE_BYTES", "BaseStore", "Keep", "search_order", "search_results"]
