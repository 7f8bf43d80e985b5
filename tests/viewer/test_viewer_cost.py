"""What a page costs is its page, not its session: the viewer's routes over a JSONL session
of 20,000 messages (about 10 MB) read a small fraction of the transcript, counted through
the platform seam (bytes returned by every read), never timed."""

from __future__ import annotations

import pathlib

import pytest
from syscalls import SyscallProbe

from jsonl_sessions import SessionStore
from jsonl_sessions.viewer.app import Viewer

N = 20_000
TEXT = "x" * 480


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Viewer, list[str], int]:
    root = tmp_path_factory.mktemp("cost") / "store"
    store = SessionStore(root, durability="flush")
    ids: list[str] = []
    for lo in range(0, N, 5_000):
        ids += store.append_many("big", [{"role": "user", "content": f"{i} {TEXT}"} for i in range(lo, lo + 5_000)])
    size = sum(p.stat().st_size for p in pathlib.Path(root).glob("*.jsonl"))
    return Viewer(store, str(root)), ids, size


@pytest.mark.parametrize("route", ["newest", "older", "around", "tail", "raw"])
def test_a_page_reads_a_small_fraction_of_a_long_session(big: tuple[Viewer, list[str], int], route: str) -> None:
    viewer, ids, size = big
    mid = ids[N // 2]
    path, params = {
        "newest": ("/session", {"key": ["big"]}),
        "older": ("/messages.part", {"key": ["big"], "before": [mid]}),
        "around": ("/session", {"key": ["big"], "at": [mid]}),
        "tail": ("/messages.part", {"key": ["big"], "after": [ids[-1]]}),
        "raw": ("/raw", {"key": ["big"], "id": [mid]}),
    }[route]
    assert size > 9_000_000
    with SyscallProbe() as p:
        response = viewer.handle(path, params)
    assert response.status == 200
    assert sum(p.read_sizes) < size // 20, (route, sum(p.read_sizes), size)  # a few pages, never the file
