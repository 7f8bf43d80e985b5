"""The backend contract: what every session store of this package does.

:class:`SessionBackend` is a :class:`typing.Protocol` listing every public method of a
session store with its contract: arguments, result, errors, atomicity, durability and
cost. This is the one place the contract is written: the stores of this package inherit
it through :class:`jsonl_sessions.base.BaseStore`, so ``help()`` and
:func:`inspect.getdoc` show this text for their methods, and each store's class
docstring adds only what is its own (mechanisms, exact costs).
:class:`jsonl_sessions.SessionStore` (JSONL files) implements it; so can any other
backend, and the conformance suite in :mod:`jsonl_sessions.testing` checks one that
claims to. The async facade, the SDK adapters, the command line and the test harness
are typed against this protocol, not against a concrete store, so they accept any
backend. :class:`AsyncSessionBackend` is the same contract with every method a
coroutine.

Words used below:

- *session*: a key (any non-empty string) naming an ordered list of messages plus
  metadata. It exists from its first write until it is deleted.
- *guard*: the per-session mutation lock. It is exclusive across threads and
  processes, reentrant within a thread; every mutation runs under it. Reads take no
  lock and always see one committed state.
- *atomic*: after a crash (SIGKILL, power loss in ``"fsync"`` mode) or an I/O error at
  any point, the session holds either the state before the call or the state after it,
  never a mix.
- *durable*: in ``"fsync"`` mode, a mutation that returned is on stable storage; in
  ``"flush"`` mode it survives a crash of the process, not of the machine.
- ``n``: the number of messages of the session; ``N``: the number of sessions.
- *message id*: the store's ULID (26 chars, Crockford base32, upper case), strictly
  increasing within a session. A write that takes messages (:meth:`append`,
  :meth:`append_many`, :meth:`update_last`, :meth:`rewrite_messages`,
  :meth:`replace_conversation_state`) takes a caller's id only if it is a canonical ULID,
  greater than the session's newest id (and the one before it in the batch) and at most
  24 h ahead of the store's clock; anything else (a UUID, a provider's ``msg_...``) is
  refused at the call with :class:`~jsonl_sessions.errors.InvalidMessageError`, nothing
  written. So no sequence of accepted calls leaves a session where a plain append
  fails. A provider's or tool's id belongs in a field of its own (``provider_id``), kept
  in ``ChatMessage.extra``. Ids that are not ULIDs, left by an earlier version or another
  tool, are read and never block an append (new ids follow the newest ULID).

Every method raises :class:`~jsonl_sessions.errors.InvalidSessionKeyError` for a key
that is not a non-empty string (or cannot be stored), and
:class:`~jsonl_sessions.errors.LockTimeoutError` when a mutation waits longer than the
store's ``lock_timeout`` for the guard. A refused call changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol, runtime_checkable

from .listing import Sort
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
)
from .verification import VerifyReport


@runtime_checkable
class SessionBackend(Protocol):
    """A session store: every method below, with the contract its docstring states."""

    @property
    def durability(self) -> Durability:
        """``"fsync"`` or ``"flush"``: what a returned mutation survives (see above)."""
        ...

    # -- lifecycle of the store object ------------------------------------------------
    def close(self) -> None:
        """Release what the store object holds open (descriptors, connections). The
        stored data is untouched and every acknowledged write stays durable. Idempotent;
        the store must not be used afterwards. Concrete stores are also context
        managers whose exit calls this."""
        ...

    def lock(self, key: str) -> AbstractContextManager[object]:
        """Hold ``key``'s guard for a ``with`` block, so several calls are one unit for
        every other writer (threads and processes); the store's own methods work inside it
        (the guard is reentrant in the thread that holds it). A backend may guard more
        than the one session (a single-file database locks the whole file). Lock-free
        readers are not blocked. Not in :class:`AsyncSessionBackend`: the guard belongs to
        the thread that takes it.

        :raises LockTimeoutError: the guard was not acquired within ``lock_timeout``."""
        ...

    # -- reading messages ---------------------------------------------------------------
    def load(self, key: str) -> list[ChatMessage]:
        """Every message of the session, oldest first; ``[]`` for a missing session.

        Lenient: a stored message that does not parse is skipped with a logged warning,
        never raised. Use :meth:`try_load` before writing a history back.
        Cost: O(n)."""
        ...

    def try_load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` for a missing or empty session.

        :raises CorruptTranscriptError: a stored message does not parse, repeats an
            earlier message's id, or is a ULID not greater than the ULID before it (the
            error names the session, the file or row, the line and the byte offset).
        Cost: O(n)."""
        ...

    def load_with_timestamps(self, key: str) -> list[TimestampedMessage]:
        """As :meth:`load`, each message paired with its ``created_at`` as an aware UTC
        datetime (None when it has none). Cost: O(n)."""
        ...

    def get_message_count(self, key: str) -> int:
        """How many messages the session holds (a stored message that does not parse
        counts: it holds a position).

        :raises SessionNotFoundError: the session does not exist.
        Cost: O(1) in the session's length."""
        ...

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        """The message with id ``message_id``; None when the session does not exist, has
        no such message, or that message does not parse (logged). When a damaged
        transcript holds the id more than once, one of those messages. Cost: O(log n)
        (O(n) for an id that is not a ULID)."""
        ...

    def get_messages(self, key: str, *, limit: int | None = None, offset: int = 0) -> list[ChatMessage]:
        """The messages at positions ``[offset, offset + limit)`` (all from ``offset``
        when ``limit`` is None), oldest first. Positions are those of
        :meth:`get_message_count`; a message in the window that does not parse is skipped
        (logged), so windows concatenate to :meth:`load`.

        :raises SessionNotFoundError: the session does not exist.
        :raises ValueError: ``limit`` or ``offset`` is negative.
        Cost: O(window) parsing, plus locating the window (at worst O(n) cheap scanning,
        never parsing)."""
        ...

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
        """One page of messages, oldest first, for scrolling a long session.

        No cursor: the ``limit`` newest messages. ``before=id``: the ``limit`` newest
        older than that message. ``after=id``: the ``limit`` oldest newer than it
        (``after=""``: from the first message). ``ts_before`` (ms since the epoch): only
        messages created before it; combines with a cursor. ``breakpoint=True``: the page
        starts at the newest compaction summary within it. ``whole_turns=True``: a page
        never starts with a tool result whose tool call is just before it (it is widened
        back to the call; with ``after``, extended forward instead).

        ``Page.has_more`` says whether another page exists in the direction of travel;
        ``Page.before`` / ``Page.after`` are the cursors of the next older / newer page:
        opaque strings, the message's id in the normal case (any message id is a cursor);
        where an id does not name one message (a repeated or out-of-order line left by
        another tool), a cursor that does, so paging both ways reaches every message
        exactly once, in :meth:`load` order.
        A stored message that does not parse is skipped (logged) and does not count
        towards ``limit``. The page is read from one consistent state.

        :raises SessionNotFoundError: the session does not exist.
        :raises MessageNotFoundError: the cursor names no message of the session.
        :raises ValueError: ``limit < 1``, both cursors given, or a ``ts_before`` that is
            not int milliseconds.
        Cost: O(page + log n); never the whole session for a plain page."""
        ...

    # -- writing messages ---------------------------------------------------------------
    def append(self, key: str, message: MessageLike) -> str:
        """Append one message, creating the session if needed; return its id.

        A message without an id gets a new ULID, greater than every id of the session;
        a given id is kept if the store takes it (see *message id* above: a canonical
        ULID, greater than the last one, at most 24 h ahead).
        :raises SerializationError: the message is not JSON-serialisable.
        :raises InvalidMessageError: no ``role``, a malformed field, too large, an id
            that is not a canonical ULID or is more than 24 h ahead (the message says to
            keep a provider's id in an extra field), or an id not greater than the last one.
        :raises DuplicateMessageError: the id is already in the session.
        Atomic, durable. Cost: O(1) in the session's length."""
        ...

    def append_message(self, key: str, message: MessageLike) -> str:
        """The same as :meth:`append`."""
        ...

    def append_many(self, key: str, messages: Iterable[MessageLike]) -> list[str]:
        """Append several messages as one unit (all or none), creating the session if
        needed; return their ids in order. Errors as :meth:`append`, for any message of
        the batch, with nothing written. Atomic, durable. Cost: O(batch)."""
        ...

    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        """Remove the newest message; True when one was removed (False: no session or
        no message). With ``expected_id``, only when the newest message has that id
        (compare-and-remove).

        :raises CorruptTranscriptError: the newest message does not parse (unchanged).
        Atomic, durable. Cost: O(1) in the session's length."""
        ...

    def update_last(self, key: str, message: MessageLike, *, expected_id: str | None = None) -> bool:
        """Replace the newest message; True when one was replaced. With
        ``expected_id``, only when the newest message has that id. The new message keeps
        the old id and ``created_at`` unless it carries its own (the old id as it is,
        whatever it is; another id by the rule of *message id*).

        Errors as :meth:`append`, and :class:`CorruptTranscriptError` when the newest
        message does not parse. Atomic, durable. Cost: O(1) in the session's length."""
        ...

    def rewrite_messages(self, key: str, messages: Iterable[MessageLike]) -> None:
        """Replace every message of the session at once (creating it if needed).
        Messages without ids get ids that keep the order increasing; given ids follow the
        rule of *message id* (increasing within the list).

        :raises CorruptTranscriptError: the current messages do not all parse (nothing
            is replaced; repair first).
        Errors as :meth:`append` for the new messages. Atomic, durable.
        Cost: O(old + new)."""
        ...

    def replace_conversation_state(self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool) -> None:
        """Replace the messages and the trim-breadcrumb flag as ONE atomic unit
        (creating the session if needed). Errors as :meth:`rewrite_messages`.
        Atomic, durable. Cost: O(old + new)."""
        ...

    def replace_conversation_state_if_exists(
        self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool
    ) -> bool:
        """As :meth:`replace_conversation_state`, only while the session exists: False,
        and nothing written, when it does not (a deleted session is never recreated)."""
        ...

    def clear_messages(self, key: str) -> int:
        """Remove every message, keeping the session and its metadata; the number
        removed (0 for a missing session).

        :raises CorruptTranscriptError: the current messages do not all parse.
        Atomic, durable. Cost: O(n)."""
        ...

    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        """Fork: create ``target`` with ``source``'s messages up to and including
        ``up_to_message_id`` (all when None), with the same ids and timestamps, and
        record ``parent`` and ``fork_point`` in its metadata. Returns the fork-point id,
        None when nothing was copied (an empty source still makes an empty target).

        :raises SessionNotFoundError: ``source`` does not exist.
        :raises SessionExistsError: ``target`` exists.
        :raises MessageNotFoundError: unknown ``up_to_message_id`` (nothing created).
        Atomic (the target appears whole or not at all), durable. Cost: O(copied)."""
        ...

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        """Revert: keep the messages up to and including ``up_to_message_id``; return
        how many newer ones were removed.

        :raises SessionNotFoundError: the session does not exist.
        :raises MessageNotFoundError: unknown id (nothing changed).
        :raises CorruptTranscriptError: a message to remove does not parse (unchanged).
        Atomic, durable. Cost: O(log n + removed)."""
        ...

    # -- sessions -------------------------------------------------------------------------
    def session_exists(self, key: str) -> bool:
        """Whether the session exists. Cost: O(1)."""
        ...

    def list_sessions(self) -> list[str]:
        """Every session's key, sorted. Cost: O(N), no message is read."""
        ...

    def delete_session(self, key: str) -> bool:
        """Delete the session (messages and metadata); True if it existed.
        Atomic (after a crash the session is there whole or not at all), durable."""
        ...

    def delete_session_owned(self, key: str, owner_principal_id: str) -> bool:
        """Delete the session only when its recorded principal is
        ``owner_principal_id``; True when deleted. Fails closed: a missing session, no
        recorded owner, another owner or an empty ``owner_principal_id`` gives False with
        nothing deleted. The check and the deletion are one unit under the session's
        guard, which :meth:`set_session_principal` takes too.

        :raises CorruptMetadataError: the metadata cannot be read (nothing deleted)."""
        ...

    def cleanup_stale(self, ttl_hours: float) -> int:
        """Delete every session with no activity (message or metadata change, by the wall
        clock) within the last ``ttl_hours``; the number deleted. A ``running`` session is
        never deleted, nor one whose metadata cannot be read (its state is unknown:
        logged). Each deletion is atomic.

        :raises TypeError: ``ttl_hours`` is not a number.
        :raises ValueError: ``ttl_hours`` is negative or not finite.
        Cost: O(N)."""
        ...

    def compact(self, key: str, *, repair: bool = False) -> int:
        """Rewrite the session without what is not a message: a torn tail, and exact
        duplicates (an entry with the same id and the same bytes as an earlier one;
        entries without an id are never duplicates). Returns the number of entries dropped
        (0: nothing written). The order and bytes of the rest are kept.

        :raises SessionNotFoundError: the session does not exist.
        :raises CorruptTranscriptError: a stored message does not parse, repeats an
            earlier id with other bytes, or is a ULID out of order (nothing changed),
            unless ``repair=True``: then the original is first kept in a quarantine copy
            (logged; never removed by the store), what does not parse is dropped, and
            every other message is kept in place: one with a repeated or out-of-order id
            under a new ULID, its old id in the extra field ``original_id``.
        Atomic, durable. Cost: O(n)."""
        ...

    def search(self, query: SessionQuery) -> list[SessionMetadata]:
        """Sessions whose name or message text contains ``query.keyword``, newest activity
        first (ties: key order), at most ``query.limit`` (None: all), only those attributed
        to ``query.agent_alias`` when given. An empty keyword matches every session.

        Matching is case-insensitive by Unicode case folding (``str.casefold``:
        ``"STRASSE"`` matches ``"straße"``), without normalisation (a precomposed "é" does
        not match "e" + combining accent). Message text is a string ``content``, and in a
        list ``content`` every string item and every object's ``"text"`` string (a single
        part object as ``content`` counts too); roles, ids and other fields are not
        searched. Messages that do not parse are skipped, never an error.

        :raises TypeError: ``query`` is not a :class:`SessionQuery`, or its text is not a str.
        :raises ValueError: ``query.limit`` is not None or an int >= 0.
        Cost: O(total size of the scanned sessions)."""
        ...

    def search_messages(self, text: str, *, roles: Iterable[str] | None = None, keys: Iterable[str] | None = None,
                        agent_alias: str | None = None, name: str | None = None, since: int | None = None,
                        until: int | None = None, limit: int = 50, cursor: str | None = None) -> SearchPage:
        """The messages whose searchable text holds every term of ``text``, newest first,
        at most ``limit``, with the cursor of the next page.

        ``text``: words and ``"quoted phrases"``; a message matches when each occurs in its
        searchable text (the text of its ``content``, as :meth:`search` reads it: parts
        joined by a newline) by Unicode case folding (``str.casefold``: ``"strasse"``
        matches ``"Straße"``); no term (an empty ``text``) matches every message. Filters:
        ``roles`` (the message's role is one of them), ``keys`` (the session is one of
        them), ``agent_alias`` (the session is attributed to it), ``name`` (the session's
        name contains it, case folded), ``since`` / ``until`` (``created_at`` in
        ``[since, until)``, ms; a message without ``created_at`` passes neither).
        Order: ``created_at`` descending (messages without one last), then session key,
        then the later message of a session first. ``cursor`` is the ``cursor`` of the
        previous page (opaque); the next page starts strictly after its last hit. Each
        hit has a ``snippet`` of the text around the first match and the offsets of the
        matches in it (:mod:`jsonl_sessions.matcher`). Messages that do not parse are
        skipped, never an error.

        :raises TypeError: an argument of the wrong type.
        :raises ValueError: ``limit`` is not an int from 1 to 10,000, or ``cursor`` is
            not a cursor of this search (:class:`InvalidArgumentError`); a key of ``keys``
            cannot name a session (:class:`InvalidSessionKeyError`).
        Reads one committed state of each session; takes no lock. Cost: O(total size of
        the sessions the filters leave), less where the backend's full-text index answers."""
        ...

    def verify(self, keys: Iterable[str] | None = None, *, fix: bool = False) -> VerifyReport:
        """Check the stored data (every session, or only ``keys``) for damage and for what
        interrupted writes left: messages that do not parse (each with its 1-based line
        and byte offset), ids that do not strictly increase, metadata that does not parse
        or name its session, counters that disagree with the messages, and what the
        backend's own storage can hold wrong (files, permissions, leftovers; a database's
        integrity check); a key asked for that does not exist is a ``missing-session``
        problem. Every backend returns the same types
        (:class:`~jsonl_sessions.verification.VerifyReport` of
        :class:`~jsonl_sessions.verification.Finding`); each documents its kinds.

        Read-only: without ``fix`` nothing is written, no guard is taken and no recovery
        runs. With ``fix=True`` the findings marked ``fixable`` (what a killed writer
        left) are cleared, each session under its guard, and the report describes the
        store after, with what was cleared in ``fixed``; messages are never changed.

        :raises InvalidSessionKeyError: a key of ``keys`` is invalid (nothing checked).
        :raises InvalidArgumentError: ``keys`` is a string rather than a collection of keys.
        Cost: O(store): every stored byte is read once (of the sessions named, when ``keys``)."""
        ...

    # -- metadata ----------------------------------------------------------------------------
    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        """The session's metadata; None when it does not exist.

        :raises CorruptMetadataError: the metadata cannot be read.
        Cost: O(1) in the session's length."""
        ...

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
        """Sessions' metadata, sorted, filtered and paged; without arguments every session
        in key order. A session whose metadata cannot be read is listed with what its
        storage tells (logged), never an error.

        ``sort``: ``"key"``, ``"updated_at"``, ``"created_at"``, ``"name"`` or
        ``"message_count"``; ties are broken by the key, in the same direction; a session
        without the value (no name, no ``created_at``) comes after every session with one
        in both directions. ``descending`` reverses the order. Filters (all given must
        hold): ``state`` (the run state), ``agent_alias``, ``name_prefix`` (the name
        starts with it, case-sensitive; a session without a name never matches),
        ``updated_since`` (``updated_at >= updated_since``, an aware datetime).
        At most ``limit`` sessions (None: all), after skipping ``offset`` of them or from
        ``cursor`` on. The result is a list (:class:`~jsonl_sessions.types.SessionList`)
        whose ``cursor`` continues the listing (None: this was the last page).

        The cursor is keyset paging: it names the sort value and key of the last session
        returned, and the next page holds the sessions after that position as they are
        when it is read. Walking pages by cursor, a session that exists throughout and
        whose sort value does not change appears exactly once; sessions added meanwhile
        appear when their position is after the cursor; one whose sort value changed
        between two pages may appear twice or not at all. An offset shifts when sessions
        are added or removed before it.

        :raises InvalidArgumentError: an unknown ``sort`` or ``state``, a negative
            ``limit`` or ``offset``, both ``cursor`` and ``offset``, a malformed cursor
            or one of another sort or direction, a naive ``updated_since``.
        Cost: O(N) in the sessions, no message is read (a backend may stop early: each
        states how)."""
        ...

    def get_session_name(self, key: str) -> str | None:
        """The name; None when the session is missing or has none."""
        ...

    def set_session_name(self, key: str, name: str) -> None:
        """Set the human-readable name (any string, "" included).

        :raises SessionNotFoundError: the session does not exist.
        Atomic, durable."""
        ...

    def get_session_agent_alias(self, key: str) -> str | None:
        """The agent alias the session is attributed to; None when missing or unset."""
        ...

    def set_session_agent_alias(self, key: str, agent_alias: str) -> None:
        """Attribute the session to an agent alias.

        :raises SessionNotFoundError: the session does not exist.
        Atomic, durable."""
        ...

    def get_session_trim_breadcrumb(self, key: str) -> bool | None:
        """Whether the messages start with a synthetic trim breadcrumb; None when the
        session is missing or never recorded it."""
        ...

    def set_session_trim_breadcrumb(self, key: str, present: bool) -> None:
        """Record the trim-breadcrumb flag.

        :raises SessionNotFoundError: the session does not exist.
        Atomic, durable."""
        ...

    def set_session_context(self, key: str, context: Mapping[str, str]) -> None:
        """Replace the session's context (a string-to-string map; ``{}`` clears it).

        :raises SessionNotFoundError: the session does not exist.
        :raises TypeError: not a mapping of strings to strings.
        Atomic, durable."""
        ...

    def set_session_principal(self, key: str, principal_id: str) -> None:
        """Record the principal that owns the session (non-empty).

        :raises SessionNotFoundError: the session does not exist.
        :raises ValueError: an empty principal.
        Atomic, durable."""
        ...

    def set_session_state(self, key: str, state: str, turn_id: str | None = None) -> None:
        """Set the run state (``"idle"``, ``"running"`` or ``"error"``) and the current
        turn (cleared on ``"idle"``). ``since`` (the store's clock) changes only when state
        or turn changes, so re-setting the same state and turn does not make a stuck turn
        look fresh.

        :raises SessionNotFoundError: the session does not exist.
        :raises ValueError: an unknown state.
        Atomic, durable."""
        ...

    def get_session_state(self, key: str) -> SessionState | None:
        """The run state; None when the session is missing or never had one."""
        ...

    def list_running_sessions(self) -> list[SessionMetadata]:
        """Every session in state ``"running"``, in key order. Cost: O(N)."""
        ...

    def list_stuck_sessions(self, threshold_secs: float) -> list[SessionMetadata]:
        """Every session that entered ``"running"`` more than ``threshold_secs`` ago (by
        the store's clock), in key order. TypeError / ValueError for a threshold that is
        not a finite number >= 0. Cost: O(N)."""
        ...

    def count_agent_attribution(self, agent_alias: str) -> int:
        """How many sessions are attributed to ``agent_alias``. Cost: O(N)."""
        ...

    def rename_agent_attribution(self, old_alias: str, new_alias: str) -> int:
        """Re-attribute every session of ``old_alias`` to ``new_alias``; the number of
        sessions changed (equal aliases: nothing is written and the number of sessions
        attributed to it is returned). Each session's change is atomic; never deletes.
        Cost: O(N)."""
        ...

    def clear_agent_attribution(self, agent_alias: str) -> int:
        """Remove the attribution to ``agent_alias`` from every session; the number
        changed. Each session's change is atomic; never deletes. Cost: O(N)."""
        ...


