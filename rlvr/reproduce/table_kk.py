"""Table: K&K accuracy per puzzle size and average for GRPO, 80/20, AR, Lopti, Reverse, GRPO-SG.

Cells are the mean over seeds with a 95% bootstrap interval over seeds; greedy accuracy (the
paper's metric) first, avg@k at the training temperature second. The paper's claims on K&K are
decided here from paired per-item differences (each item's accuracy averaged over seeds):
"GRPO-SG beats GRPO" holds when the interval of GRPO-SG - GRPO lies above 0; "Reverse is close
to GRPO" holds when the interval of Reverse - GRPO lies within the grid's ``close_margin``.
"""

from __future__ import annotations

from rlvr.reproduce import paper_numbers
from rlvr.reproduce.collect import compare, evals_for, runs_for, sample_metric, seed_ci
from rlvr.reproduce.common import METHOD_LABELS, Context, Output, fmt_ci, markdown_table
from rlvr.reproduce.plan import Need

NAME = "table_kk"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = "Table — K&K accuracy for six methods"
REPORT_ORDER = 50
#: The six methods of the K&K table (docs/design.md, "Optimizer math"), in the paper's order.
KK_METHODS = ("grpo", "entropy_top", "ar", "lopti", "reverse", "grpo_sg")


def kk_settings(ctx: Context) -> list[str]:
    """The grid's K&K settings in order (the paper's table has one per model: 3B and 7B)."""
    return [key for key, s in ctx.grid.settings.items() if s.env == "kk"]


def needs(ctx: Context) -> list[Need]:
    """The six methods on every K&K setting."""
    return [Need.of(key, m) for key in kk_settings(ctx) for m in KK_METHODS]


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    csv_rows, md, results = [], [], {}
    keys = kk_settings(ctx)
    for key in keys:
        where = "K&K" if key == keys[0] else f"K&K, {ctx.grid.settings[key].model}"
        tables, evs = _setting_table(ctx, out, key, csv_rows)
        md += tables
        suffix = "" if key == keys[0] else f"[{key}]"
        results.update({f"{name}{suffix}": ci for name, ci in _claims(ctx, out, evs, where)})
    md += ["## Claims (paired per-item differences)", ""]
    md += [
        f"- **{c['claim']}** ({c['setting']}): {c['verdict']}. {c['evidence']}." for c in out.claims
    ]
    md += ["", "## The paper's reported K&K average accuracy (Qwen2.5, 3-7 people)", ""]
    md += paper_numbers.kk_lines()
    out.write_csv(csv_rows)
    out.write_md("\n".join(md))
    return out.finish(results)


def _setting_table(ctx: Context, out: Output, key: str, csv_rows: list) -> tuple[list, dict]:
    """The greedy and avg@k tables of one K&K setting as markdown lines (rows added to
    ``csv_rows``), and its evaluations per method."""
    setting = ctx.grid.settings[key]
    evs = {m: evals_for(ctx, out, key, runs_for(ctx, out, key, m)) for m in KK_METHODS}
    sizes = [str(v) for v in setting.group_values]
    avg_key = sample_metric(evs["grpo"])
    md = [
        f"# K&K accuracy by number of people ({ctx.grid.name} grid, "
        f"{ctx.draws()}, model {setting.model})",
        "",
    ]
    for metric in ("greedy", avg_key):
        table = []
        for m in KK_METHODS:
            cells = []
            for size in sizes + ["all"]:
                ci = seed_ci(evs[m], metric, size)
                cells.append(fmt_ci(ci))
                if ci is not None:
                    csv_rows.append(
                        {
                            "model": setting.model,
                            "method": m,
                            "metric": metric,
                            "n_people": size,
                            "mean": ci.mean,
                            "low": ci.low,
                            "high": ci.high,
                            "seeds": ci.n,
                        }
                    )
            table.append([METHOD_LABELS[m]] + cells)
        md += [
            f"## {metric} accuracy"
            + (" (as the paper)" if metric == "greedy" else " at the training temperature"),
            "",
            markdown_table(["method"] + [f"{s} ppl" for s in sizes] + ["avg"], table),
            "",
        ]
    return md, evs


def _claims(ctx: Context, out: Output, evs: dict, where: str):
    """Decide the paper's K&K claims on one setting's evaluations; yields ``(name, interval)``."""
    sg = compare(
        out, "GRPO-SG beats GRPO", where, evs["grpo_sg"], evs["grpo"], label="GRPO-SG - GRPO"
    )
    yield "grpo_sg_minus_grpo", sg.as_dict()
    rv = compare(
        out,
        "Reverse is close to GRPO",
        where,
        evs["reverse"],
        evs["grpo"],
        close_margin=ctx.grid.close_margin,
        label="Reverse - GRPO",
    )
    yield "reverse_minus_grpo", rv.as_dict()
    compare(
        out,
        "GRPO-SG beats GRPO (avg@k, beyond the paper)",
        where,
        evs["grpo_sg"],
        evs["grpo"],
        mode="sample",
        label="GRPO-SG - GRPO",
    )
