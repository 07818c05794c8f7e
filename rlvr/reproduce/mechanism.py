"""Mechanism (beyond the paper, issue 48): what the token weights do to each task's updates.

For GRPO-SG, TR-GRPO and Reverse in every setting named as an environment, from the metrics each
run logged (``rlvr.agents.metrics.weight_diagnostics`` every step, ``rlvr.training.diagnostics``
every ``grad_cosine_every`` steps; nothing is retrained):

- the weight's quantiles per step: median (line), 25-75 % and 5-95 % (bands), mean over runs;
- the shares of tokens at the floor L and at the cap U;
- the kept gradient mass ``sum w (1 - p) / sum (1 - p)``: the gradient of ``-log p`` with respect
  to the logits has a norm proportional to ``1 - p`` (``docs/design.md`` §5), so this is the share
  of the per-token gradient the weights keep (1 for GRPO);
- at the probed steps, the cosine between the method's gradient and GRPO's on the same batch
  (line) and the ratio of their norms (dashed): 1 and 1 for GRPO itself; a cosine near 1 with a
  ratio far from 1 is a change of scale, not of direction.

The table gives the values each run's first batch calibrated (``calibration.json``), mean over
runs, and the diagnostics at the first and the last step. Runs trained before these metrics
existed show "n/a".
"""

from __future__ import annotations

import numpy as np

from rlvr.reproduce.collect import runs_for
from rlvr.reproduce.common import METHOD_COLORS, METHOD_LABELS, Context, Output, markdown_table, plt
from rlvr.reproduce.plan import Need
from rlvr.reproduce.trajectories import series, settings, title
from rlvr.training.run_state import read_calibration

NAME = "mechanism"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = (
    "Mechanism — what the token weights do: quantiles, shares at L and U, kept gradient mass, "
    "same-batch cosine with GRPO (beyond the paper)"
)
REPORT_ORDER = 35
#: The weighted methods shown.
METHODS = ("grpo_sg", "tr_grpo", "reverse")
QUANTILES = ("weight/q05", "weight/q25", "weight/q50", "weight/q75", "weight/q95")
SHARES = ("weight/at_lower", "weight/at_upper")
KEPT = "weight/kept_grad_mass"
PROBE = ("grad/cos_grpo", "grad/norm_ratio_grpo")
KEYS = (*QUANTILES, *SHARES, KEPT, *PROBE)


def needs(ctx: Context) -> list[Need]:
    """The training metrics (no evaluation) of the weighted methods in each setting."""
    return [Need.of(s, m, evaluate=False) for s in settings(ctx) for m in ctx.grid.arms(METHODS)]


def _mean_curve(runs: list[dict[str, np.ndarray]], key: str) -> np.ndarray:
    n = min((len(r[key]) for r in runs), default=0)
    if n == 0:
        return np.array([])
    mat = np.vstack([r[key][:n] for r in runs])
    # np.nanmean would warn on every step no run logged (the probe keys log a few steps only)
    logged = ~np.isnan(mat)
    count = logged.sum(axis=0)
    total = np.where(logged, mat, 0.0).sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _at(curve: np.ndarray, where: int) -> float:
    finite = np.flatnonzero(np.isfinite(curve))
    return float(curve[finite[where]]) if finite.size else float("nan")


def _fmt(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.3f}"


def collect(ctx: Context, out: Output):
    """``setting -> method -> ([per run: key -> series], [per run: calibration record])``."""
    data = {}
    for s in settings(ctx):
        data[s] = {}
        for m in ctx.grid.arms(METHODS):
            runs = runs_for(ctx, out, s, m)
            curves = [{k: series(r, k) for k in KEYS} for r in runs]
            data[s][m] = (curves, [read_calibration(r.path) or {} for r in runs])
    return data


