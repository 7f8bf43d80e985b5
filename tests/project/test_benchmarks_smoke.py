"""The benchmark script runs end to end and reports every row (tiny sizes; no timing checks:
benchmarks are measurements, never a gate)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

EXPECTED_ROWS = {
    "append_flush": {"floor", "bare", "jsonl_sessions", "sqlite_wal_normal", "sqlite_intpk",
                     "sqlite_bare_normal"},
    "append_fsync": {"floor", "bare", "jsonl_sessions", "sqlite_wal_full", "sqlite_intpk"},
    "append_many_flush": {"floor", "jsonl_sessions", "sqlite_wal_normal"},
    "append_many_fsync": {"floor", "jsonl_sessions", "sqlite_wal_full"},
    "load": {"floor", "floor_dropped", "load", "jsonl_sessions", "sqlite_wal"},
    "rewrite_fsync": {"floor", "jsonl_sessions", "sqlite_wal_full"},
    "remove_last_flush": {"floor", "jsonl_sessions_small", "jsonl_sessions", "sqlite_wal_normal_small",
                          "sqlite_wal_normal"},
    "remove_last_fsync": {"floor", "jsonl_sessions_small", "jsonl_sessions", "sqlite_wal_full_small",
                          "sqlite_wal_full"},
}
for _group in EXPECTED_ROWS.values():  # the SQLite backend (benchmarks/sqlite_backend.py) in every group
    _group.add("jsonl_sessions_sqlite")
CONCURRENCY = {"jsonl_sessions", "threads_2_one", "threads_2_diff", "threads_4_one", "threads_4_diff",
               "threads_8_one", "threads_8_diff", "processes_4_one", "processes_4_diff", "floor", "floor_8_one",
               "floor_8_diff"}
EXPECTED_ROWS["concurrency_fsync"] = EXPECTED_ROWS["concurrency_latency"] = CONCURRENCY
# Every ratio of the performance table, each with its goal (None: reported without one).
EXPECTED_GOALS = {
    "bare_flush": "<= 1.15", "bare_fsync": "<= 1.15", "durable_append": ">= 0.85", "flush_append": ">= 1.5", "try_load": "<= 1.3", "rewrite": "<= 3.0",
    "append_many": "<= 1.5", "concurrency_threads_8_one": ">= 2.0", "concurrency_threads_8_diff": ">= 2.0",
    "remove_last_flush": "<= 1.5", "remove_last_fsync": "<= 1.5",
    **{f"concurrency_{c}": None for c in CONCURRENCY - {"jsonl_sessions", "floor", "threads_8_one", "threads_8_diff"}},
}


@pytest.fixture
def bench(untimed: None) -> ModuleType:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import run

    return run


def test_quick_run_reports_every_row_and_cleans_up(
    bench: ModuleType, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    results = tmp_path / "results.json"
    argv = ["--quick", "--scale", "0.01", "--dir", str(work), "--json", str(results), "--markdown", "--label", "smoke"]

    assert bench.main(argv) == 0

    data = json.loads(results.read_text(encoding="utf-8"))
    assert {g["id"]: {r["impl"] for r in g["rows"]} for g in data["groups"]} == EXPECTED_ROWS
    for group in data["groups"]:
        assert group["floor"] == "floor" and group["ours"] == "jsonl_sessions"
        for row in group["rows"]:
            assert row["samples"] > 0
            assert 0 < row["median_ns"] <= row["p95_ns"]
            assert row["vs_floor"] > 0 and row["vs_ours"] > 0
        by_impl = {r["impl"]: r for r in group["rows"]}
        assert by_impl["floor"]["vs_floor"] == 1.0
        assert by_impl["jsonl_sessions"]["vs_ours"] == 1.0
    assert {t["id"]: t["need"] for t in data["targets"]} == EXPECTED_GOALS
    for t in data["targets"]:
        assert t["value"] > 0
        assert t["met"] is None if t["need"] is None else isinstance(t["met"], bool)
    env = data["environment"]
    for field in ("python", "platform", "kernel", "cpu_count", "filesystem", "date", "jsonl_sessions", "orjson",
                  "sqlite"):
        assert env[field], field
    assert env["label"] == "smoke"

    out = capsys.readouterr().out
    for heading in ("run", "python", "platform", "kernel", "cpus", "file system", "date", "versions", "goals ("):
        assert f"  {heading:<12} " in out or heading == "goals (", heading
    assert "goals (" in out and "| check | measured | goal | verdict |" in out
    for t in data["targets"]:
        goal = f"goal {t['need']}x" if t["need"] else "no goal (reported)"
        verdict = "-" if t["met"] is None else "met" if t["met"] else "MISSED"
        assert any(t["text"] in line and goal in line and line.lstrip().startswith(verdict)
                   for line in out.splitlines()), t["id"]
    text, sep, markdown = out.partition("| operation | implementation | median | p95 | vs floor | vs ours |")
    assert sep
    for group in data["groups"]:
        assert f"{group['title']}  [{group['unit']}]" in text
        assert f"| **{group['title']}**<br>{group['unit']} |" in markdown
        for row in group["rows"]:
            assert f"  {row['label']} " in text, row["label"]
            assert f" {row['label']} |" in markdown or f" **{row['label']}** |" in markdown, row["label"]
    assert list(work.iterdir()) == []  # temp dir removed


@pytest.mark.parametrize("command", [["-m", "benchmarks"], ["benchmarks/run.py"]])
def test_both_entry_points_start(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--json" in done.stdout and "--markdown" in done.stdout


def test_syscall_listing_runs_for_both_modes(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import syscalls

    assert syscalls.main(["--dir", str(tmp_path)]) == 0

    out = capsys.readouterr().out
    for mode in ("fsync", "flush"):
        section = out.split(f'durability="{mode}"', 1)[1].split("one warm append", 1)[0]
        assert "seam: " in section and "os: " in section and "strace: " in section
        assert "write" in section.split("seam: ", 1)[1].splitlines()[0]
        assert ("fsync" in section.split("seam: ", 1)[1].splitlines()[0]) == (mode == "fsync")
    assert list(tmp_path.iterdir()) == []  # temp dir removed


def test_append_path_benchmark_reports_every_row(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``benchmarks.appendpath``: the bare append, its variants and each system call alone are
    all timed, and the bare append writes what the store reads as a session."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import appendpath
    from benchmarks.bare import BareAppend
    from jsonl_sessions import SessionStore

    assert appendpath.main(["--flush", "20", "--fsync", "3", "--calls", "20", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for label in ("bare Python: the same system calls", "bare Python, every call through", "with an fstat after the write",
                  "without the count cache", "control file mapped", "pwrite(2) of the 40-byte count cache",
                  'calls per warm append, durability="flush"', 'calls per warm append, durability="fsync"',
                  'bytecodes per warm append, durability="flush"', 'bytecodes per warm append, durability="fsync"'):
        assert label in out
    assert list(tmp_path.iterdir()) == []

    for options in ({}, {"seam": True}, {"mapped": True}, {"fstat": True}):
        for durable in (False, True):
            root = tmp_path / f"bare-{durable}-{'-'.join(options)}"
            root.mkdir()
            bare = BareAppend(str(root), durable, **options)  # type: ignore[arg-type]
            ids = [bare.append({"role": "user", "content": f"m{i}", "tool_call_id": "t"}) for i in range(5)]
            bare.close()
            store = SessionStore(str(root))
            assert [m.id for m in store.try_load("bare")] == ids
            assert store.get_message_count("bare") == 5


def test_scale_benchmarks_run_and_report_every_goal(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import scale

    work = tmp_path / "work"
    work.mkdir()
    results = tmp_path / "scale.json"
    assert scale.main(["--tiny", "--dir", str(work), "--json", str(results)]) == 0

    data = json.loads(results.read_text(encoding="utf-8"))
    assert {(ln["group"], ln["impl"]) for ln in data["lines"]} == {
        ("import", "floor"), ("import", "ours"), ("rss", "floor"), ("rss", "ours"), ("rss", "ours_load"),
        ("list", "floor"), ("list", "ours"), ("list", "ours_first"), ("list", "ours_name"), ("list", "ours_sidebar"),
        ("search", "grep"), ("search", "ours")}
    assert all(ln["samples"] for ln in data["lines"])
    assert {g["id"]: g["need"] for g in data["goals"]} == {"import": 60, "rss": 1.5, "list": 4, "list-first": 4,
                                                           "list-name": 4, "sidebar": 4, "search": 5}
    out = capsys.readouterr().out
    for goal in data["goals"]:
        assert goal["text"] in out
    assert list(work.iterdir()) == []  # temp dir removed


def test_a_baseline_revision_is_measured_in_the_same_run(
    bench: ModuleType, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--baseline-rev`` adds the older package's append and rewrite rows, taking turns with
    ours, and its ratios next to the goals (here the baseline is this very commit)."""
    work = tmp_path / "work"
    work.mkdir()
    results = tmp_path / "results.json"
    argv = ["--quick", "--scale", "0.01", "--dir", str(work), "--json", str(results), "--baseline-rev", "HEAD"]

    assert bench.main(argv) == 0

    data = json.loads(results.read_text(encoding="utf-8"))
    with_baseline = {g["id"] for g in data["groups"] if any(r["impl"] == "baseline" for r in g["rows"])}
    assert with_baseline == {"append_flush", "append_fsync", "rewrite_fsync"}
    targets = {t["id"]: t for t in data["targets"]}
    for goal in ("bare_flush", "bare_fsync", "durable_append", "flush_append", "rewrite"):
        assert targets[f"{goal}_baseline"]["need"] == targets[goal]["need"]
        assert targets[f"{goal}_baseline"]["value"] > 0
    assert "[baseline version]" in capsys.readouterr().out
    assert list(work.iterdir()) == []
    assert "jsonl_sessions_baseline" in sys.modules  # imported as a separate package


