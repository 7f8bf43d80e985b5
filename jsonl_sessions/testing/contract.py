"""The error contract of a session store, as a pytest mixin.

Subclass :class:`SessionStoreContract` in a test module, named ``Test...``, and give it a
``store`` fixture returning a fresh, empty store::

    import pytest
    from jsonl_sessions.testing import SessionStoreContract

    class TestMyStore(SessionStoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            return MyStore(tmp_path / "store")

The methods are not restated here: :data:`KEYED_METHODS`, :data:`ON_MISSING` and
:data:`WRITERS` are generated from the backend protocol
(:class:`~jsonl_sessions.protocol.SessionBackend`, see :func:`call` and
:func:`on_missing`), and the case tables name protocol methods and
parameters, so a store is held to the protocol's contract method by method.

Every test calls one method the wrong way (an invalid key, a missing session, a message
JSON cannot hold, an id that is duplicate or out of order, a stale ``expected_id``, an
unknown cursor or fork point, an invalid metadata value or listing argument) and checks
two things: the documented outcome (which exception, or which "nothing done" value) and
that **nothing changed**: every session, message, metadata field and activity time seen
through the public API is as before (and, when the backend can show them, the stored
bytes).

``verify`` is held to its contract too: a fresh and a healthy store verify clean (and
verifying changes nothing), a key asked for that does not exist is a
``missing-session`` problem, and, with the ``damage`` capability, a corrupt line is found
at its line and byte offset.

Capabilities (fixtures a subclass may override; the default skips the tests that need
it, as fsspec's and zarr's abstract suites do):

- ``damage``: an object with ``raw(key) -> bytes`` and ``append_raw(key, data)`` that
  reads and appends the stored bytes of a session's transcript, for the corruption and
  torn-tail contract (:class:`JsonlFileDamage` does it for the JSONL file layout); with
  ``rewrite_raw(key, data)`` too (the same lines edited, as another tool would, behind
  the store's bookkeeping), the error offsets are checked after such edits.
"""

from __future__ import annotations

import inspect
import math
import re
import threading
import typing
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest

from ..errors import (
    CorruptTranscriptError,
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidSessionKeyError,
    MessageNotFoundError,
    SerializationError,
    SessionExistsError,
    SessionNotFoundError,
)
from ..ids import decode, encode
from ..protocol import SessionBackend, backend_methods
from ..types import SessionQuery
from .faults import JsonlFileDamage

# -- calls built from the protocol ------------------------------------------------------------
# The mixin does not restate the methods of a store: it reads them from the protocol
# (:func:`~jsonl_sessions.protocol.backend_methods`), builds each call from the method's
# signature with a valid sample value per parameter name (:data:`SAMPLES`), and derives
# what a method does on a missing session from its documented contract: ``:raises
# SessionNotFoundError:`` in its docstring, "creating" the session, or else the empty value
# of its return type (``[]``, ``False``, ``0``, ``None``). A method added to the protocol
# is covered without a change here, or :func:`check_samples` names the parameter that
# needs a sample.
KEY = "contract"
OTHER = "other \U0001f99c"
#: The parameters that name a session.
KEY_PARAMETERS = ("key", "source", "target")

#: A valid value for every parameter of the protocol's methods, by name (``target``: a
#: session that does not exist yet; the other keys: :data:`KEY`).
SAMPLES: dict[str, Any] = {
    "key": KEY,
    "source": KEY,
    "target": "fork target",
    "message": {"role": "user", "content": "x"},
    "messages": [{"role": "user", "content": "x"}],
    "breadcrumb_present": True,
    "message_id": "0" * 26,
    "up_to_message_id": "0" * 26,
    "name": "n",
    "agent_alias": "a",
    "old_alias": "planner",
    "new_alias": "coder",
    "present": True,
    "context": {"a": "b"},
    "principal_id": "alice",
    "owner_principal_id": "alice",
    "state": "running",
    "turn_id": "t1",
    "ttl_hours": 10**6,
    "threshold_secs": 10**6,
    "query": SessionQuery("x"),
    "text": "x",
}

#: What a method returns on a missing session when it neither raises nor creates it,
#: by its return type (the origin of an annotation, or None for an optional one).
_EMPTY: dict[Any, Any] = {list: [], bool: False, int: 0}


def signature(method: str) -> inspect.Signature:
    """The protocol's signature of ``method`` (annotations resolved)."""
    fn = getattr(SessionBackend, method)
    return inspect.signature(fn, eval_str=True)


