"""What a failure of the state machine shows: the operation, the model's result next to the
store's, and the shortest failing program as a pytest test that really runs (it fails on
the buggy store and passes on a correct one)."""

from __future__ import annotations

import pathlib
import pickle
from typing import Any

import pytest
from gallery import RemoveLastRemovesFirst

from jsonl_sessions import ChatMessage
from jsonl_sessions.testing import MemorySessionStore, Mismatch, check_backend
from jsonl_sessions.testing.report import Program


@pytest.fixture(scope="module")
def failure() -> Mismatch:
    with pytest.raises(Mismatch) as caught:
        check_backend(lambda path: RemoveLastRemovesFirst(path), profile="quick", database=None, derandomize=True)
    return caught.value


def _reproduction(failure: Mismatch) -> str:
    """The program, from the one note that holds it: Hypothesis may add notes of its own after
    it (under its ``ci`` profile, chosen when ``CI`` is set, a ``@reproduce_failure`` line)."""
    notes = getattr(failure, "__notes__", [])
    programs = [n for n in notes if "def test_reproduce(tmp_path):" in n]
    assert len(programs) == 1, notes
    return programs[0][programs[0].index("import pytest"):]


def test_a_failure_names_the_operation_and_shows_both_results(failure: Mismatch) -> None:
    text = str(failure)
    assert "remove_last(" in failure.after, failure.after
    assert failure.operation.startswith("store.") and failure.operation in text
    assert f"model: {failure.want!r}" in text and f"store: {failure.got!r}" in text
    assert failure.got != failure.want
    copy = pickle.loads(pickle.dumps(failure))
    assert (copy.operation, copy.got, copy.want, copy.after) == (failure.operation, failure.got, failure.want,
                                                                 failure.after)


@pytest.mark.parametrize("store, fails", [(RemoveLastRemovesFirst, True), (MemorySessionStore, False)])
def test_the_printed_program_runs_and_fails_only_on_the_buggy_store(failure: Mismatch, tmp_path: pathlib.Path,
                                                                    store: Any, fails: bool) -> None:
    namespace: dict[str, Any] = {"make_store": store}
    exec(compile(_reproduction(failure), "reproduction", "exec"), namespace)  # noqa: S102 - the point of the test
    if fails:
        with pytest.raises(AssertionError):
            namespace["test_reproduce"](tmp_path)
    else:
        namespace["test_reproduce"](tmp_path)


def test_store_chosen_ids_are_named_in_the_program() -> None:
    program = Program()
    program.result("append_many", "store.append_many('k', [...])", ["01J0000000000000000000000A",
                                                                   "01J0000000000000000000000B"])
    assert program.lines == ["ids_1 = store.append_many('k', [...])"]
    assert program.call("remove_last", ("k",), {"expected_id": "01J0000000000000000000000B"}) == (
        "store.remove_last('k', expected_id=ids_1[1])")
    message = ChatMessage("user", [float("nan")], id="01J0000000000000000000000A")
    assert program.value(message) == "ChatMessage('user', [float('nan')], id=ids_1[0])"
