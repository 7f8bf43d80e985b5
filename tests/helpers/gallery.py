"""The gallery of planted bugs: realistic mistakes in the in-memory store, in the small file
store of docs/testing.md and in the JSONL store, each with the test of the contract mixin
(or the fault tool) that must catch it first, and the operation the state machine must
name when it catches it.

Used by tests/harness/test_gallery.py (which asserts who catches each bug) and by
benchmarks/gallery.py (which times each catch under the ``ci`` profile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from _doc import run_blocks

from jsonl_sessions import ChatMessage, CorruptTranscriptError, SessionQuery, SessionStore
from jsonl_sessions.ids import assign_ids as real_assign_ids
from jsonl_sessions.testing import JsonlFileDamage, MemorySessionStore
from jsonl_sessions.testing.memory import _fresh
from jsonl_sessions.types import Page, SessionMetadata

FileStore: Any = run_blocks(definitions_only=True)["FileStore"]


# -- mutants of the in-memory store -----------------------------------------------------------
class RemoveLastRemovesFirst(MemorySessionStore):
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        msgs = self.try_load(key)
        if not msgs or expected_id not in (None, msgs[-1].id):
            return False
        self.rewrite_messages(key, msgs[1:])
        return True


class CursorOffByOne(MemorySessionStore):
    """A page before a cursor starts one message too early (skips the one just older)."""

    def _page(self, key: str, limit: int, before: str | None, after: str | None, ts_before: int | None,
              breakpoint: bool, whole_turns: bool) -> Page:
        if before is not None:
            ids = [m.id for m in self.load(key)]
            if before in ids and ids.index(before) > 0:
                before = ids[ids.index(before) - 1]
        return super()._page(key, limit, before, after, ts_before, breakpoint, whole_turns)


class CountStaleAfterTruncate(MemorySessionStore):
    """A count cache that truncate_messages forgets to update."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counts: dict[str, int] = {}

    def get_message_count(self, key: str) -> int:
        real = super().get_message_count(key)
        return self.counts.get(key, real)

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        before = super().get_message_count(key) if self.session_exists(key) else 0
        removed = super().truncate_messages(key, up_to_message_id)
        self.counts[key] = before
        return removed

    def _forget(self, key: str) -> None:
        self.counts.pop(key, None)

    def _append_many(self, key: str, msgs: list[Any]) -> list[str]:
        self._forget(key)
        return super()._append_many(key, msgs)

    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        self._forget(key)
        return super().remove_last(key, expected_id=expected_id)

    def _rewrite(self, key: str, msgs: list[Any]) -> None:
        self._forget(key)
        super()._rewrite(key, msgs)

    def clear_messages(self, key: str) -> int:
        self._forget(key)
        return super().clear_messages(key)

    def delete_session(self, key: str) -> bool:
        self._forget(key)
        return super().delete_session(key)


class CaseSensitiveSearch(MemorySessionStore):
    def search(self, query: SessionQuery) -> list[SessionMetadata]:
        found = super().search(query)
        return [md for md in found if query.keyword in (md.name or "") or any(
            query.keyword in str(m.content) for m in self.load(md.key))]


class ForkDropsForkPoint(MemorySessionStore):
    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        point = super().copy_messages(source, target, up_to_message_id=up_to_message_id)
        with self._change(target):
            self._ref.sessions[target].fork_point = None
        return point


class ReplaceIfExistsResurrects(MemorySessionStore):
    def _replace_state(self, key: str, msgs: list[Any], breadcrumb: bool, *, if_exists: bool) -> bool:
        super()._replace_state(key, msgs, breadcrumb, if_exists=False)
        return True


def _ids_plus_one(key: str, messages: Any, previous: str | None, now_ms: int, taken: Any) -> Any:
    """The id rule with a counter: a new id is the previous one + 1 (the clock only for
    the first)."""
    from jsonl_sessions import ids as ulid

    records = real_assign_ids(key, messages, previous, now_ms, taken)
    last = ulid.decode(previous) if previous else None
    for message, record in zip(messages, records):
        value = ulid.decode(record["id"])
        if not message.id and last is not None and value is not None:
            record["id"] = ulid.encode(last + 1)
        last = ulid.decode(record["id"])
    return records


