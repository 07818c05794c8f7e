"""Training-metric trajectories of GRPO vs GRPO-SG in every setting named as its environment
(K&K, math and search QA; shared by fig3/fig4)."""

from __future__ import annotations

import numpy as np

from rlvr.envs import env_names, env_spec
from rlvr.reproduce.collect import runs_for
from rlvr.reproduce.common import METHOD_COLORS, METHOD_LABELS, Context, Output
from rlvr.reproduce.plan import Need

METHODS = ("grpo", "grpo_sg")


def settings(ctx: Context) -> list[str]:
    """The grid's settings named as a registered environment, in registration order."""
    return [name for name in env_names() if name in ctx.grid.settings]


def title(setting: str) -> str:
    return env_spec(setting).title or setting


def needs(ctx: Context) -> list[Need]:
    """The training metrics (no evaluation) of GRPO and GRPO-SG in each setting."""
    return [Need.of(s, m, evaluate=False) for s in settings(ctx) for m in METHODS]


def series(run, key: str) -> np.ndarray:
    """``key`` per step of one run (NaN where a step did not log it)."""
    return np.array([float(m.get(key, np.nan)) for m in run.metrics], dtype=float)


def collect(ctx: Context, out: Output, key: str) -> dict[str, dict[str, list[np.ndarray]]]:
    """``setting -> method -> [series per seed]``."""
    return {
        s: {m: [series(r, key) for r in runs_for(ctx, out, s, m)] for m in METHODS}
        for s in settings(ctx)
    }


def smooth(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` steps (NaN-aware)."""
    if window <= 1 or x.size == 0:
        return x
    out = np.empty_like(x)
    for t in range(x.size):
        seg = x[max(0, t - window + 1) : t + 1]
        out[t] = np.nanmean(seg) if np.isfinite(seg).any() else np.nan
    return out


def plot_trajectories(axes, data, ylabel: str, window: int) -> None:
    for ax, (setting, by_method) in zip(axes, data.items()):
        for m, runs in by_method.items():
            n = min((len(r) for r in runs), default=0)
            if n == 0:
                continue
            mat = np.vstack([smooth(r[:n], window) for r in runs])
            steps = np.arange(1, n + 1)
            mean = np.nanmean(mat, axis=0)
            ax.plot(steps, mean, color=METHOD_COLORS[m], label=METHOD_LABELS[m], lw=1.4)
            if mat.shape[0] > 1:
                ax.fill_between(
                    steps,
                    np.nanmin(mat, 0),
                    np.nanmax(mat, 0),
                    color=METHOD_COLORS[m],
                    alpha=0.18,
                    lw=0,
                )
        ax.set_title(title(setting))
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    axes[0].legend(fontsize=8)


def long_rows(data, key: str) -> list[dict]:
    rows = []
    for setting, by_method in data.items():
        for m, runs in by_method.items():
            for seed_i, r in enumerate(runs):
                rows += [
                    {"setting": setting, "method": m, "seed_index": seed_i, "step": t + 1, key: v}
                    for t, v in enumerate(r.tolist())
                ]
    return rows
