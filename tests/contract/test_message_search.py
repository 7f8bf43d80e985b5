"""search_messages on every backend: what matches (Unicode case folding, phrases, every
part of a list content), the order and its cursor, the filters, the refusals; and a
Hypothesis property that random stores answer every random search the same on every
backend and as a brute-force model does."""

from __future__ import annotations

import pathlib
import tempfile
from typing import Any

import pytest
from _budget import sized
from hypothesis import given, settings
from hypothesis import strategies as st
from stores import opener

from jsonl_sessions import InvalidArgumentError, InvalidSessionKeyError, SearchHit, SearchPage
from jsonl_sessions.matcher import parse

ANSI = "\x1b[31mERROR\x1b[0m"


def _fill(store: Any) -> None:
    store.append_many("de", [
        {"role": "user", "content": "Wo ist die Straße?", "created_at": 100},
        {"role": "assistant", "content": [{"type": "text", "text": "Die STRASSE ist"}, "dort drüben"], "created_at": 200},
        {"role": "tool", "content": f"build {ANSI}: strasse not found", "created_at": 200},
    ])
    store.append_many("jp", [
        {"role": "user", "content": "日本語のテキスト and strasse", "created_at": 200},
        {"role": "assistant", "content": {"type": "text", "text": "hello  world \U0001f642"}, "created_at": 50},
    ])
    store.set_session_name("de", "Deutsch Chat")
    store.set_session_agent_alias("jp", "bot")


def _ids(page: SearchPage) -> list[tuple[str, str]]:
    return [(h.key, h.role) for h in page.hits]


def test_search_folds_case_orders_newest_first_and_marks_matches(store: Any) -> None:
    _fill(store)
    page = store.search_messages("strasse")
    # created_at 200 (three: key "de" before "jp", the later message of "de" first), then 100
    assert _ids(page) == [("de", "tool"), ("de", "assistant"), ("jp", "user"), ("de", "user")]
    assert page.cursor is None
    user = page.hits[-1]
    assert user.snippet == "Wo ist die Straße?"
    assert user.matches == ((11, 17),)  # "Straße": six characters of the original text
    assert user.created_at == 100 and user.message_id
    assistant = page.hits[1]
    assert assistant.snippet == "Die STRASSE ist\ndort drüben"  # parts joined by a newline
    assert assistant.matches == ((4, 11),)
    tool = page.hits[0]
    assert tool.snippet[slice(*tool.matches[0])] == "strasse"


def test_search_terms_phrases_and_escaped_text(store: Any) -> None:
    _fill(store)
    assert _ids(store.search_messages("error")) == [("de", "tool")]  # text between ANSI escapes
    assert _ids(store.search_messages("STRASSE ist")) == [("de", "assistant"), ("de", "user")]
    assert _ids(store.search_messages('"strasse ist"')) == [("de", "assistant")]
    assert _ids(store.search_messages('"hello  world"')) == [("jp", "assistant")]
    assert _ids(store.search_messages('"hello world"')) == []  # a phrase is matched as written
    assert _ids(store.search_messages("日本語")) == [("jp", "user")]
    assert _ids(store.search_messages("\U0001f642")) == [("jp", "assistant")]
    assert _ids(store.search_messages("drüben")) == [("de", "assistant")]
    assert _ids(store.search_messages("user")) == []  # roles and other fields are not text
    assert len(store.search_messages("").hits) == 5  # no term: every message


def test_search_filters(store: Any) -> None:
    _fill(store)
    assert _ids(store.search_messages("strasse", roles=["user"])) == [("jp", "user"), ("de", "user")]
    assert _ids(store.search_messages("strasse", keys=["jp", "nobody"])) == [("jp", "user")]
    assert _ids(store.search_messages("strasse", agent_alias="bot")) == [("jp", "user")]
    assert _ids(store.search_messages("strasse", name="CHAT")) == [("de", "tool"), ("de", "assistant"), ("de", "user")]
    assert _ids(store.search_messages("", since=100, until=200)) == [("de", "user")]
    assert _ids(store.search_messages("", since=200)) == [("de", "tool"), ("de", "assistant"), ("jp", "user")]
    assert _ids(store.search_messages("", until=100)) == [("jp", "assistant")]


