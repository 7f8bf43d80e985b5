"""The viewer's guard and its promise to change nothing, over plain HTTP (no browser):
the token, the Host allow-list and the Origin check refuse what they must; every route
refuses every method but GET and HEAD; every response carries the security headers; and a
JSONL directory and a SQLite file are byte for byte the same after every page was read."""

from __future__ import annotations

import hashlib
import http.client
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from _viewer import Running

from jsonl_sessions import SessionStore
from jsonl_sessions.protocol import SessionBackend
from jsonl_sessions.sqlite import SqliteSessionStore
from jsonl_sessions.viewer.app import STATIC
from jsonl_sessions.viewer.security import CSP

ROUTES = ["/", "/sessions.part", "/session", "/messages.part", "/raw", "/search", "/static/viewer.js",
          "/no/such/page"]


def _fill(store: SessionBackend) -> None:
    store.append_many("chat/a", [
        {"role": "user", "content": "hello needle"},
        {"role": "assistant", "content": "hi", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ])
    store.set_session_name("chat/a", "A chat")
    store.copy_messages("chat/a", "chat/b")


def _request(running: Running, method: str, path: str, headers: dict[str, str] | None = None,
             body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=30)
    try:
        sent = {"Host": f"127.0.0.1:{running.port}", **(headers or {})}
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _signed(running: Running) -> dict[str, str]:
    return {"Cookie": f"{running.server.guard.cookie_name}={running.server.token}"}


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    store = SessionStore(tmp_path_factory.mktemp("http") / "store")
    _fill(store)
    server = Running(store)
    try:
        yield server
    finally:
        server.stop()


def test_the_printed_token_is_exchanged_for_a_strict_http_only_cookie(running: Running) -> None:
    query = running.url.split("?", 1)[1]
    status, headers, _ = _request(running, "GET", f"/session?key=chat%2Fa&{query}")
    assert status == 303
    assert headers["location"] == "/session?key=chat%2Fa"  # the token leaves the address
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{running.server.guard.cookie_name}={running.server.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, _, body = _request(running, "GET", "/session?key=chat%2Fa", _signed(running))
    assert status == 200 and b"hello needle" in body


@pytest.mark.parametrize("headers", [
    {}, {"Cookie": "jsonl_sessions_token_1=nope"}, {"Cookie": "garbage;;=;"},
], ids=["no-token", "wrong-cookie", "bad-cookie-header"])
def test_a_request_without_the_token_is_refused(running: Running, headers: dict[str, str]) -> None:
    for path in ROUTES:
        status, response_headers, body = _request(running, "GET", path, headers)
        assert status == 403, path
        assert b"needle" not in body and response_headers["content-security-policy"] == CSP
    status, _, _ = _request(running, "GET", "/?token=" + "x" * len(running.server.token))
    assert status == 403


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1", "127.0.0.1:1",
                                  "localhost.evil.example:{port}", ""])
def test_a_foreign_host_header_is_refused_even_with_the_token(running: Running, host: str) -> None:
    headers = {**_signed(running), "Host": host.format(port=running.port)}
    status, _, body = _request(running, "GET", "/", headers)
    assert status == 403 and b"A chat" not in body
    status, _, _ = _request(running, "GET", "/?token=" + running.server.token, {"Host": host.format(port=running.port)})
    assert status == 403


def test_the_loopback_names_with_the_port_are_accepted(running: Running) -> None:
    for host in (f"127.0.0.1:{running.port}", f"localhost:{running.port}", f"LOCALHOST:{running.port}"):
        status, _, _ = _request(running, "GET", "/", {**_signed(running), "Host": host})
        assert status == 200, host


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1", "https://127.0.0.1:{port}"])
def test_a_foreign_origin_is_refused(running: Running, origin: str) -> None:
    headers = {**_signed(running), "Origin": origin.format(port=running.port)}
    status, _, body = _request(running, "GET", "/messages.part?key=chat%2Fa&after=", headers)
    assert status == 403 and b"needle" not in body
    status, _, _ = _request(running, "GET", "/", {**_signed(running), "Origin": f"http://127.0.0.1:{running.port}"})
    assert status == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_every_route_refuses_every_method_that_could_change_something(running: Running, method: str) -> None:
    for path in ROUTES:
        status, headers, _ = _request(running, method, path, _signed(running), body=b'{"role": "user"}')
        assert status == 405, (method, path)
        assert headers["allow"] == "GET, HEAD"


