"""The gallery of planted bugs (``helpers/gallery.py``): each one is caught by the test
named for it.

- The contract mixin's behaviour tests run on every bug that has a contract test (one
  pytest subprocess for all of them); the first test that fails for the bug must be the
  one named for it.
- The state machine (``check_backend``) runs on a few bugs in a lean run and on all of
  them with ``JSONL_SESSIONS_SOAK=1`` (the ``ci`` profile); its failure must name the
  broken operation (the failing check, or the call it followed).

The time each catch takes is measured by ``benchmarks/gallery.py`` (the table in
docs/testing.md), not here: timings never decide a test.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from _budget import SOAK
from _child import child_env
from gallery import GALLERY, Bug, machine_catch

CONTRACT_BUGS = [bug for bug in GALLERY if bug.contract]
MODULE = textwrap.dedent('''
    import pytest
    from jsonl_sessions.testing import SessionStoreContract
    import gallery
''')
CLASS = textwrap.dedent('''
    class TestBug{n}(SessionStoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            return gallery.GALLERY[{n}].store(tmp_path / "store", lock_timeout=5)

        @pytest.fixture
        def damage(self, store):
            storage = gallery.GALLERY[{n}].storage
            return None if storage is None else storage(store)
''')


#: The contract's tests of write behaviour (the first group of the mixin, in its order) and
#: the owner check: the tests a bug in a write must fail first (the error tests after them
#: are the mixin's other job, and would take a minute per bug on a loaded machine).
SELECTED = " or ".join(sorted({bug.contract for bug in CONTRACT_BUGS if bug.contract} | {
    "test_message_count_follows_every_change"}))


@pytest.fixture(scope="module")
def first_failures(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[str]]:
    """The contract's failed tests of each bug, in the order pytest ran them."""
    tmp = tmp_path_factory.mktemp("gallery")
    module = tmp / "test_gallery_contract.py"
    module.write_text(MODULE + "".join(CLASS.format(n=GALLERY.index(bug)) for bug in CONTRACT_BUGS))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "-W", "error",
                           "-k", SELECTED, str(module)], capture_output=True, text=True, cwd=tmp, env=child_env(), timeout=900,
                          check=False)
    assert done.returncode in (0, 1), f"the contract run broke:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    failed: dict[int, list[str]] = {}
    for line in done.stdout.splitlines():
        found = re.match(r"FAILED \S+::TestBug(\d+)::(\w+)", line)
        if found:
            failed.setdefault(int(found.group(1)), []).append(found.group(2))
    return failed


@pytest.mark.parametrize("bug", CONTRACT_BUGS, ids=[bug.name for bug in CONTRACT_BUGS])
def test_the_contract_test_named_for_the_bug_fails_first(bug: Bug, first_failures: dict[int, list[str]]) -> None:
    failed = first_failures.get(GALLERY.index(bug), [])
    assert failed, f"no contract test caught {bug.name!r}"
    assert failed[0] == bug.contract, f"{bug.name!r}: the first failing test is {failed[0]}, not {bug.contract}"


#: The bugs the state machine runs on in a lean run (remove_last's: tests/harness/test_report.py).
#: That the correct stores pass the same checks is shown by tests/project/test_testing_doc.py.
LEAN = {"update_last does nothing"}
MACHINE_BUGS = [bug for bug in GALLERY if SOAK or bug.name in LEAN]


@pytest.mark.parametrize("bug", MACHINE_BUGS, ids=[bug.name for bug in MACHINE_BUGS])
def test_the_state_machine_names_the_broken_operation(bug: Bug) -> None:
    check, text = machine_catch(bug, profile="ci" if SOAK else "quick")
    assert f"{bug.operation}(" in check, f"{bug.name!r} was caught by {check!r}, which does not name " \
        f"{bug.operation}:\n{text[:3000]}"
    assert "def test_reproduce(tmp_path):" in text or "test_reproduce" in text or bug.name, text
