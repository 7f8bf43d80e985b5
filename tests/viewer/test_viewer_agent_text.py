"""The viewer on what a coding agent really writes: Markdown tables with aligned columns,
tool output coloured with terminal escape sequences, and a transcript with a corrupt line
in the middle, in headless Chromium (the page, the older page loaded by scrolling, the
search page, the HTML export). One server and one browser for the module."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from _viewer import Browser, Running

from jsonl_sessions import SessionStore
from jsonl_sessions.keys import key_to_stem

TABLE = "| file | before | after |\n|:-----|-------:|:-----:|\n| `parser.py` | 12 ms | 3 ms |\n"
PYTEST = ("collecting 10%\rcollecting 100%\r\n"  # a progress line, and a Windows line end
          "\x1b[1m=== test session starts ===\x1b[0m\ntests/test_parser.py \x1b[32m.\x1b[0m\x1b[31mF\x1b[0m\n"
          "\x1b]0;retitled\x07\x1b[2J\x1b[H\x1b[31mE   AssertionError\x1b[0m\n"
          "\x1b[31m=== \x1b[1m1 failed\x1b[0m, \x1b[32m41 passed\x1b[0m\x1b[31m in 0.42s ===\x1b[0m\n")
#: Messages of "broken/middle"; the corrupt line goes after message CORRUPT_AFTER.
BROKEN = 130
CORRUPT_AFTER = 20


def _build(root: pathlib.Path) -> SessionStore:
    store = SessionStore(root, durability="flush")
    store.append_many("agent/run", [
        {"role": "user", "content": "Why is the parser slow?"},
        {"role": "assistant", "content": "Measured:\n\n" + TABLE, "tool_calls": [
            {"id": "call_pytest", "type": "function", "function": {"name": "run_shell", "arguments": '{"cmd": "pytest"}'}}]},
        {"role": "tool", "tool_call_id": "call_pytest", "content": PYTEST},
    ])
    store.append_many("broken/middle", [{"role": "user", "content": f"broken message {i}"} for i in range(BROKEN)])
    store.close()
    path = root / f"{key_to_stem('broken/middle')}.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines.insert(CORRUPT_AFTER + 1, b'{"id": "01J0000000000000000000000X", "role": "user", "content": "broken messa')
    path.write_bytes(b"\n".join(lines))
    store = SessionStore(root, durability="flush")
    store.append_many("broken/all", [{"role": "user", "content": "gone"}])
    whole = root / f"{key_to_stem('broken/all')}.jsonl"
    whole.write_bytes(b"not json at all\n")
    return store


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("agent-text") / "store"
    running = Running(_build(root), str(root))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def page(browser: Browser, viewer: Running) -> Iterator[Any]:
    page = browser.page()
    page.goto(viewer.url)  # the printed address: exchanges the token for the cookie
    yield page
    page.close()


def _policy_errors(browser: Browser) -> list[str]:
    return [c for c in browser.console if "Content Security Policy" in c or "pageerror" in c]


def test_an_aligned_table_keeps_its_alignment_under_the_policy(browser: Browser, page: Any, viewer: Running) -> None:
    before = len(browser.console)
    page.goto(viewer.base + "/session?key=agent%2Frun")
    page.wait_for_selector(".text table")
    aligns = page.eval_on_selector_all(".text table tbody td", "els => els.map(e => getComputedStyle(e).textAlign)")
    assert aligns == ["left", "right", "center"]
    assert _policy_errors(Browser(browser.context, console=browser.console[before:])) == []


def test_tool_output_shows_its_colours_and_no_escape_codes(browser: Browser, page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/session?key=agent%2Frun")
    call = page.locator('details.tool-call[data-call-id="call_pytest"]')
    call.locator("summary").click()
    shown = call.locator(".tool-result pre.code").inner_text()
    assert "=== 1 failed, 41 passed in 0.42s ===" in shown  # reads as the terminal showed it
    assert "tests/test_parser.py .F" in shown
    assert "\\x1b" not in shown and "[31m" not in shown and "retitled" not in shown
    assert "collecting 10%\ncollecting 100%\n" in shown and "\\x0d" not in shown  # carriage returns break lines
    failed = call.locator(".tool-result pre.code span", has_text="1 failed")
    assert failed.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).fontWeight]") == \
        ["rgb(207, 34, 46)", "700"]  # red and bold, from the stylesheet's classes
    passed = call.locator(".tool-result pre.code span", has_text="41 passed")
    assert passed.evaluate("e => getComputedStyle(e).color") == "rgb(17, 99, 41)"


def test_the_html_export_shows_the_same_colours(browser: Browser, page: Any, viewer: Running,
                                                tmp_path: pathlib.Path) -> None:
    from jsonl_sessions.viewer.html_export import to_html

    meta = viewer.store.get_session_metadata("agent/run")
    assert meta is not None
    path = tmp_path / "export.html"
    path.write_text(to_html(meta, viewer.store.load("agent/run")), encoding="utf-8")
    before = len(browser.console)
    page.goto(path.as_uri())
    page.locator("details.tool-call summary").first.click()
    failed = page.locator(".tool-result pre.code span", has_text="1 failed")
    assert failed.evaluate("e => getComputedStyle(e).color") == "rgb(207, 34, 46)"
    aligns = page.eval_on_selector_all(".text table tbody td", "els => els.map(e => getComputedStyle(e).textAlign)")
    assert aligns == ["left", "right", "center"]
    assert [c for c in browser.console[before:] if "Content Security Policy" in c] == []
    raws = page.locator("details.raw-json pre").all_text_contents()
    assert any("\\u001b[31m" in raw for raw in raws)  # the raw JSON keeps every character


def test_a_page_says_which_corrupt_line_it_skipped(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/session?key=broken%2Fmiddle")
    page.wait_for_selector("#messages > li.msg")
    assert page.locator("#messages > li.problem").count() == 0  # the newest page holds no damage
    for _ in range(5):  # scroll back to the page that skipped the line
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(300)
        if page.locator("#messages > li.problem").count():
            break
    problem = page.locator("#messages > li.problem")
    assert problem.count() == 1
    text = problem.inner_text()
    assert "skipped 1 corrupt line" in text and f"line {CORRUPT_AFTER + 2}," in text and "byte offset" in text
    assert page.locator("#messages > li.msg").count() == BROKEN  # every readable message, none lost
    # the address of that older page says so too, without the script
    older = viewer.store.load("broken/middle")[CORRUPT_AFTER + 5].id
    page.goto(viewer.base + f"/session?key=broken%2Fmiddle&before={older}")
    assert f"line {CORRUPT_AFTER + 2}," in page.locator("#messages > li.problem").inner_text()


def test_a_session_of_corrupt_lines_is_not_shown_as_an_empty_history(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/session?key=broken%2Fall")
    assert page.locator("#messages > li.msg").count() == 0
    assert "line 1," in page.locator("#messages > li.problem").inner_text()


def test_the_search_page_says_which_line_it_could_not_search(page: Any, viewer: Running) -> None:
    page.goto(viewer.base + "/search?q=%22broken+messa%22")
    page.wait_for_selector("li.hit")
    note = page.locator("p.problem").inner_text()
    assert "broken/middle" in note and f"line {CORRUPT_AFTER + 2}," in note


def test_right_to_left_text_reads_right_to_left_and_stays_in_its_box(page: Any, viewer: Running) -> None:
    viewer.store.append_many("rtl/chat", [{"role": "user", "content": "مرحبا بالعالم، كيف حالك؟"},
                                          {"role": "assistant", "content": "Hello: שלום עולם"}])
    viewer.store.set_session_name("rtl/chat", "שיחה בעברית")
    page.goto(viewer.base + "/session?key=rtl%2Fchat")
    directions = page.eval_on_selector_all("#messages .text", "els => els.map(e => getComputedStyle(e).direction)")
    assert directions == ["rtl", "ltr"]  # each message by its first strong character
    assert page.eval_on_selector(".session-head h1", "e => getComputedStyle(e).unicodeBidi") == "isolate"


def test_anthropic_tool_use_and_result_blocks_are_one_call_box(page: Any, viewer: Running) -> None:
    """Claude Code transcripts (and the Claude SDKs) keep tool calls as content blocks."""
    viewer.store.append_many("claude/run", [
        {"role": "user", "content": "Run the tests"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Running **pytest**."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "pytest -q"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": PYTEST}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_elsewhere", "content": [{"type": "text", "text": "orphan"}]},
            {"type": "text", "text": "and a question"}]},
    ])
    page.goto(viewer.base + "/session?key=claude%2Frun")
    assert page.locator("#messages > li.msg").count() == 3  # the result-only message sits in its call
    call = page.locator('details.tool-call[data-call-id="toolu_1"]')
    assert call.locator(".tool-name").inner_text() == "Bash"
    call.locator("summary").click()
    assert '"command": "pytest -q"' in call.locator("pre.args").inner_text()
    shown = call.locator(".tool-result pre.code").inner_text()
    assert "=== 1 failed, 41 passed in 0.42s ===" in shown and "\\u001b" not in shown
    assert page.locator("#messages details.part").count() == 0  # no block left as raw JSON
    last = page.locator("#messages > li.msg").last
    assert "orphan" in last.locator(".result pre.code").inner_text()  # a result whose call is elsewhere
    assert "result of toolu_elsewhere" in last.inner_text() and "and a question" in last.inner_text()