class IdReusedAfterRemoveLast(MemorySessionStore):
    """A new id is the previous one + 1: after remove_last, the next append hands out the
    removed message's id again."""

    def _stored(self, key: str, messages: list[Any], previous: str | None, existing: Any = ()) -> list[Any]:
        from jsonl_sessions import codec
        from jsonl_sessions.testing import memory

        records = _ids_plus_one(key, messages, previous, self._clock(), frozenset(existing).__contains__)
        return [memory._decoded(line) for line in codec.encode_records(records, key, self._max_message_bytes)]


class WholeTurnsIgnored(MemorySessionStore):
    """page(whole_turns=True) is answered as a plain page: a tool result can start it."""

    def _page(self, key: str, limit: int, before: str | None, after: str | None, ts_before: int | None,
              breakpoint: bool, whole_turns: bool) -> Page:
        return super()._page(key, limit, before, after, ts_before, breakpoint, False)


class UpdateLastDoesNothing(MemorySessionStore):
    def _update_last(self, key: str, m: Any, expected_id: str | None) -> bool:
        return self._ref.can_change_last(key, expected_id)


class TruncateKeepsOneTooFew(MemorySessionStore):
    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        removed = super().truncate_messages(key, up_to_message_id)
        with self._change(key):
            self._ref.sessions[key].messages[-1:] = []
        return removed


class DeleteOwnedIgnoresOwner(MemorySessionStore):
    def _delete_session_owned(self, key: str, owner: str) -> bool:
        return self.delete_session(key)


class GetMessageReturnsACopyOfTheLast(MemorySessionStore):
    """get_message answers with the last message for an unknown id."""

    def get_message(self, key: str, message_id: str) -> Any:
        found = super().get_message(key, message_id)
        if found is None and self.session_exists(key):
            msgs = self.load(key)
            return _fresh(msgs[-1:])[0] if msgs else None
        return found


# -- mutants of the file store of docs/testing.md -------------------------------------------
class FileStoreForgetsNames(FileStore):  # type: ignore[misc,valid-type]
    """The name is not saved: a new instance reads every session without it."""

    def save(self, key: str) -> None:
        session = self._ref.sessions.get(key)
        name = None if session is None else session.name
        if session is not None:
            session.name = None
        try:
            super().save(key)
        finally:
            if session is not None:
                session.name = name


class FileStoreDeleteKeepsFile(FileStore):  # type: ignore[misc,valid-type]
    """delete_session forgets the session in memory but leaves its file."""

    def save(self, key: str) -> None:
        if key in self._ref.sessions:
            super().save(key)


class FileStoreLosesTheLastAppend(FileStore):  # type: ignore[misc,valid-type]
    """Saves after an append of one message are skipped (a lost write): a new instance
    misses the message."""

    def _append_many(self, key: str, msgs: list[Any]) -> list[str]:
        self.skip = len(msgs) == 1 and key in self._ref.sessions
        try:
            return super()._append_many(key, msgs)  # type: ignore[no-any-return]
        finally:
            self.skip = False

    def save(self, key: str) -> None:
        if not getattr(self, "skip", False):
            super().save(key)


# -- a mutant of the JSONL store -------------------------------------------------------------
class TornTailReadAsMessage(SessionStore):
    """Reads take the final fragment without its newline (left by a crash mid-append) for a
    line: a message when it parses, a corrupt line when it does not."""

    def _load(self, key: str, *, strict: bool) -> list[ChatMessage]:
        msgs = super()._load(key, strict=strict)
        raw = JsonlFileDamage(self).raw(key) if self.session_exists(key) else b""
        tail = raw[raw.rfind(b"\n") + 1:]
        if tail:
            try:
                msgs.append(ChatMessage.from_dict(orjson.loads(tail)))
            except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
                if strict:
                    raise CorruptTranscriptError(key=key, path=None, line=raw.count(b"\n") + 1,
                                                 offset=len(raw) - len(tail), reason=str(exc)) from exc
        return msgs


