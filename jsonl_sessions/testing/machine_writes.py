"""The state machine's rules for the transcript writes: append (one, many, caller ids,
refused ids and values), remove_last / update_last, whole-transcript writes, clear,
delete, fork, truncate and compact. Each checks the store's answer against the
reference model and then records what the store chose (ids, times)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from .. import ids as ulid
from ..errors import CorruptTranscriptError, DuplicateMessageError, InvalidMessageError, SerializationError
from ..types import ChatMessage, as_message
from .machine_base import (
    KEYS,
    REFUSED,
    UNKNOWN_IDS,
    MachineBase,
    batches,
    expected_message,
    messages,
    new_keys,
    rare_large,
    shifted,
    unserializable,
)

Planned = list[tuple[ChatMessage | dict[str, Any], str]]


class WriteRules(MachineBase):
    """Rules for every method that changes a transcript."""

    # -- appending --------------------------------------------------------------------
    @rule(key=KEYS, message=rare_large, method=st.sampled_from(["append", "append_message"]))
    def append(self, key: str, message: ChatMessage | dict[str, Any], method: str) -> None:
        """Also on a damaged transcript: an append only looks at the tail."""
        previous = self.last_id(key)
        with self.window() as w:
            new_id = getattr(self.store, method)(key, message)
        self.check_new_id(key, new_id, previous)
        self.added(key, [self.expect(message, key, new_id, w)], w)

    @rule(key=KEYS, message=messages, gap=st.integers(min_value=1, max_value=2**70))
    def append_with_caller_id(self, key: str, message: ChatMessage | dict[str, Any], gap: int) -> None:
        if not self.intact(key):
            return
        previous = self.last_id(key)
        given = shifted(previous, gap) if previous else ulid.encode((self.now() << 80) + gap)
        m = as_message(message).replace(id=given)
        with self.window() as w:
            assert self.store.append(key, m) == given, "a caller-supplied id must be kept"
        self.added(key, [self.expect(m, key, given, w)], w)

    @rule(key=KEYS, batch=batches)
    def append_many(self, key: str, batch: list[ChatMessage | dict[str, Any]]) -> None:
        previous = self.last_id(key)
        with self.window() as w:
            got = self.store.append_many(key, batch)
        assert isinstance(got, list) and len(got) == len(batch), f"append_many returned {got!r}"
        for new_id in got:
            self.check_new_id(key, new_id, previous)
            previous = new_id
        self.added(key, [self.expect(m, key, i, w) for m, i in zip(batch, got)], w)

    @precondition(lambda self: any(s.messages for s in self.model.values()))
    @rule(data=st.data(), message=messages, many=st.booleans())
    def append_bad_id(self, data: st.DataObject, message: ChatMessage | dict[str, Any], many: bool) -> None:
        """A duplicate id -> DuplicateMessageError; a new id sorting before the last one ->
        InvalidMessageError (not a duplicate). Nothing is written."""
        candidates = sorted(k for k, s in self.model.items() if s.messages and self.intact(k))
        if not candidates:
            return
        key = data.draw(st.sampled_from(candidates), label="key")
        msgs = self.model[key].messages
        duplicate = data.draw(st.booleans(), label="duplicate")
        bad = data.draw(st.sampled_from([m.id for m in msgs])) if duplicate else shifted(msgs[0].id, -1)
        batch = [as_message(message).replace(id=bad)]
        if many:
            batch.insert(0, as_message(message))
        with pytest.raises(InvalidMessageError) as info:
            if many:
                self.store.append_many(key, batch)
            else:
                self.store.append(key, batch[0])
        assert isinstance(info.value, DuplicateMessageError) is duplicate, repr(info.value)
        self.stats["errors checked"] += 1

    @rule(key=KEYS, batch=st.lists(messages, min_size=2, max_size=4), data=st.data())
    def append_many_with_duplicate(self, key: str, batch: list[ChatMessage | dict[str, Any]],
                                   data: st.DataObject) -> None:
        if not self.intact(key):
            return
        previous = self.last_id(key)
        dup = shifted(previous, 1) if previous else ulid.encode(self.now() << 80)
        second = data.draw(st.integers(min_value=1, max_value=len(batch) - 1), label="second")
        built = [as_message(m) for m in batch]
        built[0] = built[0].replace(id=dup)
        built[second] = built[second].replace(id=dup)
        with pytest.raises(DuplicateMessageError):
            self.store.append_many(key, built)
        self.stats["errors checked"] += 1

    @rule(key=KEYS, bad=unserializable, message=messages, many=st.booleans())
    def append_unserializable(self, key: str, bad: Any, message: ChatMessage | dict[str, Any], many: bool) -> None:
        """Content JSON cannot hold -> SerializationError (a TypeError); nothing written,
        no session created (also when the bad message comes after a good one)."""
        wrong = as_message(message).replace(content=[bad])
        with pytest.raises(SerializationError):
            if many:
                self.store.append_many(key, [message, wrong])
            else:
                self.store.append(key, wrong)
        self.stats["errors checked"] += 1

    # -- changing the end -------------------------------------------------------------
    @rule(key=KEYS, data=st.data())
    def remove_last(self, key: str, data: st.DataObject) -> None:
        if not self.intact(key):
            return
        msgs = self.model[key].messages if key in self.model else []
        mode = data.draw(st.sampled_from(["plain", "expected", "stale"]), label="mode")
        if mode == "stale":
            expected_id: str | None = data.draw(st.sampled_from([m.id for m in msgs[:-1]] + list(UNKNOWN_IDS)),
                                                label="stale")
        else:
            expected_id = msgs[-1].id if (mode == "expected" and msgs) else None
        done = self.store.remove_last(key, expected_id=expected_id)
        assert done is self.ref.remove_last(key, expected_id=expected_id), f"remove_last returned {done!r}"
        self.stats["removals"] += done

    @rule(key=KEYS, message=rare_large, data=st.data())
    def update_last(self, key: str, message: ChatMessage | dict[str, Any], data: st.DataObject) -> None:
        if not self.intact(key):
            return
        msgs = self.model[key].messages if key in self.model else []
        m = as_message(message)
        if not msgs:
            assert self.store.update_last(key, m) is False
            assert self.store.update_last(key, m, expected_id=UNKNOWN_IDS[0]) is False
            return
        mode = data.draw(st.sampled_from(["plain", "expected", "stale", "same_id", "new_id", "between",
                                          "duplicate", "out_of_order"]), label="mode")
        old = msgs[-1]
        previous = msgs[-2].id if len(msgs) > 1 else None
        if mode == "stale":
            assert self.store.update_last(key, m, expected_id=previous or shifted(old.id, 1)) is False
            return
        if mode in ("duplicate", "out_of_order"):
            assume(previous is not None)
            bad = previous if mode == "duplicate" else shifted(msgs[0].id, -1)
            with pytest.raises(InvalidMessageError) as info:
                self.store.update_last(key, m.replace(id=bad))
            assert isinstance(info.value, DuplicateMessageError) is (mode == "duplicate"), repr(info.value)
            self.stats["errors checked"] += 1
            return
        new_id = self._updated_id(mode, old.id, previous, data)
        sent = m.replace(id=new_id) if mode in ("same_id", "new_id", "between") else m
        expected_id = old.id if mode == "expected" else None
        assert self.store.update_last(key, sent, expected_id=expected_id) is True
        created = old.created_at if m.created_at is None else m.created_at
        assert created is not None
        assert self.ref.update_last(key, expected_message(sent, new_id, created), expected_id=expected_id)
        self.stats["updates"] += 1

    @staticmethod
    def _updated_id(mode: str, old: str, previous: str | None, data: st.DataObject) -> str:
        """The id an update in ``mode`` gives the last message."""
        if mode == "new_id":
            return shifted(old, data.draw(st.integers(min_value=1, max_value=2**60), label="gap"))
        if mode != "between":
            return old
        high = ulid.decode(old)
        assert high is not None
        low = ulid.decode(previous) if previous else high - 2**40
        assert low is not None
        # The draw must not depend on the ids' values (they come from the clock, and
        # Hypothesis replays draws): without room between them the id stays the same.
        fraction = data.draw(st.integers(min_value=0, max_value=2**16 - 1), label="between")
        return ulid.encode(low + 1 + (high - low - 2) * fraction // (2**16 - 1)) if high - low > 1 else old

    # -- replacing everything ---------------------------------------------------------
    def _plan(self, kept: list[ChatMessage], new: list[ChatMessage | dict[str, Any]], with_ids: list[bool],
              gaps: list[int]) -> Planned:
        planned: Planned = [(m, m.id) for m in kept]
        cur = ulid.decode(kept[-1].id) if kept else (self.now() - 60_000) << 80
        assert cur is not None
        for message, give, gap in zip(new, with_ids, gaps):
            if give:
                cur += gap
                mid = ulid.encode(cur)
                planned.append((as_message(message).replace(id=mid), mid))
            else:
                cur += 2**20  # id-less messages take ids between the given ones
                planned.append((message, ""))
        return planned

    @rule(key=KEYS, keep=st.lists(st.booleans(), max_size=12), new=st.lists(messages, max_size=4),
          with_ids=st.lists(st.booleans(), min_size=4, max_size=4),
          gaps=st.lists(st.integers(min_value=2**24, max_value=2**79), min_size=4, max_size=4))
    def rewrite_messages(self, key: str, keep: list[bool], new: list[ChatMessage | dict[str, Any]],
                         with_ids: list[bool], gaps: list[int]) -> None:
        if not self.intact(key):
            return
        old = self.model[key].messages if key in self.model else []
        planned = self._plan([m for m, k in zip(old, keep) if k], new, with_ids, gaps)
        with self.window() as w:
            returned: Any = self.untyped.rewrite_messages(key, [m for m, _ in planned])
        assert returned is None, f"rewrite_messages returned {returned!r}"
        self.ref.rewrite_messages(key, self.learn_rewrite(key, planned, w), self.creation(key, w))
        self.stats["rewrites"] += 1

    @rule(key=KEYS, batch=st.lists(messages, min_size=2, max_size=4), duplicate=st.booleans(),
          method=st.sampled_from(["rewrite", "replace", "replace_if_exists"]))
    def rewrite_out_of_order(self, key: str, batch: list[ChatMessage | dict[str, Any]], duplicate: bool,
                             method: str) -> None:
        """Ids that do not strictly increase: InvalidMessageError (DuplicateMessageError for
        a repeated one) and nothing written, whichever whole-transcript write it is."""
        if not self.intact(key):
            return
        high = ulid.encode((self.now() << 80) + 1000)
        low = shifted(high, -10)
        built = [as_message(m) for m in batch]
        built[0] = built[0].replace(id=high)
        built[-1] = built[-1].replace(id=high if duplicate else low)
        if method == "replace_if_exists" and key not in self.model:
            assert self.store.replace_conversation_state_if_exists(key, built, True) is False
            return
        with pytest.raises(InvalidMessageError) as info:
            if method == "rewrite":
                self.store.rewrite_messages(key, built)
            elif method == "replace":
                self.store.replace_conversation_state(key, built, True)
            else:
                self.store.replace_conversation_state_if_exists(key, built, True)
        assert isinstance(info.value, DuplicateMessageError) is duplicate, repr(info.value)
        self.stats["errors checked"] += 1

    @rule(key=KEYS, prefix=st.lists(messages, max_size=2), keep=st.integers(min_value=0, max_value=4),
          crumb=st.booleans(), if_exists=st.booleans())
    def replace_conversation_state(self, key: str, prefix: list[ChatMessage | dict[str, Any]], keep: int,
                                   crumb: bool, if_exists: bool) -> None:
        """The trimming pattern: id-less messages (a breadcrumb) before a kept suffix."""
        if not self.intact(key):
            return
        old = self.model[key].messages if key in self.model else []
        kept = old[len(old) - min(keep, len(old)):]
        planned: Planned = [(m, "") for m in prefix] + [(m, m.id) for m in kept]
        with self.window() as w:
            if if_exists:
                done = self.store.replace_conversation_state_if_exists(key, [m for m, _ in planned], crumb)
                assert done is (key in self.model), f"replace_conversation_state_if_exists returned {done!r}"
                if not done:
                    return
            else:
                returned: Any = self.untyped.replace_conversation_state(key, [m for m, _ in planned], crumb)
                assert returned is None, f"replace_conversation_state returned {returned!r}"
        self.ref.replace_conversation_state(key, self.learn_rewrite(key, planned, w), crumb, self.creation(key, w))
        self.stats["replaces"] += 1

    @rule(key=KEYS)
    def clear_messages(self, key: str) -> None:
        if self.intact(key):
            assert self.store.clear_messages(key) == self.ref.clear_messages(key)

    @rule(key=KEYS)
    def delete_session(self, key: str) -> None:
        assert self.store.delete_session(key) is self.ref.delete_session(key)
        self.forget(key)

    # -- fork, revert, compact --------------------------------------------------------
    @rule(source=KEYS, dest=KEYS | new_keys, data=st.data())
    def copy_messages(self, source: str, dest: str, data: st.DataObject) -> None:
        target = dest  # ("target" is a reserved rule argument)
        if not (self.intact(source) and self.intact(target)):
            return
        self.known.add(target)
        up_to = None if data.draw(st.booleans(), label="all") else self.pick_id(data, source, "up_to")
        with self.window() as w:
            got = self.same_outcome(lambda: self.store.copy_messages(source, target, up_to_message_id=up_to),
                                    lambda: self.ref.copy_messages(source, target, 0, up_to_message_id=up_to))
        if got is not REFUSED:
            self.model[target].created_at = self.created_of(target, w)
            self.stats["forks"] += 1

    @rule(key=KEYS, data=st.data())
    def truncate_messages(self, key: str, data: st.DataObject) -> None:
        if not self.intact(key):
            return
        up_to = self.pick_id(data, key, "up_to")
        got = self.same_outcome(lambda: self.store.truncate_messages(key, up_to),
                                lambda: self.ref.truncate_messages(key, up_to))
        self.stats["truncations"] += got is not REFUSED

    @rule(key=KEYS, repair=st.booleans())
    def compact(self, key: str, repair: bool) -> None:
        """Drops the damage (duplicates always, corrupt lines only with ``repair``, into a
        quarantine file); refuses a corrupt transcript without ``repair``; a clean one: 0."""
        lines = self.damaged.get(key, [])
        bad = sum(kind == "bad" for kind, _ in lines)
        dropped = bad + sum(kind == "dup" for kind, _ in lines)
        if bad and not repair:
            with pytest.raises(CorruptTranscriptError):
                self.store.compact(key)
            self.stats["errors checked"] += 1
            return
        got = self.same_outcome(lambda: self.store.compact(key, repair=repair), lambda: self.ref.compact(key) + dropped)
        if got is not REFUSED and key in self.damaged:
            del self.damaged[key]
            self.quarantined += bad > 0
            self.stats["compactions that dropped lines"] += dropped > 0
            self.stats["repairs (quarantine files)"] += bad > 0
            self.storage_changed(key)


__all__ = ["WriteRules"]
