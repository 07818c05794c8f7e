"""Figure 4: training-reward trajectories, GRPO vs GRPO-SG, in K&K, math and search QA.

Line: the mean training reward per step (trailing mean over ``window`` steps), averaged over
seeds; band: min-max over seeds. "GRPO-SG reaches a higher reward" is decided per setting from
the per-seed paired difference of the mean reward over the second half of training
(GRPO-SG - GRPO; the first half is dominated by where both start): held when its 95% interval
lies above 0.
"""

from __future__ import annotations

import numpy as np

from rlvr.reproduce.collect import paired_seed_claim
from rlvr.reproduce.common import Context, Output, plt
from rlvr.reproduce.trajectories import (  # noqa: F401  (needs: what fig4 reads)
    collect,
    long_rows,
    needs,
    plot_trajectories,
    title,
)

NAME = "fig4"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = "Figure 4 — training reward, GRPO vs GRPO-SG"
REPORT_ORDER = 40


def late_mean(r: np.ndarray) -> float:
    """Mean over the second half of the steps (all steps when there are fewer than 2)."""
    half = r[len(r) // 2 :] if len(r) >= 2 else r
    half = half[np.isfinite(half)]
    return float(half.mean()) if half.size else float("nan")


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    data = collect(ctx, out, "reward/mean")
    fig, axes = plt.subplots(1, len(data), figsize=(4.6 * len(data), 3.8), squeeze=False)
    plot_trajectories(axes[0], data, "training reward (mean)", 1 if ctx.smoke else 5)
    for setting, by_method in data.items():
        a = [late_mean(r) for r in by_method["grpo_sg"]]
        b = [late_mean(r) for r in by_method["grpo"]]
        n = min(len(a), len(b))
        paired_seed_claim(
            out,
            "GRPO-SG reaches a higher training reward",
            title(setting),
            a[:n],
            b[:n],
            "mean reward over the second half of training, GRPO-SG - GRPO",
            bases=[b for b, _ in ctx.units()][:n],
        )
    fig.suptitle(
        f"Training reward, GRPO vs GRPO-SG ({ctx.grid.name} grid, {len(ctx.units())} run(s) each)"
    )
    fig.tight_layout()
    out.save_fig(fig)
    out.write_csv(long_rows(data, "reward/mean"))
    return out.finish()
