"""The viewer in a real browser (headless Chromium): the list and its paging, a transcript
with its tool calls and compaction mark, scrolling back by pages, a search hit opened in
context, a live append by another process, and hostile transcripts that must run nothing,
fetch nothing and break nothing. One server and one browser for the module."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from _viewer import Browser, Running, screenshot

from jsonl_sessions import SessionStore

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails when the browser is required)
    expect = None

LONG = 260  # messages of "long/chat": the newest page and more than three older pages of 50
BULK = 120  # small sessions, so the list has more than two pages of 50
HUGE = "x" * 1_000_000
HOSTILE_KEY = 'hostile/<img src=x onerror="window.__pwned=1">'
HOSTILE_TEXTS = [
    "<script>window.__pwned = 1; alert('script')</script>",
    '<img src=x onerror="window.__pwned=1; alert(1)">',
    "<svg onload=\"window.__pwned=1\"></svg> <iframe src=\"javascript:window.__pwned=1\"></iframe>",
    "[a link](javascript:window.__pwned=1) <javascript:window.__pwned=1> [data](data:text/html,<script>x</script>)",
    "![tracker](http://203.0.113.7/pixel.png) and a plain link to [elsewhere](http://203.0.113.7/page)",
    "NUL \x00 BEL \x07 ESC \x1b[31mred\x1b[0m \x1b]0;title\x07 CSI \x9b31m DEL \x7f RLO \u202e reversed",
    "line one\r\nline two \u2028 separator",
    HUGE,
]


def _build(root: pathlib.Path) -> SessionStore:
    store = SessionStore(root, durability="flush")
    for i in range(BULK):
        store.append(f"bulk/{i:03d}", {"role": "user", "content": f"bulk session {i}"})
    store.append_many("long/chat", [{"role": "user" if i % 2 == 0 else "assistant", "content": f"long message {i}"}
                                    for i in range(LONG)])
    store.append_many("tools/run", [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find the **TODO** markers, please."},
        {"role": "assistant", "content": "Searching.", "tool_calls": [
            {"id": "call_grep", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "TODO"}'}},
            {"id": "call_ls", "type": "function", "function": {"name": "ls", "arguments": '{"path": "src"}'}}]},
        {"role": "tool", "tool_call_id": "call_grep", "content": "src/app.py:12: # TODO: retry"},
        {"role": "tool", "tool_call_id": "call_ls", "content": "app.py\nutil.py"},
        {"role": "assistant", "content": "One TODO in `src/app.py`:\n\n```python\n# TODO: retry\n```"},
        {"role": "system", "kind": "compaction", "content": "Summary: one TODO found in src/app.py."},
        {"role": "user", "content": "Thanks! The needle is zebrafish."},
    ])
    store.set_session_name("tools/run", "Find TODO markers")
    store.set_session_agent_alias("tools/run", "coder")
    fork_point = store.load("tools/run")[5].id
    store.copy_messages("tools/run", "tools/fork", up_to_message_id=fork_point)
    store.append_many(HOSTILE_KEY, [{"role": "user", "content": text} for text in HOSTILE_TEXTS])
    store.append(HOSTILE_KEY, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "<b>id</b>", "type": "function", "function": {"name": "<script>alert(1)</script>",
                                                             "arguments": "</pre><script>window.__pwned=1</script>"}}]})
    store.set_session_name(HOSTILE_KEY, "<script>window.__pwned=1</script>\x1b[2J")
    store.append("live/tail", {"role": "user", "content": "first message of the live session"})
    return store


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("viewer") / "store"
    running = Running(_build(root), str(root))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def signed_in(browser: Browser, viewer: Running) -> Browser:
    page = browser.page()
    page.goto(viewer.url)  # the printed address: exchanges the token for the cookie
    assert page.url == viewer.base + "/"  # the token is gone from the address
    page.close()
    return browser


@pytest.fixture
def page(signed_in: Browser) -> Iterator[Any]:
    page = signed_in.page()
    yield page
    page.close()


def _ids(page: Any) -> list[str]:
    return page.eval_on_selector_all("#messages > li.msg", "els => els.map(e => e.textContent)")


def test_the_list_shows_every_column_and_pages_as_it_scrolls(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/")
    rows = page.locator("#sessions tr.session")
    assert rows.count() == 50
    fork = page.locator('tr.session[data-key="tools/fork"]')
    assert fork.locator("td.parent a").inner_text() == "tools/run"  # the fork's parent, linked
    named = page.locator('tr.session[data-key="tools/run"]')
    assert named.locator("td.name").inner_text() == "Find TODO markers"
    assert named.locator("td.num").inner_text() == "8"
    screenshot(page, "viewer-list")
    total = BULK + 5
    for _ in range(5):
        page.locator("#sessions tr.session").last.scroll_into_view_if_needed()
        page.wait_for_timeout(150)
        if rows.count() == total:
            break
    expect(rows).to_have_count(total)
    keys = page.eval_on_selector_all("#sessions tr.session", "els => els.map(e => e.dataset.key)")
    assert len(set(keys)) == total  # every session once, none twice across pages
    assert page.locator("#more").count() == 0


def test_the_list_filters_by_alias_and_name(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/?alias=coder")
    assert page.eval_on_selector_all("#sessions tr.session", "els => els.map(e => e.dataset.key)") == ["tools/run"]
    page.goto(viewer.base + "/")
    page.fill("input[name=name]", "Find")
    page.click("form.filters button")
    page.wait_for_url("**/?name=Find*")
    assert page.eval_on_selector_all("#sessions tr.session", "els => els.map(e => e.dataset.key)") == ["tools/run"]


def test_a_transcript_styles_roles_apart_and_pairs_each_tool_call_with_its_result(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/")
    page.click('tr.session[data-key="tools/run"] td.name a')
    page.wait_for_selector("#messages")
    roles = page.eval_on_selector_all("#messages > li.msg", "els => els.map(e => e.className)")
    assert [r.split()[1] for r in roles] == ["role-system", "role-user", "role-assistant", "role-assistant",
                                             "role-system", "role-user"]  # the two results sit in their calls
    grep = page.locator('details.tool-call[data-call-id="call_grep"]')
    assert not grep.locator(".tool-result").is_visible()  # collapsed
    grep.locator("summary").click()
    assert "src/app.py:12: # TODO: retry" in grep.locator(".tool-result").inner_text()
    assert '"pattern": "TODO"' in grep.locator("pre.args").inner_text()
    assert page.locator("li.msg.compaction .compaction-badge").inner_text() == "compaction summary"
    assert page.locator("li.msg.role-user strong").first.inner_text() == "TODO"  # Markdown rendered
    assert page.locator("li.msg code").first.inner_text() == "src/app.py"
    screenshot(page, "viewer-transcript")
    # the raw JSON of a message, one click away
    page.locator("li.msg.compaction a.raw").click()
    assert '"kind": "compaction"' in page.locator("body").inner_text()


def test_a_fork_links_to_its_parent_at_the_fork_point(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/session?key=tools%2Ffork")
    page.click("dd.fork a.fork-point")
    page.wait_for_selector("li.msg.target")
    assert "key=tools%2Frun" in page.url
    fork_point = viewer.store.get_session_metadata("tools/fork").fork_point  # type: ignore[union-attr]
    assert page.locator("li.msg.target").get_attribute("data-id") == fork_point


def test_scrolling_back_loads_three_older_pages_by_cursor(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/session?key=long%2Fchat")
    texts = _ids(page)
    assert len(texts) == 50 and "long message 259" in texts[-1]
    for pages in (2, 3, 4):
        page.evaluate("window.scrollTo(0, 0)")
        expect(page.locator("#messages > li.msg")).to_have_count(50 * pages)
    texts = _ids(page)
    assert ["long message" + t.split("long message")[1].split("\n")[0] for t in texts] == \
        [f"long message {i}" for i in range(LONG - 200, LONG)]
    older = page.locator("#older a").get_attribute("href")  # and the next page has an address of its own
    page.goto(viewer.base + older)
    assert "long message 59" in _ids(page)[-1], older


def test_a_search_hit_opens_the_session_at_that_message(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/")
    page.fill("nav input[type=search]", "zebrafish")
    page.press("nav input[type=search]", "Enter")
    page.wait_for_selector("li.hit")
    hits = page.locator("li.hit")
    assert hits.count() == 1
    assert hits.locator("mark").inner_text().casefold() == "zebrafish"
    screenshot(page, "viewer-search")
    page.select_option("form.filters select[name=role]", "assistant")  # the hit is a user's message
    page.click("form.filters button")
    page.wait_for_url("**role=assistant**")
    assert page.locator("li.hit").count() == 0
    page.go_back()
    hits = page.locator("li.hit")
    hits.locator("a.hit-link").click()
    page.wait_for_selector("li.msg.target")
    assert "zebrafish" in page.locator("li.msg.target").inner_text()
    assert page.locator("li.msg.target").is_visible()


def test_a_message_appended_by_another_process_appears_without_a_reload(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/session?key=live%2Ftail")
    page.wait_for_selector("#messages > li.msg")
    page.evaluate("window.__sameDocument = true")
    code = textwrap.dedent(f"""
        from jsonl_sessions import SessionStore
        SessionStore({viewer.store.root!r}).append("live/tail", {{"role": "assistant", "content": "written by a child"}})
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    page.wait_for_selector("li.msg >> text=written by a child", timeout=5000)  # polled every second
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    assert len(_ids(page)) == 2


