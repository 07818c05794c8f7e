"""Sweep (beyond the paper): GRPO-SG's sensitivity to tau, mu and alpha on K&K.

The paper does not publish tau, mu, alpha, L, U (docs/design.md §5). Each parameter is varied on
its own around the defaults of ``rlvr.agents.algorithms.grpo_sg.GRPO_SG_DEFAULTS`` (the others
held at their defaults), every point with the grid's ``sweep_extra`` overrides (the tiny grid:
the fixed-parameter probability form, whose parameters have values to vary); every point is a
full training run per seed. Cells: greedy accuracy and
avg@k over all K&K sizes, mean over seeds [95% bootstrap CI]; the last column is the paired
per-item difference to the default GRPO-SG run. The grid's ``sweep_seeds`` sets how many seeds
each point gets (default: every seed; a single seed shows no interval).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rlvr.reproduce.collect import evals_for, paired_items, runs_for, sample_metric, seed_ci
from rlvr.reproduce.common import Context, Output, fmt_ci, markdown_table, plt
from rlvr.reproduce.plan import Need

NAME = "sweep"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = "Sweep — GRPO-SG sensitivity to tau, mu, alpha (beyond the paper)"
REPORT_ORDER = 80


def sweep_seeds(ctx: Context) -> list[int]:
    """Seeds of the sweep's non-default points (the grid's ``sweep_seeds`` first seeds)."""
    n = ctx.grid.sweep_seeds or len(ctx.seeds)
    return ctx.seeds[:n]


def needs(ctx: Context) -> list[Need]:
    """GRPO-SG on K&K at its defaults and at every sweep point, on the sweep's seeds (nothing
    for a grid without a sweep)."""
    if not ctx.grid.sweep:
        return []
    units = tuple((b, s) for b in ctx.base_seeds for s in sweep_seeds(ctx))
    points = [{}] + [
        {f"weights.{param}": float(v)} for param, values in ctx.grid.sweep.items() for v in values
    ]
    return [Need.of("kk", "grpo_sg", point(ctx, extra), units=units) for extra in points]


def point(ctx: Context, extra: dict) -> dict:
    """A sweep point's overrides: the grid's ``sweep_extra`` and the point's own."""
    return {**ctx.grid.sweep_extra, **extra}


def defaults(ctx: Context) -> dict[str, float]:
    """The default point's parameters (the first draw's run: the defaults are a property of the
    recipe, not of the draw)."""
    b, s = ctx.base_seeds[0], sweep_seeds(ctx)[0]
    return ctx.plan.run("kk", "grpo_sg", point(ctx, {}), b, s).config.weights.params("grpo_sg")


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    if not ctx.grid.sweep:
        out.write_md(f"No sensitivity sweep in the {ctx.grid.name} grid (`sweep` is empty).")
        return out.finish()
    base = defaults(ctx)
    seeds = sweep_seeds(ctx)
    point_ctx = dataclasses.replace(ctx, seeds=seeds)
    # The default point: the seeds the other points have (a paired comparison needs equal seeds).
    # tagged apart from the grid's GRPO-SG (the K&K table's runs) when sweep_extra changes it
    default_tag = "grpo_sg" + "".join(
        f"[{k.split('.')[-1]}={v}]" for k, v in sorted(ctx.grid.sweep_extra.items())
    )
    default_runs = runs_for(point_ctx, out, "kk", "grpo_sg", point(ctx, {}), tag=default_tag)
    default_evs = evals_for(point_ctx, out, "kk", default_runs)
    avg_key = sample_metric(default_evs)
    rows, md_rows = [], []
    points: dict[str, list[tuple[float, list]]] = {}
    for param, values in ctx.grid.sweep.items():
        pts = [(float(base[param]), default_evs)]
        for v in values:
            tag = f"grpo_sg[{param}={v:g}]"
            evs = evals_for(
                point_ctx,
                out,
                "kk",
                runs_for(
                    point_ctx,
                    out,
                    "kk",
                    "grpo_sg",
                    point(ctx, {f"weights.{param}": float(v)}),
                    tag=tag,
                ),
            )
            pts.append((float(v), evs))
        pts.sort(key=lambda p: p[0])
        points[param] = pts
        for v, evs in pts:
            g, s = seed_ci(evs, "greedy"), seed_ci(evs, avg_key)
            is_default = v == float(base[param])
            diff = None if is_default else paired_items(evs, default_evs)
            rows.append(
                {
                    "parameter": param,
                    "value": v,
                    "default": is_default,
                    "greedy": g.mean,
                    "greedy_low": g.low,
                    "greedy_high": g.high,
                    avg_key: s.mean if s else np.nan,
                    "diff_vs_default": diff.mean if diff else 0.0,
                    "diff_low": diff.low if diff else 0.0,
                    "diff_high": diff.high if diff else 0.0,
                }
            )
            md_rows.append(
                [
                    param,
                    f"{v:g}" + (" (default)" if is_default else ""),
                    fmt_ci(g),
                    fmt_ci(s),
                    "—"
                    if diff is None
                    else f"{diff.mean:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]",
                ]
            )
    fig, axes = plt.subplots(
        1, len(points), figsize=(4.2 * len(points), 3.6), squeeze=False, sharey=True
    )
    for ax, (param, pts) in zip(axes[0], points.items()):
        xs = [v for v, _ in pts]
        for metric, color in (("greedy", "#d62728"), (avg_key, "#ff9896")):
            cis = [seed_ci(evs, metric) for _, evs in pts]
            ax.errorbar(
                xs,
                [c.mean for c in cis],
                yerr=[[c.mean - c.low for c in cis], [c.high - c.mean for c in cis]],
                marker="o",
                capsize=3,
                color=color,
                label=metric,
            )
        ax.axvline(float(base[param]), color="#999999", ls="--", lw=1)
        ax.set_xlabel(param)
        ax.set_title(f"GRPO-SG vs {param} (dashed: default)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("K&K accuracy, all sizes")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    out.save_fig(fig)
    out.write_csv(rows)
    out.write_md(
        "\n".join(
            [
                f"# GRPO-SG sensitivity on K&K ({ctx.grid.name} grid, {point_ctx.draws()})",
                "",
                f"Defaults: {', '.join(f'{k}={v}' for k, v in base.items())}. "
                "One parameter varies at a time.",
                "",
                markdown_table(
                    ["parameter", "value", "greedy", avg_key, "paired diff vs default (greedy)"],
                    md_rows,
                ),
            ]
        )
    )
    return out.finish({"defaults": base})
