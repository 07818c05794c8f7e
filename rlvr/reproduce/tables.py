"""Shared body of table_math and table_qa: GRPO vs GRPO-SG (and the base model) per column.

The paper's math and QA tables compare GRPO with GRPO-SG; TR-GRPO (the earlier version's
probability form) and the Reverse weighting (the opposite shaping, docs/design.md §5) are rows
too, so each task reports the four methods. Where the grid has continued-SFT references (the
tiny grid) and the task is one set of groups, an "SFT" row gives the base after continued SFT at
the compute of the matching-seed GRPO run (RL against SFT at equal compute).

Columns are the grid's evaluation sets (paper: one benchmark each) or, on the tiny grid,
the groups of the synthetic task (difficulty, hops). Cells: mean over seeds [95% bootstrap CI
over seeds]. "GRPO-SG beats GRPO" (and "TR-GRPO beats GRPO") is decided from the paired
per-item difference over all columns together, and only where GRPO moved the same items over the
base by the grid's ``min_grpo_gain`` (else "not testable at this scale").
"""

from __future__ import annotations

from rlvr.reproduce.collect import (
    base_evals,
    compare,
    evals_for,
    runs_for,
    sample_metric,
    seed_ci,
    sft_evals,
)
from rlvr.reproduce.common import METHOD_LABELS, Context, Output, fmt_ci, markdown_table
from rlvr.reproduce.plan import Need

METHODS = ("base", "grpo", "grpo_sg", "tr_grpo", "reverse")
#: Table rows in order; "sft" only where ``has_sft_row``.
ROWS = ("base", "sft", "grpo", "grpo_sg", "tr_grpo", "reverse")


def has_sft_row(ctx: Context, setting_key: str) -> bool:
    return ctx.grid.sft_reference and not ctx.grid.settings[setting_key].eval_sets


def needs(ctx: Context, setting_key: str) -> list[Need]:
    """The table's rows on the setting (the SFT row where ``has_sft_row``)."""
    if setting_key not in ctx.grid.settings:
        return []
    sft = ("sft",) if has_sft_row(ctx, setting_key) else ()
    return [Need.of(setting_key, m) for m in (*ctx.grid.arms(METHODS), *sft)]


def column_evals(ctx: Context, out: Output, setting_key: str):
    """``column -> method -> [evaluation per seed]`` and the summary group of each column."""
    setting = ctx.grid.settings[setting_key]
    runs = {m: runs_for(ctx, out, setting_key, m) for m in ctx.grid.arms(METHODS) if m != "base"}
    if setting.eval_sets:
        cols = {}
        for name, kwargs in setting.eval_sets.items():
            cols[name] = {
                "base": base_evals(ctx, out, setting_key, (name, kwargs)),
                **{m: evals_for(ctx, out, setting_key, runs[m], (name, kwargs)) for m in runs},
            }
        return cols, {name: "all" for name in cols}
    evs = {
        "base": base_evals(ctx, out, setting_key),
        **{m: evals_for(ctx, out, setting_key, runs[m]) for m in runs},
    }
    if has_sft_row(ctx, setting_key):
        evs["sft"] = sft_evals(ctx, out, setting_key, runs["grpo"])
    labels = {f"{setting.group_by} {v}": str(v) for v in setting.group_values}
    return {label: evs for label in labels}, labels


def build(
    ctx: Context,
    out: Output,
    setting_key: str,
    title: str,
    metrics: list[tuple[str, str]],
    claim_setting: str,
    paper_lines: list[str],
    key: str = "correct",
) -> None:
    """Write ``<name>.md`` and ``<name>.csv``; ``metrics`` are ``(summary key, heading)`` pairs."""
    cols, group_of = column_evals(ctx, out, setting_key)
    first = next(iter(cols.values()))
    csv_rows = []
    md = [
        f"# {title} ({ctx.grid.name} grid, {ctx.draws()}, "
        f"model {ctx.grid.settings[setting_key].model})",
        "",
    ]
    for metric, heading in metrics:
        if metric == "avg@k":
            metric = sample_metric(first["grpo"])
        table = []
        for m in (m for m in ROWS if m in first):
            cells = []
            for col, evs in cols.items():
                ci = seed_ci(evs[m], metric, group_of[col])
                cells.append(fmt_ci(ci))
                if ci is not None:
                    csv_rows.append(
                        {
                            "method": m,
                            "metric": metric,
                            "column": col,
                            "mean": ci.mean,
                            "low": ci.low,
                            "high": ci.high,
                            "seeds": ci.n,
                        }
                    )
            table.append([METHOD_LABELS[m]] + cells)
        md += [
            f"## {heading.replace('avg@k', metric)}",
            "",
            markdown_table(["method"] + list(cols), table),
            "",
        ]
    # One paired comparison over every item of every column, where GRPO moved them.
    tagged = {m: _tagged([ev for evs in _distinct(cols, m) for ev in evs]) for m in first}
    for method in ctx.grid.arms(("grpo_sg", "tr_grpo")):
        label = METHOD_LABELS[method]
        compare(
            out,
            f"{label} beats GRPO",
            claim_setting,
            tagged[method],
            tagged["grpo"],
            key=key,
            label=f"{label} - GRPO",
            endpoint=(tagged["grpo"], tagged["base"]),
        )
    md += ["## Claim (paired per-item difference)", ""]
    md += [
        f"- **{c['claim']}** ({c['setting']}): {c['verdict']}. {c['evidence']}." for c in out.claims
    ]
    md += ["", "## The paper's reported numbers", ""] + paper_lines
    out.write_csv(csv_rows)
    out.write_md("\n".join(md))


def _distinct(cols, method):
    """Each column's evaluations once (tiny-grid columns share one evaluation)."""
    seen, outl = set(), []
    for name, evs in cols.items():
        ids = tuple(id(e) for e in evs[method])
        if ids in seen:
            continue
        seen.add(ids)
        outl.append([(name, e) for e in evs[method]])
    return outl


class _Tagged:
    """An evaluation whose item ids carry its column, so items of different sets never collide."""

    def __init__(self, name, ev):
        self.records = [{**r, "item": f"{name}:{r['item']}"} for r in ev.records]
        self.summary = ev.summary
        self.unit = ev.unit


def _tagged(pairs):
    return [_Tagged(name, ev) for name, ev in pairs]