def test_search_pages_cover_every_hit_once(store: Any) -> None:
    _fill(store)
    everything = store.search_messages("", limit=100).hits
    for limit in (1, 2, 3):
        seen: list[SearchHit] = []
        page = store.search_messages("", limit=limit)
        while True:
            assert len(page.hits) <= limit
            seen += page.hits
            if page.cursor is None:
                break
            page = store.search_messages("", limit=limit, cursor=page.cursor)
        assert seen == everything


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"text": 5}, TypeError),
    ({"text": "\ud800"}, InvalidArgumentError),
    ({"text": "a", "limit": 0}, InvalidArgumentError),
    ({"text": "a", "limit": True}, InvalidArgumentError),
    ({"text": "a", "limit": 10_001}, InvalidArgumentError),
    ({"text": "a", "cursor": "not a cursor"}, InvalidArgumentError),
    ({"text": "a", "cursor": 5}, TypeError),
    ({"text": "a", "roles": "user"}, TypeError),
    ({"text": "a", "roles": [1]}, TypeError),
    ({"text": "a", "keys": [""]}, InvalidSessionKeyError),
    ({"text": "a", "since": 1.5}, TypeError),
    ({"text": "a", "until": "1"}, TypeError),
    ({"text": "a", "name": 3}, TypeError),
    ({"text": "a", "agent_alias": 3}, TypeError),
])
def test_search_refuses_bad_arguments(backend: Any, store: Any, kwargs: dict[str, Any], error: type) -> None:
    _fill(store)
    before = backend.state(store, ("de", "jp"))
    with pytest.raises(error):
        store.search_messages(**kwargs)
    backend.assert_unchanged(store, before)


def test_search_skips_lines_that_do_not_parse(backend: Any, store: Any) -> None:
    _fill(store)
    storage = backend.damage(store)
    if storage is None:  # the in-memory store holds nothing that could be damaged
        assert backend.name == "memory"
        return
    storage.append_raw("de", b'{"id": "zz", "role": "user", "content": "strasse" broken\n')
    assert len(store.search_messages("strasse").hits) == 4


# -- every backend against a brute-force model -----------------------------------------
WORDS = ["Straße", "STRASSE", "strasse", "café", "CAFÉ", "cafe\u0301", ANSI, "错误", "日本語", "\U0001f642",
         "naïve", "\ufb01le", "file", "\u212aelvin", "kelvin", "İstanbul", "hello", "world", "Σίσυφος", "ΣΊΣΥΦΟΣ"]
QUERY_WORDS = WORDS + ["ss", "s", "st", "af", "ß", "日本", "fi", "k", "i\u0307", "σ", "o w", "error", "e"]

words = st.lists(st.sampled_from(WORDS), min_size=0, max_size=4).map(" ".join)
parts = st.one_of(words, st.fixed_dictionaries({"type": st.just("text"), "text": words}),
                  st.just({"type": "image", "url": "x"}))
contents = st.one_of(words, words, st.lists(parts, max_size=3), st.none())
messages = st.tuples(st.sampled_from(["user", "assistant", "tool"]), contents, st.integers(0, 4))
sessions = st.dictionaries(st.sampled_from(["a", "b", "Straße/1", "\U0001f99c"]),
                           st.tuples(st.lists(messages, max_size=6), st.sampled_from([None, "Straße chat", "misc"]),
                                     st.sampled_from([None, "bot"])), max_size=4)
terms = st.sampled_from(QUERY_WORDS).map(lambda w: f'"{w}"' if " " in w or not w.strip() else w)
queries = st.lists(terms, max_size=2).map(" ".join)
filters = st.fixed_dictionaries({}, optional={
    "roles": st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=2),
    "keys": st.lists(st.sampled_from(["a", "b", "Straße/1"]), max_size=2),
    "agent_alias": st.just("bot"), "name": st.sampled_from(["strasse", "CHAT", "x"]),
    "since": st.integers(0, 4), "until": st.integers(0, 5)})


def _model_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p if isinstance(p, str) else p["text"] for p in content
                         if isinstance(p, str) or isinstance(p.get("text"), str))
    return ""


