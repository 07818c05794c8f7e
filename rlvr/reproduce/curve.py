"""Held-out accuracy during training, per method and setting (beyond the paper).

A comparison of methods at the end of training reads best where GRPO's own held-out curve has
flattened: a method that is still climbing when training stops is compared at an arbitrary
point of its curve (issue 49). The curve is the trainer's periodic evaluation
(``eval.every`` steps: ``eval/greedy_accuracy`` and ``eval/sampled_accuracy`` over
``eval.n_prompts`` test prompts; ``rlvr.training.trainer``), mean over runs with the runs'
range shaded. The table gives GRPO's mean over the runs at its last evaluations and the change
between its last two: "flat" when that change is inside the spread of the runs at the last
point (half their range), "still rising" or "falling" otherwise. A grid whose profile
evaluates only at the end (the tiny grid: ``eval.every: 0``) has no curve, and says so.
"""

from __future__ import annotations

import numpy as np

from rlvr.reproduce.collect import runs_for
from rlvr.reproduce.common import METHOD_COLORS, METHOD_LABELS, Context, Output, markdown_table, plt
from rlvr.reproduce.plan import Need
from rlvr.reproduce.trajectories import series, settings, title

NAME = "curve"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = "Held-out accuracy during training, per method (beyond the paper)"
REPORT_ORDER = 25
#: The methods shown (those the grid trains).
METHODS = ("grpo", "grpo_sg", "tr_grpo", "reverse")
#: The trainer's periodic held-out metrics: (metric key, label).
METRICS = (("eval/greedy_accuracy", "greedy"), ("eval/sampled_accuracy", "sampled"))


def needs(ctx: Context) -> list[Need]:
    """The training metrics (no evaluation) of every method in each setting."""
    return [Need.of(s, m, evaluate=False) for s in settings(ctx) for m in ctx.grid.arms(METHODS)]


def points(run, key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of the steps where ``run`` logged ``key``."""
    values = series(run, key)
    steps = np.flatnonzero(np.isfinite(values)) + 1
    return steps, values[steps - 1]


def curve(runs, key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, [run x step] values)`` over the evaluation steps every run logged."""
    per_run = [dict(zip(*(a.tolist() for a in points(r, key)))) for r in runs]
    common = sorted(set.intersection(*map(set, per_run))) if per_run else []
    return np.array(common, dtype=int), np.array([[p[s] for s in common] for p in per_run])


def verdict(steps: np.ndarray, values: np.ndarray) -> tuple[str, float]:
    """GRPO's last-interval change of the mean curve and whether it is inside the runs' spread
    at the last point (see the module docstring)."""
    if steps.size < 2:
        return "one evaluation: no curve", float("nan")
    mean = values.mean(axis=0)
    change = float(mean[-1] - mean[-2])
    spread = float(values[:, -1].max() - values[:, -1].min()) / 2
    if abs(change) <= spread:
        return "flat", change
    return ("still rising" if change > 0 else "falling"), change


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    # setting -> method -> metric key -> (steps, [run x step] values), read once
    data = {
        s: {
            m: {key: curve(runs, key) for key, _ in METRICS}
            for m, runs in ((m, runs_for(ctx, out, s, m)) for m in ctx.grid.arms(METHODS))
        }
        for s in settings(ctx)
    }
    rows, table = [], []
    for s, by_method in data.items():
        for m, curves in by_method.items():
            for key, label in METRICS:
                steps, values = curves[key]
                for i, step in enumerate(steps.tolist()):
                    rows += [
                        {
                            "setting": s,
                            "method": m,
                            "metric": label,
                            "run": j,
                            "step": step,
                            "accuracy": float(v),
                        }
                        for j, v in enumerate(values[:, i])
                    ]
                if m == "grpo" and steps.size:
                    word, change = verdict(steps, values)
                    table.append(
                        [
                            title(s),
                            label,
                            f"{values.mean(0)[-1]:.3f}",
                            f"{int(steps[-1])}",
                            f"{change:+.3f}" if np.isfinite(change) else "n/a",
                            word,
                            values.shape[0],
                        ]
                    )
    if not rows:
        out.write_md(
            "No held-out curve: the grid's training profile evaluates only at the end "
            "(`eval.every: 0`)."
        )
        return out.finish()
    _plot(ctx, data, out)
    out.write_csv(rows)
    out.write_md(
        "\n".join(
            [
                f"# Held-out accuracy during training ({ctx.grid.name} grid, {ctx.draws()})",
                "",
                "GRPO's curve at its last evaluation, and its change over the last interval "
                "(flat: inside half the runs' range at the last point).",
                "",
                markdown_table(
                    [
                        "setting",
                        "metric",
                        "GRPO at the end",
                        "step",
                        "last change",
                        "curve",
                        "runs",
                    ],
                    table,
                ),
            ]
        )
    )
    return out.finish()


def _plot(ctx: Context, data, out: Output) -> None:
    fig, axes = plt.subplots(
        len(METRICS), len(data), figsize=(4.6 * len(data), 7.0), squeeze=False, sharex="col"
    )
    for j, (s, by_method) in enumerate(data.items()):
        for i, (key, label) in enumerate(METRICS):
            ax = axes[i][j]
            for m, curves in by_method.items():
                steps, values = curves[key]
                if not steps.size:
                    continue
                color = METHOD_COLORS[m]
                ax.plot(steps, values.mean(0), "-o", ms=3, color=color, label=METHOD_LABELS[m])
                if values.shape[0] > 1:
                    ax.fill_between(steps, values.min(0), values.max(0), color=color, alpha=0.15)
            ax.set_title(f"{title(s)}: held-out {label} accuracy", fontsize=9)
            ax.grid(alpha=0.3)
        axes[-1][j].set_xlabel("training step")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Held-out accuracy during training ({ctx.grid.name} grid, {ctx.draws()})")
    fig.tight_layout()
    out.save_fig(fig)
