"""What a failing check tells its reader: the operation, the model's result next to the
store's, and the calls that led there as a Python test to paste.

- :class:`Mismatch` (an ``AssertionError``): one operation whose result differs from the
  model's, with both values and where they first differ.
- :class:`Program`: the public calls a state machine run made on the store under test,
  kept as Python source. Ids the store chose are given names (``id_1 = store.append(...)``,
  ``ids_2[0]``) and later calls refer to those names, so the program runs again on a
  store that picks other ids. :meth:`Program.as_test` renders it as a pytest function.
- :class:`RecordingStore`: a transparent proxy that writes each call it forwards into a
  :class:`Program` and remembers which sessions the calls touched.

Costs: recording a call is O(size of its arguments) for the line of source; nothing is
rendered again unless a failure asks for the program.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

from ..types import ChatMessage, Page

#: Methods that change or read no single session: a call marks every session as touched.
GLOBAL_METHODS = frozenset({
    "cleanup_stale", "rename_agent_attribution", "clear_agent_attribution", "count_agent_attribution",
    "list_sessions", "list_sessions_with_metadata", "list_running_sessions", "list_stuck_sessions", "search",
    "verify",
})
#: Parameter positions that name a session, by method (all others: the first argument).
KEY_POSITIONS: dict[str, tuple[int, ...]] = {"copy_messages": (0, 1)}


def _first_difference(got: Any, want: Any) -> str:
    """Where two values first differ, in words (empty when nothing more useful than both)."""
    if isinstance(got, list) and isinstance(want, list):
        for i, (a, b) in enumerate(zip(got, want)):
            if a != b:
                return f"first difference at index {i}: model {b!r}, store {a!r}"
        if len(got) != len(want):
            return f"the model has {len(want)} items, the store {len(got)}"
    if is_dataclass(got) and type(got) is type(want) and not isinstance(got, type):
        names = [f.name for f in fields(got) if getattr(got, f.name) != getattr(want, f.name)]
        if names:
            return "fields that differ: " + ", ".join(
                f"{n} (model {getattr(want, n)!r}, store {getattr(got, n)!r})" for n in names)
    return ""


class Mismatch(AssertionError):
    """The store's result of ``operation`` is not the model's.

    ``operation`` is the call as Python (``store.try_load('A')``); ``got`` and ``want``
    the store's and the model's results (read-only attributes)."""

    def __init__(self, operation: str, got: Any, want: Any, detail: str = "", after: str = "") -> None:
        self.operation, self.got, self.want, self.detail, self.after = operation, got, want, detail, after
        where = detail or _first_difference(got, want)
        context = f" (checked after {after})" if after and after != operation else ""
        super().__init__(f"{operation}{context}: the store's result is not the model's\n"
                         f"  model: {want!r}\n  store: {got!r}" + (f"\n  {where}" if where else ""))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operation, self.got, self.want, self.detail, self.after))


class Program:
    """The calls of one run as Python source (see the module docstring)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, str] = {}  # a value the store chose (an id) -> the expression naming it
        self.imports: set[str] = set()
        self.last = ""  # the source of the newest call
        self._count = 0

    # -- values -----------------------------------------------------------------------
    def name(self, value: str, expression: str) -> None:
        """From now on, render ``value`` as ``expression`` (first name wins)."""
        self.names.setdefault(value, expression)

    def value(self, v: Any) -> str:
        """``v`` as Python source, with named values as their names."""
        if isinstance(v, str):
            return self.names.get(v, repr(v))
        if isinstance(v, float) and not math.isfinite(v):
            return f"float({str(v)!r})"
        if isinstance(v, list):
            return "[" + ", ".join(self.value(x) for x in v) + "]"
        if isinstance(v, tuple):
            return "(" + ", ".join(self.value(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, ChatMessage):
            self.imports.add("ChatMessage")
            parts = [self.value(v.role), self.value(v.content)]
            parts += [f"{n}={self.value(getattr(v, n))}" for n, default in
                      (("id", ""), ("created_at", None), ("kind", "message"), ("extra", {}))
                      if getattr(v, n) != default]
            return f"ChatMessage({', '.join(parts)})"
        if isinstance(v, datetime):
            self.imports.add("datetime")
            return repr(v).replace("datetime.timezone.utc", "timezone.utc").replace("datetime.datetime(", "datetime(")
        if is_dataclass(v) and not isinstance(v, type):
            self.imports.add(type(v).__name__)
            return f"{type(v).__name__}(" + ", ".join(f"{f.name}={self.value(getattr(v, f.name))}"
                                                      for f in fields(v)) + ")"
        return repr(v)

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """``store.method(...)`` as source."""
        parts = [self.value(a) for a in args] + [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        return f"store.{method}({', '.join(parts)})"

    # -- lines ------------------------------------------------------------------------
    def add(self, line: str) -> None:
        self.lines.append(line)

    def result(self, method: str, source: str, result: Any) -> None:
        """Add a call that returned ``result``: ids in the result get names."""
        ids = _ids_in(result)
        if not any(i not in self.names for i, _ in ids):
            self.add(source)
            return
        self._count += 1
        var = f"{'ids' if isinstance(result, list) and method == 'append_many' else 'got'}_{self._count}"
        if isinstance(result, str):
            var = f"id_{self._count}"
        self.add(f"{var} = {source}")
        for message_id, path in ids:
            self.name(message_id, var + path)

    def refused(self, source: str, error: BaseException) -> None:
        name = type(error).__name__
        if type(error).__module__.startswith("jsonl_sessions"):
            self.imports.add(name)
        self.add(f"with pytest.raises({name}):\n    {source}")

    def assertion(self, source: str, got: Any, want: Any) -> str:
        """The failed check as Python: ``source`` (a call) asserted equal to the model's
        ``want``, on the fields where ``got`` differs when the values are messages, pages or
        metadata (times the store chose differ on a new run; those fields are left out
        unless they are what differs)."""
        text = f"# the store returned: {got!r}\n"
        if isinstance(want, list) and isinstance(got, list) and all(
                isinstance(m, ChatMessage) for m in [*got, *want]):
            names = _message_fields(got, want)
            row = "(" + ", ".join(f"m.{n}" for n in names) + ("," if len(names) == 1 else "") + ")"
            expected = [tuple(getattr(m, n) for n in names) for m in want]
            return text + f"assert [{row} for m in {source}] == {self.value(expected)}"
        if is_dataclass(want) and type(got) is type(want) and not isinstance(want, type):
            differ = [f.name for f in fields(want) if getattr(got, f.name) != getattr(want, f.name)]
            if differ == ["messages"] and isinstance(got, Page) and isinstance(want, Page):
                return self.assertion(f"{source}.messages", got.messages, want.messages).replace(
                    "# the store returned", f"# the store returned {got!r}; its messages", 1)
            if differ:
                shown = ", ".join(f"got.{n}" for n in differ)
                values = tuple(getattr(want, n) for n in differ)
                return (text + f"got = {source}\nassert ({shown},) == {self.value(values)}")
        return text + f"assert {source} == {self.value(want)}"

    def as_test(self, failing: str | None = None, factory: str = "make_store") -> str:
        """The program as a pytest function; ``failing``: the last lines (the check that failed)."""
        names = sorted(self.imports - {"datetime"})
        head = ["import pytest"]
        if "datetime" in self.imports:
            head.append("from datetime import datetime, timezone")
        if names:
            head.append(f"from jsonl_sessions import {', '.join(names)}")
        body = [*self.lines, *([failing] if failing else [])]
        indented = "\n".join("    " + line.replace("\n", "\n    ") for line in body)
        return ("\n".join(head) + "\n\n\ndef test_reproduce(tmp_path):\n"
                f"    store = {factory}(tmp_path / 'store')  # your factory, as given to the harness\n{indented}\n")


def _message_fields(got: list[ChatMessage], want: list[ChatMessage]) -> list[str]:
    """The fields to compare two message lists on: the id, and every field that differs
    (role and content too when the lengths differ)."""
    names = ["id"]
    if len(got) != len(want):
        names += ["role", "content"]
    for n in ("role", "content", "kind", "extra", "created_at"):
        if n not in names and any(getattr(a, n) != getattr(b, n) for a, b in zip(got, want)):
            names.append(n)
    return names


def _ids_in(result: Any) -> list[tuple[str, str]]:
    """Store-chosen values in a result worth a name: ``(id, path from the variable)``."""
    if isinstance(result, str) and len(result) == 26:
        return [(result, "")]
    if isinstance(result, list):
        if all(isinstance(x, str) for x in result):
            return [(x, f"[{i}]") for i, x in enumerate(result) if len(x) == 26]
        return [(m.id, f"[{i}].id") for i, m in enumerate(result) if isinstance(m, ChatMessage) and m.id]
    messages = getattr(result, "messages", None)
    if isinstance(messages, list):
        return [(m.id, f".messages[{i}].id") for i, m in enumerate(messages) if isinstance(m, ChatMessage) and m.id]
    return []


class RecordingStore:
    """A proxy for ``store`` that records every public call it forwards in ``program``
    and adds the keys it touched to ``touched`` (``None`` in it: every session)."""

    def __init__(self, store: Any, program: Program, touched: set[str | None]) -> None:
        self._store = store
        self._program = program
        self._touched = touched

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name.startswith("_") or not callable(attr) or name in ("lock", "close"):
            return attr
        return self._recorded(name, attr)

    def _recorded(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            source = self._program.last = self._program.call(name, args, kwargs)
            if name in GLOBAL_METHODS:
                self._touched.add(None)
            else:
                for i in KEY_POSITIONS.get(name, (0,)):
                    if i < len(args) and isinstance(args[i], str):
                        self._touched.add(args[i])
            try:
                result = method(*args, **kwargs)
            except Exception as exc:
                self._program.refused(source, exc)
                raise
            self._program.result(name, source, result)
            return result

        return call


def touched_keys(touched: set[str | None], known: Iterable[str]) -> set[str]:
    """The sessions to check after a step: the touched ones (all if a global call ran)."""
    return set(known) if None in touched else {k for k in touched if k is not None}


__all__ = ["GLOBAL_METHODS", "Mismatch", "Program", "RecordingStore", "touched_keys"]