def test_every_response_carries_the_security_headers(running: Running) -> None:
    for path in [*ROUTES, *(f"/static/{name}" for name in STATIC), "/session?key=missing", "/raw?key=chat%2Fa&id=x"]:
        for method in ("GET", "HEAD"):
            _, headers, body = _request(running, method, path, _signed(running))
            assert headers["content-security-policy"] == CSP, path
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["referrer-policy"] == "no-referrer"
            assert headers["x-frame-options"] == "DENY"
            assert headers["cache-control"] == "no-store"
            if method == "HEAD":
                assert body == b""


def test_no_page_holds_inline_script_or_style(running: Running) -> None:
    for path in ("/", "/session?key=chat%2Fa", "/search?q=needle", "/session?key=missing"):
        _, _, body = _request(running, "GET", path, _signed(running))
        text = body.decode()
        assert "<style" not in text and " style=" not in text
        assert text.count("<script") == 1 and '<script src="/static/viewer.js" defer></script>' in text
        for attribute in (" onclick=", " onload=", " onerror=", "javascript:"):
            assert attribute not in text


def _tree(root: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _browse(running: Running) -> None:
    """Every page and part of every session, as the browser would read them."""
    signed = _signed(running)
    pages = ["/", "/?state=idle", "/?name=A", "/sessions.part?cursor=", "/search?q=needle", "/search?q=%22no+such%22"]
    for key in ("chat%2Fa", "chat%2Fb", "missing"):
        pages += [f"/session?key={key}", f"/messages.part?key={key}&after=", f"/session?key={key}&after="]
    for path in pages:
        status, _, _ = _request(running, "GET", path, signed)
        assert status in (200, 404), path
    store = running.store
    for key in ("chat/a", "chat/b"):
        for m in store.load(key):
            for path in (f"/session?key={key}&at={m.id}", f"/raw?key={key}&id={m.id}",
                         f"/messages.part?key={key}&before={m.id}", f"/session?key={key}&before={m.id}"):
                status, _, _ = _request(running, "GET", path, signed)
                assert status == 200, path


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_browsing_changes_no_byte_of_the_store(tmp_path: pathlib.Path, kind: str) -> None:
    root = tmp_path / "store"
    opened: Any = SessionStore(root) if kind == "jsonl" else SqliteSessionStore(tmp_path / "store.db")
    _fill(opened)
    opened.close()
    where = root if kind == "jsonl" else tmp_path
    before = _tree(where)
    store: Any = SessionStore(root) if kind == "jsonl" else SqliteSessionStore(tmp_path / "store.db")
    server = Running(store)
    try:
        _browse(server)
    finally:
        server.stop()
        store.close()
    after = _tree(where)
    assert after == before
    assert os.listdir(where)  # the comparison looked at files


def test_a_request_that_fails_is_logged_with_its_cause(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    # The store's file is overwritten under a running viewer: the page says it failed (500)
    # and the cause reaches the log with its traceback, so a user can tell what broke.
    path = tmp_path / "store.sqlite3"
    store = SqliteSessionStore(str(path))
    _fill(store)
    server = Running(store)
    try:
        path.write_bytes(b"this is not a database" * 400)
        caplog.set_level("ERROR", logger="jsonl_sessions")
        status, _headers, _body = _request(server, "GET", "/session?key=chat%2Fa", _signed(server))
    finally:
        server.stop()
    assert status == 500
    failed = [r for r in caplog.records if r.levelname == "ERROR" and "/session" in r.getMessage()]
    assert failed and failed[0].exc_info is not None, caplog.text
    assert "DatabaseError" in caplog.text