def _expected(data: dict[str, Any], text: str, f: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    want = parse(text)
    for key, (msgs, name, alias) in data.items():
        if ("keys" in f and key not in f["keys"]) or ("agent_alias" in f and alias != f["agent_alias"]):
            continue
        if "name" in f and (name is None or f["name"].casefold() not in name.casefold()):
            continue
        for position, (role, content, created) in enumerate(msgs):
            if ("roles" in f and role not in f["roles"]) or created < f.get("since", created) \
                    or ("until" in f and created >= f["until"]):
                continue
            if all(t in _model_text(content).casefold() for t in want):
                found.append(((-created, key, -position), (key, _ulid(position))))
    return [hit for _order, hit in sorted(found)]


def _ulid(n: int) -> str:
    """The ``n``-th of a run of increasing caller ids (ULIDs of 2024, so never from the future)."""
    return f"01J{n:023d}"


def _write(store: Any, data: dict[str, Any]) -> None:
    for key, (msgs, name, alias) in data.items():
        store.append_many(key, [{"role": r, "content": c, "created_at": at, "id": _ulid(i)}
                                for i, (r, c, at) in enumerate(msgs)] or [{"role": "user", "id": _ulid(0),
                                                                          "created_at": 0}])
        if name is not None:
            store.set_session_name(key, name)
        if alias is not None:
            store.set_session_agent_alias(key, alias)


def _walk(store: Any, text: str, f: dict[str, Any], limit: int) -> list[SearchHit]:
    hits: list[SearchHit] = []
    page = store.search_messages(text, limit=limit, **f)
    while True:
        assert len(page.hits) <= limit
        hits += page.hits
        if page.cursor is None:
            return hits
        page = store.search_messages(text, limit=limit, cursor=page.cursor, **f)


@pytest.fixture(scope="module")
def pg(request: pytest.FixtureRequest) -> Any:
    try:
        return request.getfixturevalue("pg_server")
    except pytest.skip.Exception:  # no server: the other backends are still compared
        return None


@given(data=sessions, searches=st.lists(st.tuples(queries, filters, st.integers(1, 4)), min_size=1, max_size=4))
@settings(max_examples=sized(20, 250))
def test_every_backend_answers_as_the_model(pg: Any, data: dict[str, Any],
                                            searches: list[tuple[str, dict[str, Any], int]]) -> None:
    for key, (msgs, _name, _alias) in list(data.items()):
        if not msgs:  # a session needs a message to exist: the model gets the one _write adds
            data[key] = ([("user", None, 0)], *data[key][1:])
    names = ["jsonl-flush", "sqlite", "memory"] + (["postgres"] if pg is not None else [])
    with tempfile.TemporaryDirectory() as tmp:
        stores = [opener(name, pg)(pathlib.Path(tmp) / name) for name in names]
        try:
            for store in stores:
                _write(store, data)
            for text, f, limit in searches:
                expected = _expected(data, text, f)
                answers = [_walk(store, text, f, limit) for store in stores]
                assert [(h.key, h.message_id) for h in answers[0]] == expected
                for name, answer in zip(names[1:], answers[1:]):
                    assert answer == answers[0], name
                for hit in answers[0]:
                    if parse(text):
                        start, end = hit.matches[0]
                        assert any(t in hit.snippet[start:end].casefold() for t in parse(text))
        finally:
            for store in stores:
                store.close()
            if pg is not None:
                pg.drop(pg.schema_for(str(pathlib.Path(tmp) / "postgres")))


# -- with the full-text index: the same answers as the scan, through every kind of change -------
op = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["a", "b", "c"]), contents, st.sampled_from([0, 1, 2, 3, 4, -5, 2**50])),
    st.tuples(st.just("update_last"), st.sampled_from(["a", "b"]), contents, st.integers(0, 4)),
    st.tuples(st.just("remove_last"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("rewrite"), st.sampled_from(["a", "c"]), st.lists(contents, max_size=3)),
    st.tuples(st.just("delete"), st.sampled_from(["b", "c"])),
    st.tuples(st.just("search"), queries, filters, st.integers(1, 3)),
)


@given(ops=st.lists(op, min_size=1, max_size=14))
@settings(max_examples=sized(15, 200))
def test_the_index_answers_as_the_scan(pg: Any, ops: list[tuple[Any, ...]]) -> None:
    from jsonl_sessions.searchindex import build_index
    from jsonl_sessions.testing.memory import MemorySessionStore

    names = ["jsonl-flush", "sqlite"] + (["postgres"] if pg is not None else [])
    counter = iter(range(1, 10**6))

    def message(content: Any, at: int) -> dict[str, Any]:
        return {"role": "user", "content": content, "created_at": at, "id": _ulid(next(counter))}

    with tempfile.TemporaryDirectory() as tmp:
        stores = [opener(name, pg)(pathlib.Path(tmp) / name) for name in names]
        model = MemorySessionStore()
        try:
            for store in stores:
                store.append("a", {"role": "user", "content": "Straße", "created_at": 0, "id": _ulid(0)})
                built = build_index(store)
                assert built.exists, built
            model.append("a", {"role": "user", "content": "Straße", "created_at": 0, "id": _ulid(0)})
            for kind, *args in ops:
                if kind == "search":  # page by page: a small page makes the index stop early
                    text, f, limit = args
                    want = _walk(model, text, f, limit)
                    for name, store in zip(names, stores):
                        assert _walk(store, text, f, limit) == want, name
                    continue
                if kind == "append":
                    call: tuple[Any, ...] = ("append", args[0], message(args[1], args[2]))
                elif kind == "update_last":
                    call = ("update_last", args[0], message(args[1], args[2]))
                elif kind == "rewrite":
                    call = ("rewrite_messages", args[0], [message(c, 3) for c in args[1]])
                elif kind == "remove_last":
                    call = ("remove_last", args[0])
                else:
                    call = ("delete_session", args[0])
                for store in [model, *stores]:
                    getattr(store, call[0])(*call[1:])
        finally:
            for store in stores:
                store.close()
            if pg is not None:
                pg.drop(pg.schema_for(str(pathlib.Path(tmp) / "postgres")))
