"""The environment header every benchmark prints: CPU, kernel, file system of the temp dir,
Python, orjson and SQLite versions, load average, and how the run timed its calls."""

from __future__ import annotations

import os
import platform
import sqlite3
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import orjson

import jsonl_sessions
from benchmarks.measure import BLOCK_FAST, BLOCK_SLOW, timer_overhead_ns


def _unescape_mount(text: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, ch)
    return text


def filesystem_of(path: str) -> dict[str, str] | None:
    """The /proc/mounts entry holding ``path`` (longest mount-point prefix), if readable."""
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            entries = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best: dict[str, str] | None = None
    for parts in entries:
        if len(parts) < 4:
            continue
        mount = _unescape_mount(parts[1])
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best["mount"])):
            best = {"device": _unescape_mount(parts[0]), "mount": mount, "type": parts[2], "options": parts[3]}
    return best


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def load_average() -> float | None:
    """The 1-minute load average (other processes make the numbers noisier)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def environment(directory: str, label: str | None = None) -> dict[str, Any]:
    """Everything the header prints, measured now (``loadavg_end`` is added by the caller)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "label": label,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "kernel": f"{platform.system()} {platform.release()}",
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "cpu_model": cpu_model(),
        "dir": directory,
        "filesystem": filesystem_of(directory),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "jsonl_sessions": getattr(jsonl_sessions, "__version__", "?"),
        "orjson": orjson.__version__,
        "sqlite": sqlite3.sqlite_version,
        "timer_overhead_ns": timer_overhead_ns(),
        "loadavg_start": load_average(),
    }


def default_timing(env: Mapping[str, Any], mode: str) -> str:
    return (f"{mode} run; perf_counter_ns per call, gc paused while timing, implementations take turns "
            f"every {BLOCK_FAST} (us-scale) / {BLOCK_SLOW} (fsync-scale) calls; timer overhead "
            f"{env['timer_overhead_ns']:.0f} ns per sample (included)")


def header_lines(env: Mapping[str, Any], mode: str, timing: str | None = None) -> list[tuple[str, str]]:
    """(name, text) pairs of the environment header; ``timing`` replaces the default line."""
    fs = env["filesystem"]
    if fs:
        fs_text = f"{fs['type']} ({fs['device']} on {fs['mount']}, {fs['options']})"
        if fs["type"] in ("tmpfs", "ramfs"):
            fs_text += "  WARNING: fsync is a no-op on a RAM file system"
    else:
        fs_text = "unknown (/proc/mounts not readable)"
    cpus = f"{env['cpu_count']} logical ({env['cpu_usable']} usable)"
    if env["cpu_model"]:
        cpus += f", {env['cpu_model']}"
    lines = [("run", env["label"])] if env.get("label") else []
    return lines + [
        ("python", env["python"]),
        ("platform", env["platform"]),
        ("kernel", env.get("kernel") or "?"),
        ("cpus", cpus),
        ("temp dir", env["dir"]),
        ("file system", fs_text),
        ("date", env["date"]),
        ("load avg", (f"{env['loadavg_start']} at start, {env.get('loadavg_end')} at end (1-minute; this run "
                      f"adds about 1, the rest is other processes sharing the {env['cpu_usable']} CPUs and the disk)")),
        ("versions", f"jsonl_sessions {env['jsonl_sessions']}, orjson {env['orjson']}, sqlite {env['sqlite']}"),
        ("timing", timing if timing is not None else default_timing(env, mode)),
    ]