def test_search_benchmark_runs_and_reports_every_goal(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import search

    results = tmp_path / "search.json"
    argv = ["--tiny", "--size", "0.2", "--queries", "5", "--rounds", "1", "--cache", str(tmp_path / "cache"),
            "--json", str(results)]
    assert search.main(argv) == 0
    data = json.loads(results.read_text(encoding="utf-8"))
    assert {r["group"] for r in data["rows"]} == {"ascii", "mixed", "natural", "index-mixed", "index-natural"}
    assert {g["need"] for g in data["goals"]} == {"<= 5x", "<= 2x", "<= 50 ms", ">= 50x", "-"}
    for name in ("mixed", "natural"):
        assert data["figures"][f"{name}_index_bytes"] > 0 and data["figures"][f"{name}_indexed_messages"] > 0
        assert data["figures"][f"{name}_floor_insert_ns"] > 0
    out = capsys.readouterr().out
    for goal in data["goals"]:
        assert goal["goal"] in out
    assert search.main(argv) == 0  # the stores are generated once and reused
    assert "writing a" not in capsys.readouterr().err


@pytest.mark.parametrize("options, calls", [
    ({}, {"fcntl.flock": 2, "os.pread": 1, "os.lstat": 1, "os.write": 1, "os.pwrite": 1}),
    ({"fstat": True}, {"fcntl.flock": 2, "os.pread": 1, "os.lstat": 1, "os.write": 1, "os.fstat": 1, "os.pwrite": 1}),
    ({"no_count": True}, {"fcntl.flock": 2, "os.pread": 1, "os.lstat": 1, "os.write": 1}),
    ({"mapped": True}, {"fcntl.flock": 2, "os.lstat": 1, "os.write": 1}),
])
def test_each_bare_append_makes_the_system_calls_its_label_names(tmp_path: pathlib.Path, options: dict[str, bool],
                                                                 calls: dict[str, int]) -> None:
    """The bare append and its variants are yardsticks by the system calls they make (6, 7,
    5 and 4 in flush mode): a variant that skipped one by mistake would time something else."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.bare import BareAppend
    from syscalls import SyscallProbe

    with SyscallProbe() as probe:  # built inside: it binds some os functions when made
        bare = BareAppend(str(tmp_path), False, **options)  # type: ignore[arg-type]
        for i in range(3):
            bare.append({"role": "user", "content": f"m{i}"})
        probe.calls.clear()
        bare.append({"role": "user", "content": "counted"})
        counted = dict(probe.os)
    bare.close()
    assert counted == calls