@dataclass(frozen=True)
class Bug:
    """A planted bug: the store class, the contract test that must fail first (None: no
    contract test covers it; the machine or a fault tool does), and the method the state
    machine's failure must name."""

    name: str
    store: Callable[..., Any]
    contract: str | None
    operation: str
    #: The storage capability the checks need (``damage`` of the contract, ``storage`` of
    #: the machine), or None.
    storage: Callable[[Any], Any] | None = None


GALLERY: list[Bug] = [
    Bug("remove_last removes the first message", RemoveLastRemovesFirst, "test_remove_last_removes_the_last_message",
        "remove_last"),
    Bug("off-by-one cursor (page before skips one)", CursorOffByOne, "test_page_cursors_walk_the_history", "page"),
    Bug("count stale after truncate", CountStaleAfterTruncate, "test_truncate_keeps_up_to_the_given_message",
        "truncate_messages"),
    Bug("case-sensitive search", CaseSensitiveSearch, "test_search_ignores_case", "search"),
    Bug("fork drops fork_point", ForkDropsForkPoint, "test_fork_copies_up_to_the_fork_point_and_records_it",
        "copy_messages"),
    Bug("replace_if_exists resurrects a deleted session", ReplaceIfExistsResurrects,
        "test_replace_if_exists_never_recreates_a_deleted_session", "replace_conversation_state_if_exists"),
    Bug("an id reused after remove_last", IdReusedAfterRemoveLast, "test_a_new_id_is_never_one_removed_from_the_end",
        "append"),
    Bug("page splits a tool call from its result", WholeTurnsIgnored,
        "test_whole_turns_page_keeps_a_tool_call_with_its_result", "page"),
    Bug("update_last does nothing", UpdateLastDoesNothing, "test_update_last_replaces_the_last_message",
        "update_last"),
    Bug("truncate keeps one too few", TruncateKeepsOneTooFew, "test_truncate_keeps_up_to_the_given_message",
        "truncate_messages"),
    Bug("delete_session_owned ignores the owner", DeleteOwnedIgnoresOwner, "test_delete_session_owned_fails_closed",
        "delete_session_owned"),
    Bug("get_message answers an unknown id with the last message", GetMessageReturnsACopyOfTheLast, None,
        "get_message"),
    Bug("file store: the name is not saved", FileStoreForgetsNames, None, "set_session_name"),
    Bug("file store: delete_session leaves the file", FileStoreDeleteKeepsFile, None, "delete_session"),
    Bug("file store: a lost write of an append", FileStoreLosesTheLastAppend, None, "append"),
    Bug("JSONL store: a torn tail read as a message", TornTailReadAsMessage,
        "test_torn_tail_is_not_a_message_nor_an_error", "try_load", storage=JsonlFileDamage),
]

#: The JSONL store's planted fsync / rollback bugs (tests/harness/test_harness_teeth.py),
#: caught by the fault tools, with the tool that catches each.
JSONL_BUGS = {"a lost fsync of an append": ("AppendWithoutFsync", "power-loss"),
              "a rewrite without its directory fsync": ("RewriteWithoutDirFsync", "power-loss"),
              "a failed append not rolled back": ("AppendNotRolledBack", "faults-transient")}


def machine_catch(bug: Bug, profile: str = "ci", **overrides: Any) -> tuple[str, str]:
    """Run check_backend on the bug's store; (the failing check, the failure's text). The
    check is the Mismatch's operation and the call it followed, or for another failure the
    last call of the printed program."""
    from jsonl_sessions.testing import Mismatch, check_backend

    try:
        check_backend(lambda path: bug.store(path), profile=profile, storage=bug.storage, database=None,
                      **overrides)
    except Mismatch as exc:
        return f"{exc.operation} (after {exc.after})", str(exc)
    except Exception as exc:  # noqa: BLE001 - an assertion, or an error the store raised: a catch
        notes = "\n".join(getattr(exc, "__notes__", []))
        calls = [line.strip() for line in notes.splitlines() if "store." in line and "make_store" not in line]
        return (calls[-1] if calls else type(exc).__name__), f"{type(exc).__name__}: {exc}\n{notes}"
    raise AssertionError(f"the state machine did not catch {bug.name!r}")