def call(store: Any, method: str, **given: Any) -> Any:
    """``store.<method>(...)`` with ``given`` arguments and :data:`SAMPLES` for the other
    required ones (optional keyword-only ones keep their defaults)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, p in signature(method).parameters.items():
        if name == "self":
            continue
        if name not in given and p.default is not inspect.Parameter.empty:
            continue
        value = given[name] if name in given else SAMPLES[name]
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)
    return getattr(store, method)(*args, **kwargs)


def key_parameters(method: str) -> list[str]:
    return [name for name in signature(method).parameters if name in KEY_PARAMETERS]


def keyed_methods() -> dict[str, Callable[[Any, str], Any]]:
    """Every protocol method taking a session key, once per key parameter (labelled
    ``method(param)`` when it has several), called with that key."""
    out: dict[str, Callable[[Any, str], Any]] = {}
    for method in backend_methods():
        params = key_parameters(method)
        for param in params:
            label = method if len(params) == 1 else f"{method}({param})"
            out[label] = _keyed(method, param)
    return out


def _keyed(method: str, param: str) -> Callable[[Any, str], Any]:
    def keyed(store: Any, key: str) -> Any:
        return call(store, method, **{param: key})

    return keyed


def _raises_not_found(method: str, param: str) -> bool:
    """Whether the docstring documents SessionNotFoundError for a missing ``param``."""
    doc = inspect.getdoc(getattr(SessionBackend, method)) or ""
    found = re.search(r":raises SessionNotFoundError:([^:]*)", doc)
    if found is None:
        return False
    named = re.findall(r"``(\w+)``", found.group(1))
    return not named or param in named


def _creates(method: str, param: str) -> bool:
    """Whether the docstring says the call creates the session (or refers to one that does)."""
    doc = inspect.getdoc(getattr(SessionBackend, method)) or ""
    if f"create ``{param}``" in doc or "creating" in doc:
        return True
    same = re.search(r"The same as :meth:`(\w+)`", doc)
    return same is not None and _creates(same.group(1), param)


def on_missing() -> dict[str, Any]:
    """What each keyed method (labelled as in :func:`keyed_methods`) does on a missing
    session: the exception class it raises, or the value it returns. Methods that create
    the session are left out."""
    out: dict[str, Any] = {}
    for method in backend_methods():
        params = key_parameters(method)
        returns = signature(method).return_annotation
        for param in params:
            label = method if len(params) == 1 else f"{method}({param})"
            if _raises_not_found(method, param):
                out[label] = SessionNotFoundError
            elif not _creates(method, param):
                out[label] = _empty_value(returns, label)
    return out


def _empty_value(annotation: Any, label: str) -> Any:
    if type(None) in typing.get_args(annotation):
        return None
    origin = typing.get_origin(annotation) or annotation
    if origin not in _EMPTY:
        raise TypeError(f"{label}: no empty value known for a missing session returning {annotation!r}")
    return _EMPTY[origin]


def writers() -> list[str]:
    """The protocol methods that write messages (a ``message`` or ``messages`` parameter)."""
    return [m for m in backend_methods() if {"message", "messages"} & set(signature(m).parameters)]


def write(store: Any, method: str, key: str, bad: Any) -> Any:
    """Write ``bad`` with ``method``: alone, or after a good message in a batch."""
    if "messages" in signature(method).parameters:
        return call(store, method, key=key, messages=[{"role": "user", "content": "good"}, bad])
    return call(store, method, key=key, message=bad)


def check_samples() -> None:
    """Every parameter of every protocol method that has no default has a sample."""
    for method in backend_methods():
        for name, p in signature(method).parameters.items():
            if name != "self" and p.default is inspect.Parameter.empty and name not in SAMPLES:
                raise AssertionError(f"{method}: no sample value for parameter {name!r} (add it to SAMPLES)")


# -- the contract's tables -------------------------------------------------------------------
Call = Callable[[Any, str], Any]

#: Every protocol method that takes a session key, called with ``key`` (and valid other
#: arguments), generated from the protocol (see :func:`keyed_methods`).
KEYED_METHODS: dict[str, Call] = keyed_methods()

#: What each keyed method does on a missing session (a value, or the exception it
#: raises), derived from the protocol's documented contract.
ON_MISSING: dict[str, Any] = on_missing()

INVALID_KEYS: list[Any] = ["", "a\x00b", "\ud800", 5, None]

#: Messages every write method refuses, with the error: (message, exception type).
BAD_MESSAGES: dict[str, tuple[Any, type[Exception]]] = {
    "no role": ({"content": "x"}, InvalidMessageError),
    "role not a string": ({"role": 5, "content": "x"}, InvalidMessageError),
    "created_at a string": ({"role": "user", "created_at": "now"}, InvalidMessageError),
    "created_at a float": ({"role": "user", "created_at": 1.5}, InvalidMessageError),
    "id not a string": ({"role": "user", "id": 7}, InvalidMessageError),
    "kind not a string": ({"role": "user", "kind": 3}, InvalidMessageError),
    "not a mapping": ("hello", InvalidMessageError),
    "None": (None, InvalidMessageError),
    "object content": ({"role": "user", "content": object()}, SerializationError),
    "set content": ({"role": "user", "content": {1, 2}}, SerializationError),
    "bytes content": ({"role": "user", "content": b"raw"}, SerializationError),
    "NaN content": ({"role": "user", "content": [math.nan]}, SerializationError),
    "infinite content": ({"role": "user", "content": {"x": -math.inf}}, SerializationError),
    "int beyond 64 bits": ({"role": "user", "content": 2**70}, SerializationError),
    "created_at beyond 64 bits": ({"role": "user", "created_at": 2**64}, SerializationError),
    "created_at below -2**63": ({"role": "user", "created_at": -(2**63) - 1}, SerializationError),
    "created_at a bool": ({"role": "user", "created_at": True}, InvalidMessageError),
    "non-string object key": ({"role": "user", "content": {1: "x"}}, SerializationError),
    "non-JSON extra": ({"role": "user", "tool_calls": object()}, SerializationError),
}

#: Every protocol method that writes messages (generated from the protocol).
WRITERS: list[str] = writers()


class From:
    """An argument computed from the seeded store: ``From(fn)`` passes ``fn(store, key)``."""

    def __init__(self, fn: Callable[[Any, str], Any]) -> None:
        self.fn = fn


Case = tuple[str, dict[str, Any], type[Exception]]


def run_case(store: SessionBackend, case: Case, key: str = KEY) -> Any:
    """Call ``case``'s method on ``store`` (key ``key``, the case's arguments)."""
    method, given, _ = case
    args = {name: value.fn(store, key) if isinstance(value, From) else value for name, value in given.items()}
    if "key" in signature(method).parameters:
        args.setdefault("key", key)
    return call(store, method, **args)


#: Invalid metadata values: (method, arguments, exception type).
BAD_METADATA: dict[str, Case] = {
    "name not a string": ("set_session_name", {"name": 5}, TypeError),
    "name with a lone surrogate": ("set_session_name", {"name": "x\ud800"}, InvalidArgumentError),
    "alias None": ("set_session_agent_alias", {"agent_alias": None}, TypeError),
    "context a list": ("set_session_context", {"context": [("a", "b")]}, TypeError),
    "context value not a string": ("set_session_context", {"context": {"a": 1}}, TypeError),
    "context key not a string": ("set_session_context", {"context": {1: "a"}}, TypeError),
    "principal empty": ("set_session_principal", {"principal_id": ""}, InvalidArgumentError),
    "principal not a string": ("set_session_principal", {"principal_id": 5}, TypeError),
    "state unknown": ("set_session_state", {"state": "done"}, InvalidArgumentError),
    "state in capitals": ("set_session_state", {"state": "Running"}, InvalidArgumentError),
    "state None": ("set_session_state", {"state": None}, InvalidArgumentError),
    "turn id not a string": ("set_session_state", {"turn_id": 5}, TypeError),
    "owner not a string": ("delete_session_owned", {"owner_principal_id": 5}, TypeError),
}

#: Invalid arguments of the listing / lifecycle methods: (method, arguments, exception type).
BAD_LISTING: dict[str, Case] = {
    "cleanup_stale negative": ("cleanup_stale", {"ttl_hours": -1}, InvalidArgumentError),
    "cleanup_stale NaN": ("cleanup_stale", {"ttl_hours": math.nan}, InvalidArgumentError),
    "cleanup_stale infinite": ("cleanup_stale", {"ttl_hours": math.inf}, InvalidArgumentError),
    "cleanup_stale string": ("cleanup_stale", {"ttl_hours": "1"}, TypeError),
    "cleanup_stale bool": ("cleanup_stale", {"ttl_hours": True}, TypeError),
    "list_stuck_sessions negative": ("list_stuck_sessions", {"threshold_secs": -5}, InvalidArgumentError),
    "list_stuck_sessions string": ("list_stuck_sessions", {"threshold_secs": "5"}, TypeError),
    "search not a query": ("search", {"query": "alpha"}, TypeError),
    "search keyword not a string": ("search", {"query": SessionQuery(5)}, TypeError),  # type: ignore[arg-type]
    "search negative limit": ("search", {"query": SessionQuery("a", limit=-1)}, InvalidArgumentError),
    "search alias not a string": ("search", {"query": SessionQuery("a", agent_alias=3)}, TypeError),  # type: ignore[arg-type]
    "search_messages text not a string": ("search_messages", {"text": 5}, TypeError),
    "search_messages limit 0": ("search_messages", {"limit": 0}, InvalidArgumentError),
    "search_messages foreign cursor": ("search_messages", {"cursor": "x"}, InvalidArgumentError),
    "search_messages roles a string": ("search_messages", {"roles": "user"}, TypeError),
    "count_agent_attribution None": ("count_agent_attribution", {"agent_alias": None}, TypeError),
    "rename_agent_attribution None": ("rename_agent_attribution", {"old_alias": None}, TypeError),
    "rename_agent_attribution to None": ("rename_agent_attribution", {"new_alias": None}, TypeError),
    "clear_agent_attribution int": ("clear_agent_attribution", {"agent_alias": 5}, TypeError),
}

#: Invalid arguments of the history reads: (method, arguments, exception type).
BAD_READS: dict[str, Case] = {
    "get_messages negative limit": ("get_messages", {"limit": -1}, InvalidArgumentError),
    "get_messages negative offset": ("get_messages", {"offset": -1}, InvalidArgumentError),
    "get_messages string offset": ("get_messages", {"offset": "1"}, InvalidArgumentError),
    "page limit 0": ("page", {"limit": 0}, InvalidArgumentError),
    "page negative limit": ("page", {"limit": -3}, InvalidArgumentError),
    "page string limit": ("page", {"limit": "3"}, InvalidArgumentError),
    "page both cursors": ("page", {"before": From(lambda s, k: s.load(k)[-1].id),
                                   "after": From(lambda s, k: s.load(k)[0].id)}, InvalidArgumentError),
    "page float ts_before": ("page", {"ts_before": 1.5}, InvalidArgumentError),
    "page unknown before": ("page", {"before": "0" * 26}, MessageNotFoundError),
    "page unknown after": ("page", {"after": "7" + "Z" * 25}, MessageNotFoundError),
    "page empty before": ("page", {"before": ""}, MessageNotFoundError),
    "page bool limit": ("page", {"limit": True}, InvalidArgumentError),
    "get_messages bool offset": ("get_messages", {"offset": False}, InvalidArgumentError),
    "truncate unknown id": ("truncate_messages", {"up_to_message_id": "0" * 26}, MessageNotFoundError),
    "fork at an unknown id": ("copy_messages", {"source": KEY, "target": "fork", "up_to_message_id": "0" * 26},
                              MessageNotFoundError),
    "fork onto itself": ("copy_messages", {"source": KEY, "target": KEY}, SessionExistsError),
    "fork onto an existing session": ("copy_messages", {"source": KEY, "target": OTHER}, SessionExistsError),
}


def covered_methods() -> set[str]:
    """The protocol methods the contract's tests call on purpose (keyed methods on
    invalid keys and missing sessions, the writers with bad messages, every case table,
    the listings :func:`snapshot` compares, and ``verify``)."""
    names = {label.split("(")[0] for label in KEYED_METHODS} | set(WRITERS)
    names |= {case[0] for table in (BAD_METADATA, BAD_LISTING, BAD_READS) for case in table.values()}
    return names | {"list_sessions", "list_sessions_with_metadata", "list_running_sessions", "verify"}


def snapshot(store: SessionBackend, keys: tuple[str, ...] = (KEY, OTHER, "fork", "fork target")) -> dict[str, Any]:
    """Everything observable about ``store`` through the public API (for the named keys
    and every listed session): existence, messages (lenient load), metadata including
    activity time and size, run state, breadcrumb."""
    listed = store.list_sessions()
    out: dict[str, Any] = {"list_sessions": listed, "with_metadata": store.list_sessions_with_metadata()}
    for key in sorted(set(listed) | set(keys)):
        out[key] = (store.session_exists(key), [m.to_dict() for m in store.load(key)],
                    store.get_session_metadata(key), store.get_session_state(key),
                    store.get_session_trim_breadcrumb(key))
    return out


class SessionStoreContract:
    """Example tests of the error contract; subclass with a ``store`` fixture (see the
    module docstring). Each test starts from a store holding session ``KEY`` (three
    messages, a name, an alias, an owner, a run state, a context, a breadcrumb) and
    session ``OTHER`` (one message)."""

    @pytest.fixture
    def store(self) -> SessionBackend:
        raise NotImplementedError(
            "subclass SessionStoreContract and define a `store` fixture returning a fresh, empty store")

    @pytest.fixture
    def damage(self, store: SessionBackend) -> Any:
        """Capability: see the module docstring. None: the tests that need it skip."""
        return None

    @pytest.fixture
    def seeded(self, store: SessionBackend) -> SessionBackend:
        store.append_many(KEY, [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                                {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}])
        store.set_session_name(KEY, "contract session")
        store.set_session_agent_alias(KEY, "planner")
        store.set_session_principal(KEY, "alice")
        store.set_session_state(KEY, "running", "turn-1")
        store.set_session_context(KEY, {"cwd": "/tmp"})
        store.set_session_trim_breadcrumb(KEY, False)
        store.append(OTHER, {"role": "user", "content": "other"})
        return store

    @staticmethod
    def _unchanged(store: SessionBackend, before: dict[str, Any], what: str) -> None:
        after = snapshot(store)
        assert after == before, f"{what} changed the store:\nbefore {before}\nafter  {after}"

    @staticmethod
    def _damage(damage: Any) -> Any:
        if damage is None:
            pytest.skip("the backend does not offer the `damage` capability")
        return damage

    # -- keys ---------------------------------------------------------------------------
    @pytest.mark.parametrize("method", sorted(KEYED_METHODS))
    def test_invalid_key_is_refused(self, seeded: SessionBackend, method: str) -> None:
        """Every invalid key (empty, NUL, lone surrogate, not a str): InvalidSessionKeyError
        (a ValueError), nothing changed."""
        before = snapshot(seeded)
        for bad_key in INVALID_KEYS:
            exc = _raises(InvalidSessionKeyError, f"{method}({bad_key!r})", KEYED_METHODS[method], seeded, bad_key)
            assert isinstance(exc, ValueError)
            self._unchanged(seeded, before, f"{method}({bad_key!r})")

    # -- missing sessions ---------------------------------------------------------------
    @pytest.mark.parametrize("method", sorted(ON_MISSING))
    def test_missing_session(self, seeded: SessionBackend, method: str) -> None:
        """The documented result on a missing session (never created, or deleted), and no
        session created."""
        assert seeded.delete_session(OTHER) is True
        for missing in ("missing", OTHER):
            before = snapshot(seeded, keys=(missing,))
            expected = ON_MISSING[method]
            if isinstance(expected, type):
                exc = _raises(expected, f"{method}({missing!r}) on a missing session", KEYED_METHODS[method],
                              seeded, missing)
                assert expected is not SessionNotFoundError or isinstance(exc, KeyError)
            else:
                assert KEYED_METHODS[method](seeded, missing) == expected
            assert snapshot(seeded, keys=(missing,)) == before, f"{method} on a missing session changed the store"
            assert not seeded.session_exists(missing)

    def test_empty_append_many_creates_nothing(self, seeded: SessionBackend) -> None:
        before = snapshot(seeded, keys=("missing",))
        assert seeded.append_many("missing", []) == []
        assert snapshot(seeded, keys=("missing",)) == before

    def test_replace_if_exists_never_recreates_a_deleted_session(self, seeded: SessionBackend) -> None:
        assert seeded.delete_session(OTHER) is True
        before = snapshot(seeded)
        assert seeded.replace_conversation_state_if_exists(OTHER, [{"role": "user", "content": "x"}], True) is False
        self._unchanged(seeded, before, "replace_conversation_state_if_exists on a deleted session")

    # -- messages -----------------------------------------------------------------------
    @pytest.mark.parametrize("writer", WRITERS)
    @pytest.mark.parametrize("existing", [True, False], ids=["existing", "missing"])
    def test_bad_message_is_refused(self, seeded: SessionBackend, writer: str, existing: bool) -> None:
        """Each of :data:`BAD_MESSAGES`: its error, nothing written (an append_many or
        rewrite holding one bad message writes none of them), no session created."""
        key = KEY if existing else "missing"
        for case, (bad, error) in sorted(BAD_MESSAGES.items()):
            before = snapshot(seeded, keys=("missing",))
            if not existing and writer in ("update_last", "replace_conversation_state_if_exists"):
                try:
                    result = write(seeded, writer, key, bad)
                except error:
                    pass  # refusing the message before looking for the session is fine too
                else:
                    assert result is False, f"{writer} on a missing session ({case}) returned {result!r}"
            else:
                _raises(error, f"{writer}({key!r}, {case})", write, seeded, writer, key, bad)
            assert snapshot(seeded, keys=("missing",)) == before, (
                f"{writer} with a bad message ({case}) changed the store")
            assert not issubclass(error, SerializationError) or issubclass(error, TypeError)

    @pytest.mark.parametrize("writer", ["append", "append_many", "update_last", "rewrite_messages",
                                        "replace_conversation_state", "replace_conversation_state_if_exists"])
    @pytest.mark.parametrize("duplicate", [True, False], ids=["duplicate", "out_of_order"])
    def test_ids_must_strictly_increase(self, seeded: SessionBackend, writer: str, duplicate: bool) -> None:
        """A repeated id -> DuplicateMessageError; a new id sorting before the previous one
        -> InvalidMessageError, not DuplicateMessageError. Nothing changed."""
        ids = [m.id for m in seeded.load(KEY)]
        before = snapshot(seeded)
        if writer in ("append", "append_many", "update_last"):
            bad = ids[0] if duplicate else _below(ids[0])
            message = {"role": "user", "content": "late", "id": bad}
            call: Callable[[], Any] = {
                "append": lambda: seeded.append(KEY, message),
                "append_many": lambda: seeded.append_many(KEY, [{"role": "user", "content": "ok"}, message]),
                "update_last": lambda: seeded.update_last(KEY, message),
            }[writer]
        else:
            first = {"role": "user", "content": "a", "id": ids[1]}
            second = {"role": "user", "content": "b", "id": ids[1] if duplicate else ids[0]}
            call = {
                "rewrite_messages": lambda: seeded.rewrite_messages(KEY, [first, second]),
                "replace_conversation_state": lambda: seeded.replace_conversation_state(KEY, [first, second], True),
                "replace_conversation_state_if_exists":
                    lambda: seeded.replace_conversation_state_if_exists(KEY, [first, second], True),
            }[writer]
        with pytest.raises(InvalidMessageError) as info:
            call()
        assert isinstance(info.value, DuplicateMessageError) is duplicate, repr(info.value)
        assert isinstance(info.value, ValueError)
        self._unchanged(seeded, before, f"{writer} with a {'duplicate' if duplicate else 'out-of-order'} id")

    @pytest.mark.parametrize("method", ["remove_last", "update_last"])
    def test_stale_expected_id_changes_nothing(self, seeded: SessionBackend, method: str) -> None:
        ids = [m.id for m in seeded.load(KEY)]
        before = snapshot(seeded)
        for stale in (ids[0], ids[1], "0" * 26, ""):
            if method == "remove_last":
                assert seeded.remove_last(KEY, expected_id=stale) is False
            else:
                assert seeded.update_last(KEY, {"role": "user", "content": "x"}, expected_id=stale) is False
        self._unchanged(seeded, before, f"{method} with a stale expected_id")

    # -- history ------------------------------------------------------------------------
    def test_bad_history_arguments(self, seeded: SessionBackend) -> None:
        """Each of :data:`BAD_READS`: its error, nothing changed."""
        before = snapshot(seeded)
        for case, bad in sorted(BAD_READS.items()):
            _raises(bad[2], case, run_case, seeded, bad)
            self._unchanged(seeded, before, case)

    def test_the_key_is_checked_first(self, seeded: SessionBackend) -> None:
        """An invalid key with other bad arguments: InvalidSessionKeyError, whichever backend."""
        for bad_key in INVALID_KEYS:
            _raises(InvalidSessionKeyError, "get_messages", lambda k: seeded.get_messages(k, offset=-1), bad_key)
            _raises(InvalidSessionKeyError, "page", lambda k: seeded.page(k, limit=0, before="x", after="y"), bad_key)

    def test_windows_far_past_the_end(self, seeded: SessionBackend) -> None:
        """``get_messages`` offsets and limits of any size (also past 64 bits) are list
        slicing: past the end ``[]``, a huge limit everything from ``offset``; ``page``
        with a huge limit is every message."""
        msgs = [m.to_dict() for m in seeded.load(KEY)]
        for offset, limit in [(2**63, None), (2**63 - 1, 1), (2**64, 5), (1, 2**63), (0, 2**63 - 1), (2, 2**64),
                              (2**63 - 1, 2**63 - 1), (10**30, None), (0, 10**30)]:
            got = [m.to_dict() for m in seeded.get_messages(KEY, offset=offset, limit=limit)]
            want = msgs[offset:] if limit is None else msgs[offset:offset + limit]
            assert got == want, f"get_messages(offset={offset}, limit={limit})"
        for limit in (2**63 - 1, 2**63, 2**64, 10**30):
            page = seeded.page(KEY, limit=limit)
            assert [m.to_dict() for m in page.messages] == msgs and not page.has_more, f"page(limit={limit})"
            page = seeded.page(KEY, limit=limit, after="")
            assert [m.to_dict() for m in page.messages] == msgs and not page.has_more, f"page(limit={limit}, after='')"

    def test_page_cursors(self, seeded: SessionBackend) -> None:
        """``after=""`` pages from the first message; ``before=""`` names no message
        (MessageNotFoundError, as an unknown id does for either cursor)."""
        msgs = [m.to_dict() for m in seeded.load(KEY)]
        page = seeded.page(KEY, limit=2, after="")
        assert [m.to_dict() for m in page.messages] == msgs[:2] and page.has_more and page.before is None
        assert page.after == msgs[1]["id"]
        cursors: list[dict[str, Any]] = [{"before": ""}, {"before": "0" * 26}, {"after": "0" * 26}, {"before": "x"},
                                         {"after": "x"}]
        for cursor in cursors:
            exc = _raises(MessageNotFoundError, f"page({cursor})", lambda s, c: s.page(KEY, **c), seeded, cursor)
            assert isinstance(exc, ValueError)

    # -- values at the edges ------------------------------------------------------------
    def test_created_at_edges_are_kept_exactly(self, seeded: SessionBackend) -> None:
        """Every ``created_at`` the codec can write (the 64-bit range, -2**63 .. 2**64-1)
        is stored and read back exactly, by every writer."""
        edges = [0, -1, -(2**63), 2**63 - 1, 2**63, 2**64 - 1]
        ids = seeded.append_many("edges", [{"role": "user", "content": str(v), "created_at": v} for v in edges])
        assert [m.created_at for m in seeded.load("edges")] == edges
        assert [m.created_at for m in seeded.get_messages("edges", offset=3)] == edges[3:]
        assert [m.created_at for m in seeded.page("edges", limit=2).messages] == edges[-2:]
        got = seeded.get_message("edges", ids[-1])
        assert got is not None and got.created_at == 2**64 - 1
        stamped = seeded.load_with_timestamps("edges")  # beyond a datetime's years 1 to 9999: None
        assert [t.created_at for t in stamped] == [datetime(1970, 1, 1, tzinfo=timezone.utc),
                                                   datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc),
                                                   None, None, None, None]
        assert seeded.append("edges", {"role": "user", "content": "one", "created_at": 2**63 + 1})
        assert seeded.update_last("edges", {"role": "user", "content": "new", "created_at": 2**64 - 2}) is True
        assert seeded.load("edges")[-1].created_at == 2**64 - 2
        assert seeded.copy_messages("edges", "edges copy") == seeded.load("edges")[-1].id
        assert [m.created_at for m in seeded.load("edges copy")] == edges + [2**64 - 2]
        seeded.rewrite_messages("edges", [{"role": "user", "content": "r", "created_at": 2**63}])
        seeded.replace_conversation_state("edges copy", [{"role": "user", "created_at": 2**64 - 1}], True)
        assert [m.created_at for m in seeded.load("edges")] == [2**63]
        assert [m.created_at for m in seeded.load("edges copy")] == [2**64 - 1]
        assert seeded.page("edges copy", ts_before=2**64).messages[0].created_at == 2**64 - 1
        assert seeded.page("edges copy", ts_before=2**64 - 1).messages == []
        assert seeded.remove_last("edges copy") is True

    # -- metadata -----------------------------------------------------------------------
    def test_bad_metadata_value_is_refused(self, seeded: SessionBackend) -> None:
        """Each of :data:`BAD_METADATA`: its error, nothing changed."""
        before = snapshot(seeded)
        for case, bad in sorted(BAD_METADATA.items()):
            _raises(bad[2], case, run_case, seeded, bad)
            self._unchanged(seeded, before, case)

    def test_bad_listing_argument_is_refused(self, seeded: SessionBackend) -> None:
        """Each of :data:`BAD_LISTING`: its error, nothing changed (cleanup deleted nothing)."""
        before = snapshot(seeded)
        for case, bad in sorted(BAD_LISTING.items()):
            _raises(bad[2], case, run_case, seeded, bad)
            self._unchanged(seeded, before, case)

    def test_delete_session_owned_fails_closed(self, seeded: SessionBackend) -> None:
        """No recorded owner, another owner, an empty owner: False and nothing deleted."""
        before = snapshot(seeded)
        assert seeded.delete_session_owned(OTHER, "alice") is False  # no owner recorded
        assert seeded.delete_session_owned(KEY, "bob") is False
        assert seeded.delete_session_owned(KEY, "") is False
        assert seeded.delete_session_owned(KEY, "ALICE") is False
        self._unchanged(seeded, before, "delete_session_owned with the wrong owner")
        assert seeded.delete_session_owned(KEY, "alice") is True
        assert not seeded.session_exists(KEY)

    def test_cleanup_spares_running_and_fresh_sessions(self, seeded: SessionBackend) -> None:
        before = snapshot(seeded)
        assert seeded.cleanup_stale(10**6) == 0
        self._unchanged(seeded, before, "cleanup_stale with a long TTL")
        assert seeded.cleanup_stale(0) == 1  # OTHER; KEY is running
        assert seeded.list_sessions() == [KEY]

    # -- the guard ----------------------------------------------------------------------
    def test_lock_makes_several_calls_one_unit(self, seeded: SessionBackend) -> None:
        """``lock(key)``: an invalid key is refused; the holder's own calls work inside
        (reentrant, nested too); another thread waits until the block ends."""
        for bad_key in INVALID_KEYS:
            with pytest.raises(InvalidSessionKeyError), seeded.lock(bad_key):
                pass
        entered = threading.Event()

        def other() -> None:
            with seeded.lock(KEY):
                entered.set()

        with seeded.lock(KEY):
            with seeded.lock(KEY):
                seeded.append(KEY, {"role": "user", "content": "inside"})
            thread = threading.Thread(target=other)
            thread.start()
            assert not entered.wait(0.2), "another thread entered the guard while it was held"
            seeded.remove_last(KEY)
        thread.join(30)
        assert entered.is_set(), "the guard was not released"
        assert [m.content for m in seeded.load(KEY)][-1] == [{"type": "text", "text": "hello"}]

    # -- verify -------------------------------------------------------------------------
    def test_a_fresh_store_verifies_clean(self, store: SessionBackend) -> None:
        report = store.verify()
        assert report.ok and report.findings == [] and report.fixed == [], report.findings
        assert (report.sessions, report.messages, report.bytes) == (0, 0, 0)

    def test_a_healthy_store_verifies_clean_and_verify_changes_nothing(self, seeded: SessionBackend) -> None:
        before = snapshot(seeded)
        report = seeded.verify()
        assert report.ok and report.problems == [], report.problems
        assert (report.sessions, report.messages) == (2, 4) and report.bytes > 0
        only = seeded.verify([OTHER])
        assert only.ok and (only.sessions, only.messages) == (1, 1), only.problems
        fixed = seeded.verify(fix=True)
        assert fixed.ok and fixed.fixed == [], fixed.problems
        self._unchanged(seeded, before, "verify")

    def test_verify_names_a_missing_session_and_refuses_bad_keys(self, seeded: SessionBackend) -> None:
        before = snapshot(seeded)
        report = seeded.verify(["no such session", OTHER])
        assert [(f.kind, f.key, f.severity) for f in report.problems] == [
            ("missing-session", "no such session", "problem")], report.problems
        assert (report.sessions, report.messages) == (1, 1)
        _raises(InvalidSessionKeyError, "verify([''])", seeded.verify, [""])
        _raises(InvalidArgumentError, "verify('a key')", seeded.verify, KEY)
        self._unchanged(seeded, before, "verify")

    def test_verify_finds_a_corrupt_line_with_its_line_and_offset(self, seeded: SessionBackend, damage: Any) -> None:
        """A line another tool wrote that does not parse is a problem of its session,
        named by its 1-based line and byte offset; verify (with fix too) leaves the
        stored bytes as they are, and the other session stays clean."""
        damage = self._damage(damage)
        good = seeded.load(KEY)
        offset = len(damage.raw(KEY))
        damage.append_raw(KEY, b'{"role": 5, "garbage"\n')
        raw = damage.raw(KEY)
        report = seeded.verify()
        assert not report.ok
        assert {f.key for f in report.problems} == {KEY}, report.problems
        assert [(f.line, f.offset) for f in report.problems if f.line is not None] == [(len(good) + 1, offset)]
        assert not any(f.fixable for f in report.problems)
        assert seeded.verify([OTHER]).ok
        after_fix = seeded.verify(fix=True)
        assert after_fix.fixed == [] and after_fix.problems == report.problems
        assert damage.raw(KEY) == raw, "verify changed a damaged session"

    def test_corrupt_line_is_reported_precisely_and_refused(self, seeded: SessionBackend, damage: Any) -> None:
        """try_load names the line and byte offset; load skips it; every write that would
        destroy it refuses (CorruptTranscriptError) with the bytes unchanged; append keeps it."""
        damage = self._damage(damage)
        good = seeded.load(KEY)
        offset = len(damage.raw(KEY))
        damage.append_raw(KEY, b'{"role": 5, "garbage"\n')
        seeded.append(KEY, {"role": "user", "content": "after"})
        with pytest.raises(CorruptTranscriptError) as info:
            seeded.try_load(KEY)
        assert (info.value.line, info.value.offset) == (len(good) + 1, offset), info.value
        assert [m.content for m in seeded.load(KEY)] == [m.content for m in good] + ["after"]
        raw = damage.raw(KEY)
        refusals: dict[str, Callable[[], Any]] = {
            "rewrite_messages": lambda: seeded.rewrite_messages(KEY, []),
            "replace_conversation_state": lambda: seeded.replace_conversation_state(KEY, [], True),
            "replace_conversation_state_if_exists": lambda: seeded.replace_conversation_state_if_exists(KEY, [], True),
            "clear_messages": lambda: seeded.clear_messages(KEY),
            "truncate_messages": lambda: seeded.truncate_messages(KEY, good[-1].id),
            "compact": lambda: seeded.compact(KEY),
        }
        for name, refused in refusals.items():
            with pytest.raises(CorruptTranscriptError):
                refused()
            assert damage.raw(KEY) == raw, f"{name} changed a transcript it refused"
        seeded.append(KEY, {"role": "user", "content": "later"})
        assert damage.raw(KEY).startswith(raw), "append removed or changed committed bytes"

    @pytest.mark.parametrize("method", ["remove_last", "update_last"])
    def test_corrupt_last_line_is_left_byte_for_byte(self, seeded: SessionBackend, damage: Any, method: str) -> None:
        damage = self._damage(damage)
        damage.append_raw(KEY, b"not json at all\n")
        raw = damage.raw(KEY)
        with pytest.raises(CorruptTranscriptError) as info:
            if method == "remove_last":
                seeded.remove_last(KEY)
            else:
                seeded.update_last(KEY, {"role": "user", "content": "x"})
        assert info.value.offset == raw.rindex(b"not json")
        assert damage.raw(KEY) == raw

    @pytest.mark.parametrize("method", ["remove_last", "update_last", "try_load", "truncate_messages", "compact"])
    def test_offsets_count_lines_edited_behind_the_store(self, seeded: SessionBackend, damage: Any,
                                                         method: str) -> None:
        """Another tool lengthens the first line and makes the last one corrupt: the error
        names the corrupt line at its true byte offset in the stored bytes as they are
        now, and nothing changes."""
        damage = self._damage(damage)
        if not hasattr(damage, "rewrite_raw"):
            pytest.skip("the backend's `damage` capability cannot edit stored lines")
        ids = [m.id for m in seeded.load(KEY)]
        lines = damage.raw(KEY).split(b"\n")[:-1]
        lines[0] = lines[0].replace(b'"be brief"', b'"be brief, and this was edited by another tool"')
        lines[-1] = b"not json, written over the last line"
        damage.rewrite_raw(KEY, b"".join(line + b"\n" for line in lines))
        raw = damage.raw(KEY)
        assert seeded.load(KEY)[0].content == "be brief, and this was edited by another tool"
        calls: dict[str, Callable[[], Any]] = {
            "remove_last": lambda: seeded.remove_last(KEY),
            "update_last": lambda: seeded.update_last(KEY, {"role": "user", "content": "x"}),
            "try_load": lambda: seeded.try_load(KEY),
            "truncate_messages": lambda: seeded.truncate_messages(KEY, ids[0]),
            "compact": lambda: seeded.compact(KEY),
        }
        with pytest.raises(CorruptTranscriptError) as info:
            calls[method]()
        assert (info.value.line, info.value.offset) == (3, raw.rindex(b"not json")), info.value
        assert damage.raw(KEY) == raw

    def test_torn_tail_is_not_a_message_nor_an_error(self, seeded: SessionBackend, damage: Any) -> None:
        damage = self._damage(damage)
        good = seeded.try_load(KEY)
        damage.append_raw(KEY, b'{"id":"7ZZZZZZZZZZZZZZZZZZZZZZZZZ","role":"user","content":"cut')
        assert seeded.try_load(KEY) == good
        assert seeded.get_message_count(KEY) == len(good)
        new = seeded.append(KEY, {"role": "user", "content": "next"})
        assert [m.id for m in seeded.try_load(KEY)] == [m.id for m in good] + [new]
        assert damage.raw(KEY).endswith(b"\n")


def _raises(error: type[BaseException], what: str, call: Callable[..., Any], *args: Any) -> BaseException:
    """The ``error`` that ``call(*args)`` raises; AssertionError naming ``what`` otherwise."""
    try:
        call(*args)
    except error as exc:
        return exc
    except Exception as exc:
        raise AssertionError(f"{what}: raised {exc!r}, not {error.__name__}") from exc
    raise AssertionError(f"{what}: did not raise {error.__name__}")


def _below(message_id: str) -> str:
    """An id sorting just before ``message_id`` (not in the session)."""
    value = decode(message_id)
    return encode(value - 1) if value else "0"


__all__ = ["BAD_LISTING", "BAD_MESSAGES", "BAD_METADATA", "BAD_READS", "KEY", "KEYED_METHODS", "KEY_PARAMETERS",
           "ON_MISSING", "OTHER", "SAMPLES", "WRITERS", "JsonlFileDamage", "SessionStoreContract", "call",
           "check_samples", "covered_methods", "keyed_methods", "on_missing", "run_case", "signature", "snapshot",
           "write", "writers"]
