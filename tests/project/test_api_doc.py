"""docs/api.md cannot drift from the code: every member of the backend protocol has a
section whose heading is its exact signature, every public member of SessionStore,
AsyncSessionStore and SqliteSessionStore is documented, nothing documented is missing from the code, and the
errors and data types listed are the exported ones with their fields and base types."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import re
from collections.abc import Callable
from typing import Any

import pytest

import jsonl_sessions
from jsonl_sessions import errors
from jsonl_sessions.protocol import AsyncSessionBackend, SessionBackend
from jsonl_sessions.sqlite import SqliteSessionStore

API = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"
CLASSES: dict[str, type] = {"SessionStore": jsonl_sessions.SessionStore,
                            "AsyncSessionStore": jsonl_sessions.AsyncSessionStore,
                            "SqliteSessionStore": SqliteSessionStore}


def _annotation(value: Any) -> str:
    return value if isinstance(value, str) else inspect.formatannotation(value)


def render(fn: Callable[..., Any], *, drop_first: bool, returns: bool = True) -> str:
    """``(a: T, *, b: U = 1) -> R`` as the docs write it: annotations as in the source."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1 if drop_first else 0:]
    parts: list[str] = []
    star = False
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.kind is p.VAR_POSITIONAL:
            star = True
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {p.default!r}"
        parts.append(text)
    result = "" if sig.return_annotation is sig.empty or not returns else f" -> {_annotation(sig.return_annotation)}"
    return f"({', '.join(parts)}){result}"


def members(protocol: type) -> dict[str, Any]:
    """The protocol's public members: methods and properties, as defined on it."""
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))}


def documented(value: Any, *, bound: bool) -> str:
    """The heading text after the name: ``(signature) -> R`` or ``: T`` for a property."""
    if isinstance(value, property):
        assert value.fget is not None
        return f": {_annotation(inspect.signature(value.fget).return_annotation)}"
    return render(value, drop_first=not bound)


def headings() -> dict[str, str]:
    """``### name...`` headings of docs/api.md: name (``Class.attr`` included) -> the rest."""
    found: dict[str, str] = {}
    for line in API.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"### ([A-Za-z_][\w.]*)(.*)", line)
        if match:
            assert match.group(1) not in found, f"documented twice: {match.group(1)}"
            found[match.group(1)] = match.group(2)
    return found


SYNC, ASYNC = members(SessionBackend), members(AsyncSessionBackend)
PROTOCOL = {**ASYNC, **SYNC}  # a sync member's heading carries the sync signature


@pytest.mark.parametrize("name", sorted(PROTOCOL))
def test_every_protocol_member_has_a_section_headed_by_its_exact_signature(name: str) -> None:
    docs = headings()
    assert name in docs, f"docs/api.md has no section `### {name}...`"
    assert docs[name] == documented(PROTOCOL[name], bound=False)


def test_async_protocol_is_the_sync_one_as_coroutines() -> None:
    """So documenting each member once, with its sync signature, documents both."""
    assert set(ASYNC) - set(SYNC) == {"aclose"} and set(SYNC) - set(ASYNC) == {"close", "lock"}
    for name, value in SYNC.items():
        if name in ("close", "lock"):
            continue
        if isinstance(value, property):
            assert isinstance(ASYNC[name], property)
            continue
        assert inspect.iscoroutinefunction(ASYNC[name]), name
        assert render(ASYNC[name], drop_first=True) == render(value, drop_first=True), name


def test_nothing_documented_is_missing_from_the_code() -> None:
    for name, rest in headings().items():
        owner, _, attr = name.partition(".")
        if name in PROTOCOL:
            continue
        assert owner in CLASSES, f"`### {name}` is neither a protocol member nor a member of {sorted(CLASSES)}"
        cls = CLASSES[owner]
        if not attr:  # the constructor
            assert rest == render(cls.__init__, drop_first=True, returns=False), name
            continue
        assert attr not in PROTOCOL, f"`### {name}`: a protocol member is documented as `### {attr}`"
        static = inspect.getattr_static(cls, attr)
        bound = isinstance(static, classmethod)
        assert rest == documented(static if isinstance(static, property) else getattr(cls, attr), bound=bound), name


@pytest.mark.parametrize("owner", sorted(CLASSES))
def test_every_public_member_of_the_stores_is_documented(owner: str) -> None:
    docs = headings()
    public = {name for name, _ in inspect.getmembers(CLASSES[owner]) if not name.startswith("_")}
    missing = {name for name in public if name not in docs and f"{owner}.{name}" not in docs}
    assert not missing, f"{owner} members without a section in docs/api.md: {sorted(missing)}"


def _table_rows(section: str) -> list[list[str]]:
    text = API.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


def test_the_errors_table_is_the_hierarchy() -> None:
    rows = {re.fullmatch(r"`(\w+)`", row[0]).group(1): row for row in _table_rows("Errors")}  # type: ignore[union-attr]
    assert set(rows) == set(errors.__all__) - {"SessionStoreError"}
    for name, (_, also, _, fields) in rows.items():
        cls = getattr(errors, name)
        assert issubclass(cls, errors.SessionStoreError)
        builtin = [base for base in cls.__mro__ if base.__module__ == "builtins" and base not in (object, BaseException,
                                                                                                  Exception)]
        stdlib = {b.__name__ for b in builtin if not any(o is not b and issubclass(o, b) for o in builtin)}
        assert set(re.findall(r"`(\w+Error)`", also)) - set(errors.__all__) == stdlib, name
        assert set(re.findall(r"`(\w+)`", fields)) == set(cls._fields), name


#: The modules of the data types ``jsonl_sessions`` exports.
DATA_MODULES = ("jsonl_sessions.types", "jsonl_sessions.verification")


def test_the_data_types_are_listed_with_their_fields() -> None:
    text = API.read_text(encoding="utf-8").split("## Data types\n", 1)[1].split("\n## ", 1)[0]
    listed = dict(re.findall(r"^- `(\w+)\(([^)]*)\)`", text, re.MULTILINE))
    exported = {name for name in jsonl_sessions.__all__
                if getattr(getattr(jsonl_sessions, name), "__module__", "") in DATA_MODULES}
    assert set(listed) == exported
    for name, fields in listed.items():
        cls = getattr(jsonl_sessions, name)
        names = [f.split("=")[0].strip() for f in fields.replace("\n", " ").split(",")]
        if dataclasses.is_dataclass(cls):
            assert names == [f.name for f in dataclasses.fields(cls)], name
        else:
            assert names == list(inspect.signature(cls).parameters), name


def test_every_link_of_the_docs_points_inside_the_repository() -> None:
    """README and docs/ link only files that ship with the repository (or web pages)."""
    repo = API.parent.parent
    pages = [repo / "README.md", *sorted((repo / "docs").glob("*.md")), *sorted((repo / "benchmarks").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "#")):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            assert path.is_relative_to(repo) and path.exists(), f"{page.name} links {target}"