def test_hostile_transcripts_run_nothing_fetch_nothing_and_break_nothing(signed_in: Browser, page: Any,
                                                                         viewer: Running) -> None:
    before = len(signed_in.requests)
    page.goto(viewer.base + "/")  # the hostile key and name in the list
    page.goto(viewer.base + "/session?key=" + HOSTILE_KEY.replace("/", "%2F").replace(" ", "+")
              .replace("<", "%3C").replace(">", "%3E").replace('"', "%22").replace("=", "%3D"))
    page.wait_for_selector("#messages > li.msg")
    for details in page.locator("details").all():
        details.locator("summary").first.click()
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None
    assert signed_in.dialogs == []
    made = signed_in.requests[before:]
    assert made and all(u.startswith((viewer.base + "/", "data:")) for u in made), made
    assert not [c for c in signed_in.console if "Content Security Policy" in c or "pageerror" in c]
    shown = page.locator("#messages").inner_text()
    assert "<script>window.__pwned = 1; alert('script')</script>" in shown  # as text
    assert '<img src=x onerror="window.__pwned=1; alert(1)">' in shown
    assert "NUL \\x00 BEL \\x07" in shown and "DEL \\x7f" in shown  # controls made visible
    assert "ESC red" in shown and "0;title" not in shown and "\\x1b" not in shown  # escape sequences taken out
    assert "\\x9b" not in shown and "31m" not in shown  # the 8-bit CSI too
    assert "RLO \\u202e reversed" in shown  # a bidi override cannot reorder what follows
    assert page.locator("#messages a[href^=javascript]").count() == 0
    assert page.locator("#messages img, #messages iframe, #messages svg, #messages script").count() == 0
    assert "980,000 more characters not shown" in shown  # the 1 MB line is cut, the page still works
    assert page.locator("h1").inner_text().startswith("<script>")
    assert len(_ids(page)) == len(HOSTILE_TEXTS) + 1
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "viewer-hostile")


def test_the_html_export_is_styled_runs_nothing_and_loads_nothing(signed_in: Browser, page: Any, viewer: Running,
                                                                  tmp_path: pathlib.Path) -> None:
    from jsonl_sessions.viewer.html_export import to_html

    for key in ("tools/run", HOSTILE_KEY):
        meta = viewer.store.get_session_metadata(key)
        assert meta is not None
        path = tmp_path / "export.html"
        path.write_text(to_html(meta, viewer.store.load(key)), encoding="utf-8")
        before = len(signed_in.requests)
        page.goto(path.as_uri())
        for details in page.locator("details").all():
            details.locator("summary").first.click()
        assert page.evaluate("window.__pwned") is None and signed_in.dialogs == []
        assert signed_in.requests[before:] == [path.as_uri()]  # the file itself, nothing else
        # the inline stylesheet applies: the policy's hash is the stylesheet's
        width = page.eval_on_selector("li.msg", "e => getComputedStyle(e).borderLeftWidth")
        assert width == "4px"
        assert not [c for c in signed_in.console if "Content Security Policy" in c]
        if key == "tools/run":  # the result inside its call's box, as in the viewer
            assert "src/app.py:12: # TODO: retry" in page.locator("details.tool-call").first.inner_text()
