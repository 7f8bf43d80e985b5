"""The one place benchmark tables are drawn: the environment header, groups of rows (median,
p95, ratio to the floor and to jsonl_sessions), and goals (a ratio, its goal, met or not),
as plain text for a terminal and as Markdown for the README; plus the JSON form.

Every benchmark script (``benchmarks.run``, ``benchmarks.history``, ``benchmarks.peers``)
prints through these functions, so their reports read alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

from benchmarks.measure import Group, Row, Target

LEGEND = "  vs floor = median / floor median;  vs ours = median / jsonl_sessions median (> 1: slower than ours)"
GOALS = "goals (ratios of medians from this run; a measurement, never a gate)"


def fmt_ns(ns: float) -> str:
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        us = ns / 1_000
        return f"{us:.2f} us" if us < 10 else f"{us:.1f} us"
    if ns < 1_000_000_000:
        ms = ns / 1_000_000
        return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def fmt_ratio(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


def verdict(t: Target) -> str:
    return "-" if t.met is None else "met" if t.met else "MISSED"


# -- plain text ---------------------------------------------------------------------------
def header_text(title: str, header: Sequence[tuple[str, str]]) -> list[str]:
    """The title, then one indented ``name  value`` line per header entry."""
    return [title] + [f"  {k:<12} {v}" for k, v in header]


def row_text(r: Row, width: int, calls: bool) -> str:
    n = f" {len(r.samples):>6}" if calls else ""
    return (f"  {r.label:<{width - 2}}{n} {fmt_ns(r.median_ns):>10} {fmt_ns(r.p95_ns):>10} "
            f"{fmt_ratio(r.vs_floor):>9} {fmt_ratio(r.vs_ours):>8}")


def groups_text(groups: Sequence[Group], *, calls: bool = False, min_width: int = 62) -> list[str]:
    """The legend, a column header, then each group's title and its rows; ``calls`` adds the
    sample count column."""
    if not groups:
        return []
    w = max([min_width] + [len(r.label) + 2 for g in groups for r in g.rows])
    n = f" {'calls':>6}" if calls else ""
    out = [LEGEND, "", f"{'operation / implementation':<{w}}{n} {'median':>10} {'p95':>10} {'vs floor':>9} {'vs ours':>8}"]
    for g in groups:
        out.append(f"{g.title}  [{g.unit}]")
        out += [row_text(r, w, calls) for r in g.rows]
    return out


def goals_text(goals: Sequence[Target], heading: str = GOALS) -> list[str]:
    """One line per goal: verdict, what is checked, the measured ratio and the goal."""
    if not goals:
        return []
    w = max(len(t.text) for t in goals)
    m = max(len(f"{t.measure} = {t.value:.2f}x") for t in goals)
    out = [heading]
    for t in goals:
        measured = f"{t.measure} = {t.value:.2f}x"
        goal = f"goal {t.need}x" if t.need else "no goal (reported)"
        out.append(f"  {verdict(t):<6}  {t.text:<{w}}  {measured:<{m}}  {goal}")
    return out


def render_text(title: str, header: Sequence[tuple[str, str]], groups: Sequence[Group],
                goals: Sequence[Target], *, calls: bool = False, goals_heading: str = GOALS) -> str:
    """The whole plain-text report: header, groups, goals."""
    out = header_text(title, header)
    if groups:
        out += [""] + groups_text(groups, calls=calls)
    if goals:
        out += [""] + goals_text(goals, goals_heading)
    return "\n".join(out)


# -- Markdown -----------------------------------------------------------------------------
def header_markdown(header: Sequence[tuple[str, str]]) -> list[str]:
    return [f"- {k}: {v}" for k, v in header]


def groups_markdown(groups: Sequence[Group]) -> list[str]:
    """One table, a group per block of rows, our row in bold."""
    if not groups:
        return []
    out = ["| operation | implementation | median | p95 | vs floor | vs ours |", "|---|---|--:|--:|--:|--:|"]
    for g in groups:
        for i, r in enumerate(g.rows):
            op = f"**{g.title}**<br>{g.unit}" if i == 0 else ""
            name = f"**{r.label}**" if r.impl == g.ours else r.label
            out.append(f"| {op} | {name} | {fmt_ns(r.median_ns)} | {fmt_ns(r.p95_ns)} | "
                       f"{fmt_ratio(r.vs_floor)} | {fmt_ratio(r.vs_ours)} |")
    return out


def goals_markdown(goals: Sequence[Target]) -> list[str]:
    if not goals:
        return []
    out = ["| check | measured | goal | verdict |", "|---|--:|--:|---|"]
    for t in goals:
        v = verdict(t)
        out.append(f"| {t.text} | {t.measure} = {t.value:.2f}x | {f'{t.need}x' if t.need else '-'} | "
                   f"{'**missed**' if v == 'MISSED' else v} |")
    return out


def render_markdown(header: Sequence[tuple[str, str]], groups: Sequence[Group], goals: Sequence[Target]) -> str:
    """The whole Markdown report: header as a list, then the groups table, then the goals table."""
    out = header_markdown(header)
    for block in (goals_markdown(goals), groups_markdown(groups)):
        if block:
            out += [""] + block
    return "\n".join(out)


# -- JSON ---------------------------------------------------------------------------------
def to_json(env: Mapping[str, Any], mode: str, sizes: object, groups: Sequence[Group],
            goals: Sequence[Target], elapsed: float) -> dict[str, Any]:
    """Every row (median, p95, ratios, sample count; not the samples), the goals and the
    environment, ready for ``json.dump``."""
    return {
        "environment": dict(env),
        "mode": mode,
        "sizes": asdict(sizes) if is_dataclass(sizes) and not isinstance(sizes, type) else None,
        "elapsed_s": round(elapsed, 2),
        "groups": [
            {"id": g.id, "title": g.title, "unit": g.unit, "floor": g.floor, "ours": g.ours,
             "rows": [{"impl": r.impl, "label": r.label, "samples": len(r.samples), "median_ns": r.median_ns,
                       "p95_ns": r.p95_ns, "vs_floor": r.vs_floor, "vs_ours": r.vs_ours} for r in g.rows]}
            for g in groups
        ],
        "targets": [asdict(t) for t in goals],
    }
