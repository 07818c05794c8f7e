"""Figure 2: K&K accuracy by puzzle size for GRPO, GRPO-SG, TR-GRPO and Reverse, with intervals.

Two panels side by side: greedy accuracy (as the paper reports) and avg@k at the training
temperature. Reference bars: the untrained base model and the base after continued SFT for the
same compute as the matching GRPO run, measured in forward-backward tokens (at tiny scale RL
mostly sharpens sampling, which shows as an avg@k gain without a greedy gain; SFT at equal
compute shows what plain supervised training buys for the same budget). Bars are means over
runs (base seeds x RL seeds) with hierarchical 95% bootstrap intervals over bases and seeds.
"""

from __future__ import annotations

import numpy as np

from rlvr.reproduce.collect import (
    base_evals,
    evals_for,
    runs_for,
    sample_metric,
    seed_ci,
    sft_evals,
)
from rlvr.reproduce.common import METHOD_COLORS, METHOD_LABELS, Context, Output, markdown_table, plt
from rlvr.reproduce.plan import Need

NAME = "fig2"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = (
    "Figure 2 — K&K accuracy by puzzle size (greedy and avg@k), with base and "
    "continued-SFT references"
)
REPORT_ORDER = 20
RL_METHODS = ("grpo", "grpo_sg", "tr_grpo", "reverse")


def needs(ctx: Context) -> list[Need]:
    """The base, continued SFT (when the grid has it) and the RL methods on K&K."""
    refs = ("base", "sft") if ctx.grid.sft_reference else ("base",)
    return [Need.of("kk", m) for m in (*refs, *ctx.grid.arms(RL_METHODS))]


def collect(ctx: Context, out: Output) -> dict[str, list]:
    """Evaluations per method (``base``, ``sft``, then the RL methods), one per seed."""
    evs = {"base": base_evals(ctx, out, "kk")}
    runs = {m: runs_for(ctx, out, "kk", m) for m in ctx.grid.arms(RL_METHODS)}
    if ctx.grid.sft_reference:
        evs["sft"] = sft_evals(ctx, out, "kk", runs["grpo"])
    for m in runs:
        evs[m] = evals_for(ctx, out, "kk", runs[m])
    return evs


def rows(ctx: Context, evs: dict[str, list]) -> list[dict]:
    setting = ctx.grid.settings["kk"]
    avg_key = sample_metric(evs["grpo"])
    out = []
    for mode, metric in (("greedy", "greedy"), (avg_key, avg_key)):
        for method, method_evs in evs.items():
            for size in [str(v) for v in setting.group_values] + ["all"]:
                ci = seed_ci(method_evs, metric, size)
                if ci is None:
                    continue
                out.append(
                    {
                        "method": method,
                        "mode": mode,
                        "n_people": size,
                        "mean": ci.mean,
                        "low": ci.low,
                        "high": ci.high,
                        "seeds": ci.n,
                        "bases": len({ev.unit[0] for ev in method_evs}),
                    }
                )
    return out


def plot(ctx: Context, table: list[dict], out: Output) -> None:
    modes = list(dict.fromkeys(r["mode"] for r in table))
    methods = list(dict.fromkeys(r["method"] for r in table))
    sizes = [str(v) for v in ctx.grid.settings["kk"].group_values]
    fig, axes = plt.subplots(
        1, len(modes), figsize=(6.2 * len(modes), 4.2), sharey=True, squeeze=False
    )
    width = 0.8 / max(1, len(methods))
    for ax, mode in zip(axes[0], modes):
        for j, m in enumerate(methods):
            pts = {r["n_people"]: r for r in table if r["mode"] == mode and r["method"] == m}
            xs = np.arange(len(sizes)) + (j - (len(methods) - 1) / 2) * width
            means = [pts[s]["mean"] if s in pts else np.nan for s in sizes]
            err = [
                [max(0.0, pts[s]["mean"] - pts[s]["low"]) if s in pts else 0 for s in sizes],
                [max(0.0, pts[s]["high"] - pts[s]["mean"]) if s in pts else 0 for s in sizes],
            ]
            hatch = "//" if m in ("base", "sft") else None
            ax.bar(
                xs,
                means,
                width,
                yerr=err,
                capsize=2,
                label=METHOD_LABELS.get(m, m),
                color=METHOD_COLORS.get(m),
                hatch=hatch,
                edgecolor="white",
                linewidth=0.5,
            )
        ax.set_xticks(np.arange(len(sizes)), [f"{s} people" for s in sizes])
        ax.set_title("greedy accuracy" if mode == "greedy" else f"{mode} (temperature of training)")
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("accuracy (mean over runs, 95% CI)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(
        f"Knights & Knaves accuracy by puzzle size ({ctx.grid.name} grid, "
        f"{len(ctx.units())} run(s) per method)"
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    out.save_fig(fig)


def markdown(ctx: Context, table: list[dict]) -> str:
    """The figure's numbers: one table per mode, methods x sizes, mean [95% CI] over seeds."""
    sizes = [str(v) for v in ctx.grid.settings["kk"].group_values] + ["all"]
    md = [
        f"# K&K accuracy by puzzle size ({ctx.grid.name} grid, {ctx.draws()}, "
        f"model {ctx.grid.settings['kk'].model})",
        "",
    ]
    for mode in dict.fromkeys(r["mode"] for r in table):
        cells = {(r["method"], r["n_people"]): r for r in table if r["mode"] == mode}
        body = []
        for m in dict.fromkeys(r["method"] for r in table):
            row = [METHOD_LABELS.get(m, m)]
            for s in sizes:
                r = cells.get((m, s))
                row.append(
                    "n/a"
                    if r is None
                    else (
                        f"{r['mean']:.3f}"
                        if r["seeds"] <= 1
                        else f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
                    )
                )
            body.append(row)
        md += [
            "## "
            f"{'greedy accuracy' if mode == 'greedy' else mode + ' at the training temperature'}",
            "",
            markdown_table(["method"] + [f"{s} ppl" if s != "all" else "all" for s in sizes], body),
            "",
        ]
    return "\n".join(md)


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    if out.lacks("kk", "K&K figure"):
        return out.finish()
    evs = collect(ctx, out)
    table = rows(ctx, evs)
    out.write_csv(table)
    out.write_md(markdown(ctx, table))
    plot(ctx, table, out)
    return out.finish()
