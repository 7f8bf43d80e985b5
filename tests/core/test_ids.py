"""Bulk id assignment: a run of new ids is the same as asking for them one by one, as far
as a session can tell (strictly increasing ULIDs after the previous id)."""

from __future__ import annotations

import itertools
import threading

from hypothesis import given
from hypothesis import strategies as st

from jsonl_sessions import ids

ULIDS = st.integers(min_value=0, max_value=(1 << 127) - 1).map(ids.encode)  # room for any run after them
CUSTOM = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)  # sorts above every ULID


@given(previous=st.none() | ULIDS, count=st.integers(min_value=0, max_value=40),
       now=st.integers(min_value=0, max_value=(1 << 47) - 1))
def test_next_ids_are_increasing_ulids_after_previous(previous: str | None, count: int, now: int) -> None:
    got = ids.next_ids(previous, count, now)

    assert got is not None and len(got) == count
    assert all(ids.decode(i) is not None for i in got)
    chain = ([previous] if previous else []) + got
    assert all(a < b for a, b in itertools.pairwise(chain))
    if got and (previous is None or ids.decode(previous) < now << 80):  # type: ignore[operator]
        assert ids.timestamp_ms(got[0]) == now  # a fresh id when the clock is ahead


@given(previous=CUSTOM, count=st.integers(min_value=1, max_value=5))
def test_no_ids_after_a_custom_id_above_every_ulid(previous: str, count: int) -> None:
    assert ids.next_ids(previous, count) is None and ids.next_ids(previous, 0) == []


def test_no_run_past_the_largest_ulid() -> None:
    top = ids.encode((1 << 128) - 3)
    assert ids.next_ids(top, 2) == [ids.encode((1 << 128) - 2), ids.encode((1 << 128) - 1)]
    assert ids.next_ids(top, 3) is None


def test_runs_made_in_threads_at_once_stay_increasing_each() -> None:
    runs: list[list[str]] = []

    def make() -> None:
        for _ in range(200):
            got = ids.next_ids(None, 5, 1_700_000_000_000)
            assert got is not None
            runs.append(got)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 800 and all(a < b for run in runs for a, b in itertools.pairwise(run))