@runtime_checkable
class AsyncSessionBackend(Protocol):
    """:class:`SessionBackend` for asyncio code: the same methods, arguments, results
    and errors, each a coroutine that never blocks the event loop."""

    @property
    def durability(self) -> Durability: ...

    async def aclose(self) -> None:
        """:meth:`SessionBackend.close`, off the event loop."""
        ...

    async def load(self, key: str) -> list[ChatMessage]: ...
    async def try_load(self, key: str) -> list[ChatMessage]: ...
    async def load_with_timestamps(self, key: str) -> list[TimestampedMessage]: ...
    async def get_message_count(self, key: str) -> int: ...
    async def get_message(self, key: str, message_id: str) -> ChatMessage | None: ...
    async def get_messages(self, key: str, *, limit: int | None = None, offset: int = 0) -> list[ChatMessage]: ...
    async def page(
        self,
        key: str,
        *,
        limit: int = 100,
        before: str | None = None,
        after: str | None = None,
        ts_before: int | None = None,
        breakpoint: bool = False,
        whole_turns: bool = False,
    ) -> Page: ...
    async def append(self, key: str, message: MessageLike) -> str: ...
    async def append_message(self, key: str, message: MessageLike) -> str: ...
    async def append_many(self, key: str, messages: Iterable[MessageLike]) -> list[str]: ...
    async def remove_last(self, key: str, *, expected_id: str | None = None) -> bool: ...
    async def update_last(self, key: str, message: MessageLike, *, expected_id: str | None = None) -> bool: ...
    async def rewrite_messages(self, key: str, messages: Iterable[MessageLike]) -> None: ...
    async def replace_conversation_state(
        self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool
    ) -> None: ...
    async def replace_conversation_state_if_exists(
        self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool
    ) -> bool: ...
    async def clear_messages(self, key: str) -> int: ...
    async def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None: ...
    async def truncate_messages(self, key: str, up_to_message_id: str) -> int: ...
    async def session_exists(self, key: str) -> bool: ...
    async def list_sessions(self) -> list[str]: ...
    async def delete_session(self, key: str) -> bool: ...
    async def delete_session_owned(self, key: str, owner_principal_id: str) -> bool: ...
    async def cleanup_stale(self, ttl_hours: float) -> int: ...
    async def compact(self, key: str, *, repair: bool = False) -> int: ...
    async def search(self, query: SessionQuery) -> list[SessionMetadata]: ...
    async def search_messages(self, text: str, *, roles: Iterable[str] | None = None,
                              keys: Iterable[str] | None = None, agent_alias: str | None = None,
                              name: str | None = None, since: int | None = None, until: int | None = None,
                              limit: int = 50, cursor: str | None = None) -> SearchPage: ...
    async def verify(self, keys: Iterable[str] | None = None, *, fix: bool = False) -> VerifyReport: ...
    async def get_session_metadata(self, key: str) -> SessionMetadata | None: ...
    async def list_sessions_with_metadata(
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
    ) -> SessionList: ...
    async def get_session_name(self, key: str) -> str | None: ...
    async def set_session_name(self, key: str, name: str) -> None: ...
    async def get_session_agent_alias(self, key: str) -> str | None: ...
    async def set_session_agent_alias(self, key: str, agent_alias: str) -> None: ...
    async def get_session_trim_breadcrumb(self, key: str) -> bool | None: ...
    async def set_session_trim_breadcrumb(self, key: str, present: bool) -> None: ...
    async def set_session_context(self, key: str, context: Mapping[str, str]) -> None: ...
    async def set_session_principal(self, key: str, principal_id: str) -> None: ...
    async def set_session_state(self, key: str, state: str, turn_id: str | None = None) -> None: ...
    async def get_session_state(self, key: str) -> SessionState | None: ...
    async def list_running_sessions(self) -> list[SessionMetadata]: ...
    async def list_stuck_sessions(self, threshold_secs: float) -> list[SessionMetadata]: ...
    async def count_agent_attribution(self, agent_alias: str) -> int: ...
    async def rename_agent_attribution(self, old_alias: str, new_alias: str) -> int: ...
    async def clear_agent_attribution(self, agent_alias: str) -> int: ...


def backend_methods() -> list[str]:
    """The names of the :class:`SessionBackend` methods that act on stored data, sorted
    (``close``, ``lock`` and the ``durability`` property excluded): the list the async facade wraps and the
    conformance suite covers."""
    skip = {"close", "durability", "lock"}
    return sorted(
        name
        for name, value in vars(SessionBackend).items()
        if callable(value) and not name.startswith("_") and name not in skip
    )


__all__ = ["AsyncSessionBackend", "SessionBackend", "backend_methods"]