def plot(ctx: Context, data, out: Output) -> None:
    rows = 4
    fig, axes = plt.subplots(
        rows, len(data), figsize=(4.6 * len(data), 12.5), squeeze=False, sharex="col"
    )
    for j, (setting, by_method) in enumerate(data.items()):
        for m, (runs, _) in by_method.items():
            if not runs:
                continue
            color, label = METHOD_COLORS[m], METHOD_LABELS[m]
            q = {k: _mean_curve(runs, k) for k in KEYS}
            steps = np.arange(1, len(q["weight/q50"]) + 1)
            ax = axes[0][j]
            ax.plot(steps, q["weight/q50"], color=color, label=label, lw=1.4)
            ax.fill_between(steps, q["weight/q25"], q["weight/q75"], color=color, alpha=0.25, lw=0)
            ax.fill_between(steps, q["weight/q05"], q["weight/q95"], color=color, alpha=0.1, lw=0)
            axes[1][j].plot(steps, q["weight/at_lower"], color=color, label=f"{label}: at L")
            axes[1][j].plot(steps, q["weight/at_upper"], color=color, ls="--", label="at U")
            axes[2][j].plot(steps, q[KEPT], color=color, label=label)
            for key, style in zip(PROBE, ("-o", "--s")):
                probed = np.isfinite(q[key])
                axes[3][j].plot(steps[probed], q[key][probed], style, color=color, ms=3)
        axes[0][j].set_title(f"{title(setting)}: token weight (median, 25-75%, 5-95%)", fontsize=9)
        axes[1][j].set_title("share of tokens at L (solid) and at U (dashed)", fontsize=9)
        axes[2][j].set_title("kept gradient mass sum w(1-p) / sum(1-p)", fontsize=9)
        axes[3][j].set_title("same batch vs GRPO: cosine (o), norm ratio (s, dashed)", fontsize=9)
        axes[2][j].axhline(1.0, color="#999999", lw=0.8, ls=":")
        axes[3][j].axhline(1.0, color="#999999", lw=0.8, ls=":")
        axes[-1][j].set_xlabel("training step")
        for ax in axes[:, j]:
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        f"What the token weights do ({ctx.grid.name} grid, {len(ctx.units())} run(s) each)"
    )
    fig.tight_layout()
    out.save_fig(fig)


def table(data) -> tuple[list[dict], str]:
    """Long CSV rows and the markdown summary (module docstring)."""
    csv_rows, md = [], []
    for setting, by_method in data.items():
        body = []
        for m, (runs, calibrations) in by_method.items():
            for i, run in enumerate(runs):
                for key in KEYS:
                    csv_rows += [
                        {"setting": setting, "method": m, "run_index": i, "step": t + 1, key: v}
                        for t, v in enumerate(run[key].tolist())
                        if np.isfinite(v)
                    ]
            values = [c.get("values", {}) for c in calibrations]
            cal = ", ".join(
                f"{k} {np.mean([v[k] for v in values if k in v]):.4g}"
                for k in ("alpha", "tau", "mu")
                if any(k in v for v in values)
            )
            q = {k: _mean_curve(runs, k) for k in KEYS} if runs else {}
            first = [_at(q[k], 0) if q else float("nan") for k in (*QUANTILES[::2], *SHARES, KEPT)]
            probe = [
                float(np.nanmean(q[k])) if q and np.isfinite(q[k]).any() else float("nan")
                for k in PROBE
            ]
            body.append(
                [METHOD_LABELS[m], cal or "—"]
                + [_fmt(x) for x in first]
                + [_fmt(_at(q[KEPT], -1)) if q else "n/a"]
                + [_fmt(x) for x in probe]
            )
        md += [
            f"## {title(setting)}",
            "",
            markdown_table(
                [
                    "method",
                    "calibrated (mean over runs)",
                    "w q05",
                    "w q50",
                    "w q95",
                    "at L",
                    "at U",
                    "kept mass, step 1",
                    "kept mass, last step",
                    "cos with GRPO",
                    "norm ratio to GRPO",
                ],
                body,
            ),
            "",
        ]
    return csv_rows, "\n".join(md)


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    data = collect(ctx, out)
    plot(ctx, data, out)
    rows, md = table(data)
    out.write_csv(rows)
    out.write_md(
        f"# What the token weights do ({ctx.grid.name} grid, {ctx.draws()})\n\n"
        "Weights at step 1 (mean over runs); cosine and norm ratio: mean over the probed steps; "
        "the kept gradient mass is sum w(1-p) / sum(1-p), 1 for GRPO.\n\n" + md
    )
    return out.finish()
