"""Glue shared by the scripts: train/evaluate a method over seeds, and reduce to statistics."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlvr.eval.stats import Interval, bootstrap_ci, paired_by_key, verdict_close, verdict_greater
from rlvr.reproduce.common import Context, Output
from rlvr.reproduce.runs import (Evaluation, Run, ensure_eval, ensure_run, ensure_sft_reference,
                                 eval_config, train_config)


def runs_for(ctx: Context, out: Output, setting_key: str, algo: str,
             extra: dict[str, Any] | None = None, tag: str = "") -> list[Run]:
    """One finished run per seed of ``algo`` on the setting (trained or taken from the cache)."""
    setting = ctx.profile.settings[setting_key]
    runs = []
    for seed in ctx.seeds:
        cfg = train_config(setting, algo, seed, extra)
        run = ensure_run(cfg, ctx.cache, say=ctx.say, progress=ctx.progress)
        out.runs[f"{setting_key}/{tag or algo}/seed{seed}"] = run.key
        runs.append(run)
    return runs


def evals_for(ctx: Context, out: Output, setting_key: str, runs: Sequence[Run],
              eval_set: tuple[str, dict[str, Any]] | None = None) -> list[Evaluation]:
    """The cached evaluation of each run's final model (evaluation seed = training seed)."""
    setting = ctx.profile.settings[setting_key]
    evs = []
    for run in runs:
        ecfg = eval_config(setting, run.config, str(run.final), seed=run.config.seed,
                           eval_set=eval_set[1] if eval_set else None)
        ev = ensure_eval(ecfg, ctx.cache, say=ctx.say, progress=ctx.progress)
        out.evals[f"{run.key}{'/' + eval_set[0] if eval_set else ''}"] = ev.key
        evs.append(ev)
    return evs


def base_evals(ctx: Context, out: Output, setting_key: str,
               eval_set: tuple[str, dict[str, Any]] | None = None) -> list[Evaluation]:
    """The untrained base model, evaluated once per seed (greedy is identical, samples differ)."""
    setting = ctx.profile.settings[setting_key]
    evs = []
    for seed in ctx.seeds:
        cfg = train_config(setting, "grpo", seed)
        ecfg = eval_config(setting, cfg, setting.model, seed=seed,
                           eval_set=eval_set[1] if eval_set else None)
        ev = ensure_eval(ecfg, ctx.cache, say=ctx.say, progress=ctx.progress)
        out.evals[f"{setting_key}/base/seed{seed}{'/' + eval_set[0] if eval_set else ''}"] = ev.key
        evs.append(ev)
    return evs


def sft_evals(ctx: Context, out: Output, setting_key: str, reference_runs: Sequence[Run]
              ) -> list[Evaluation]:
    """Continued SFT of the base for the compute of the matching-seed RL run, evaluated."""
    setting = ctx.profile.settings[setting_key]
    evs = []
    for run in reference_runs:
        path = ensure_sft_reference(setting, run.config.seed, run.compute_seconds, ctx.cache,
                                    say=ctx.say, progress=ctx.progress, smoke=ctx.smoke)
        ecfg = eval_config(setting, run.config, str(path), seed=run.config.seed)
        ev = ensure_eval(ecfg, ctx.cache, say=ctx.say, progress=ctx.progress)
        out.evals[f"{setting_key}/sft/seed{run.config.seed}"] = ev.key
        evs.append(ev)
    return evs


def seed_values(evs: Sequence[Evaluation], metric: str, group: Any = "all") -> list[float]:
    """``metric`` of ``group`` from each seed's evaluation."""
    return [float(ev.summary[group][metric]) for ev in evs if group in ev.summary and metric in ev.summary[group]]


def seed_ci(evs: Sequence[Evaluation], metric: str, group: Any = "all") -> Interval | None:
    vals = seed_values(evs, metric, group)
    return bootstrap_ci(vals) if vals else None


def item_scores(evs: Sequence[Evaluation], mode: str = "greedy", key: str = "correct") -> dict[str, float]:
    """Per item: the mean of ``key`` over seeds (and over samples in ``sample`` mode)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for ev in evs:
        for r in ev.records:
            if r.get("mode") == mode:
                acc[r["item"]].append(float(r.get(key, 0.0) or 0.0))
    return {item: float(np.mean(v)) for item, v in acc.items()}


def sample_metric(evs: Sequence[Evaluation]) -> str:
    """The avg@k key of these evaluations (``avg@8``...)."""
    for ev in evs:
        ks = [m for m in ev.summary.get("all", {}) if m.startswith("avg@") and m != "avg@k"]
        if ks:
            return ks[0]
    return "avg@k"


def compare(out: Output, claim: str, setting: str, a: Sequence[Evaluation], b: Sequence[Evaluation],
            *, mode: str = "greedy", key: str = "correct", close_margin: float | None = None,
            label: str = "") -> Interval:
    """Decide ``claim`` from the paired per-item difference ``a - b`` and record it on ``out``."""
    sa, sb = item_scores(a, mode, key), item_scores(b, mode, key)
    diff = paired_by_key(sa, sb)
    verdict = verdict_close(diff, close_margin) if close_margin else verdict_greater(diff)
    what = "accuracy" if key == "correct" else key
    evidence = (f"paired per-item difference in {mode} {what} ({label or 'a - b'}): "
                f"{diff.mean:+.3f}, 95% CI [{diff.low:+.3f}, {diff.high:+.3f}] over {diff.n} items"
                + (f"; 'close' means the CI lies within ±{close_margin}" if close_margin else ""))
    shared = [k for k in sa if k in sb]
    values = {sa[k] for k in shared} | {sb[k] for k in shared}
    if diff.n < 2:
        verdict, evidence = "inconclusive", evidence + "; fewer than 2 items"
    elif len(values) == 1:
        # Both methods score every item identically at 0 (or 1): no evidence either way.
        verdict = "inconclusive"
        evidence += f"; both methods score {values.pop():g} on every item (floor/ceiling), so the comparison has no power"
    out.claim(claim, setting, verdict, evidence, diff_mean=diff.mean, diff_low=diff.low,
              diff_high=diff.high, n=diff.n)
    return diff


def paired_seed_claim(out: Output, claim: str, setting: str, a: Sequence[float], b: Sequence[float],
                      what: str) -> Interval:
    """Decide ``claim`` from the per-seed paired difference ``a - b`` (runs of the same seed)."""
    from rlvr.eval.stats import paired_difference

    pairs = [(x, y) for x, y in zip(a, b) if np.isfinite(x) and np.isfinite(y)]
    if not pairs:
        out.claim(claim, setting, "inconclusive", f"no finite per-seed values of {what}")
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    diff = paired_difference([x for x, _ in pairs], [y for _, y in pairs])
    verdict = verdict_greater(diff)
    note = "; one seed gives no interval, so the verdict cannot be 'held'" if diff.n < 2 else ""
    if diff.n < 2 and verdict != "inconclusive":
        verdict = "inconclusive"
    out.claim(claim, setting, verdict,
              f"per-seed paired difference in {what}: {diff.mean:+.4g}, 95% CI "
              f"[{diff.low:+.4g}, {diff.high:+.4g}] over {diff.n} seeds{note}",
              diff_mean=diff.mean, diff_low=diff.low, diff_high=diff.high, n=diff.n)
    return diff
