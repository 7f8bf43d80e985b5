"""Calls of the backend contract built from the protocol itself.

The contract mixin does not restate the methods of a store: it reads them from
:class:`~jsonl_sessions.protocol.SessionBackend` (:func:`~jsonl_sessions.protocol.backend_methods`),
builds each call from the method's signature with a valid sample value per parameter
name (:data:`SAMPLES`), and derives what a method does on a missing session from its
documented contract: ``:raises SessionNotFoundError:`` in its docstring, "creating"
the session, or else the empty value of its return type (``[]``, ``False``, ``0``,
``None``). A method added to the protocol is covered without a change here, or
:func:`check_samples` names the parameter that needs a sample.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

from ..errors import SessionNotFoundError
from ..protocol import SessionBackend, backend_methods
from ..types import SessionQuery

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


__all__ = ["KEY", "KEY_PARAMETERS", "OTHER", "SAMPLES", "call", "check_samples", "keyed_methods", "on_missing",
           "signature", "write", "writers"]
