"""Glue shared by the scripts: a method's runs over its draws from the plan, their evaluations, and
the reduction to statistics.

A method is trained once per draw ``(base seed, RL seed)`` (``Context.units``); the run of each
draw, its configuration and key come from the plan (``rlvr.reproduce.plan``), computed once.
Intervals over draws are hierarchical (``rlvr.eval.stats.hierarchical_bootstrap_ci``): bases,
runs on each base and items are resampled, so they cover the variance of building another base as
well as of training another seed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlvr.envs import env_spec
from rlvr.eval.power import estimate_components, mde
from rlvr.eval.stats import (
    NOT_TESTABLE,
    UNDERPOWERED,
    Interval,
    hierarchical_bootstrap_ci,
    verdict_close,
    verdict_greater,
)
from rlvr.files import read_json_object
from rlvr.models.build import models_dir
from rlvr.models.presets import parse_spec
from rlvr.reproduce.common import Context, Output
from rlvr.reproduce.keys import model_identity
from rlvr.reproduce.runs import (
    Evaluation,
    Run,
    base_weights,
    ensure_eval,
    ensure_run,
    eval_config,
    eval_path,
    is_done,
)
from rlvr.reproduce.sft_reference import evaluated_reference


def unit_label(setting_key: str, what: str, base_seed: int, seed: int) -> str:
    """``kk/grpo/seed0`` on base 0, ``kk/grpo/base1/seed0`` on base 1."""
    return f"{setting_key}/{what}/" + (f"base{base_seed}/" if base_seed else "") + f"seed{seed}"


def runs_for(
    ctx: Context,
    out: Output,
    setting_key: str,
    algo: str,
    extra: dict[str, Any] | None = None,
    tag: str = "",
) -> list[Run]:
    """One finished run per draw of ``algo`` on the setting (the plan's; trained or taken from
    the cache, or with ``ctx.run_source`` read from the runs another engine trained)."""
    runs = []
    for base_seed, seed in ctx.units():
        planned = ctx.plan.run(setting_key, algo, extra, base_seed, seed)
        cfg = planned.config
        if ctx.run_source is None:
            run = ensure_run(cfg, ctx.cache, say=ctx.say, progress=ctx.progress)
        else:
            run = ctx.run_source.run(planned)
        if ctx.run_source is None:
            ctx.keep(run.path)
        label = unit_label(setting_key, tag or algo, base_seed, seed)
        out.runs[label] = run.key
        out.run_records.setdefault(label, {})
        out.run_records[label].update(key=run.key, weights_sha256=run.weights_sha256)
        calibration = run.info.get("calibration")
        if calibration:  # what the method's first batch set (``--check`` compares it)
            out.run_records[label]["calibration"] = calibration["values"]
        if ctx.run_source is not None:
            ctx.run_source.record(out, label, run)
        record_base(ctx, out, cfg.model)
        runs.append(run)
    return runs


def record_base(ctx: Context, out: Output, model: str) -> None:
    """The base ``model``'s build and weights in ``out``, and its build record in the results
    folder's records (a run restored from them needs the record to size its continued SFT)."""
    if model not in out.bases:
        out.bases[model] = base_weights(model)
        if parse_spec(model) is not None:
            ctx.keep(models_dir() / model_identity(model))


def record_prompt(out: Output, setting_key: str, ecfg) -> None:
    """The prompt settings the setting's models were evaluated with, for REPORT.md."""
    out.prompts.setdefault(setting_key, env_spec(ecfg.env).prompt_settings(ecfg.env_kwargs))


def with_weights(ctx: Context, run: Run) -> Run:
    """``run`` with its final weights: trained again first when its records were restored
    without them (``rlvr.reproduce.archive``), for a figure that reads the model itself (runs
    read from a verl folder have theirs there)."""
    if ctx.run_source is not None:
        return run
    return ensure_run(run.config, ctx.cache, say=ctx.say, progress=ctx.progress, weights=True)


def evals_for(
    ctx: Context,
    out: Output,
    setting_key: str,
    runs: Sequence[Run],
    eval_set: tuple[str, dict[str, Any]] | None = None,
) -> list[Evaluation]:
    """The cached evaluation of each run's final model (evaluation seed = training seed)."""
    setting = ctx.grid.settings[setting_key]
    evs = []
    labels = {key: label for label, key in out.runs.items()}
    for run in runs:
        ecfg = eval_config(
            setting,
            run.config,
            str(run.final),
            seed=run.config.seed,
            eval_set=eval_set[1] if eval_set else None,
        )
        if ctx.run_source is None and not is_done(eval_path(ctx.cache, ecfg)):
            # a run restored from its records has no weights to evaluate: train it again
            ensure_run(run.config, ctx.cache, say=ctx.say, progress=ctx.progress, weights=True)
        ev = ensure_eval(ecfg, ctx.cache, say=ctx.say, progress=ctx.progress)
        ctx.keep(ev.path)
        ev.unit = (run.base_seed, run.config.seed)
        record_prompt(out, setting_key, ecfg)
        out.evals[f"{run.key}{'/' + eval_set[0] if eval_set else ''}"] = ev.key
        if run.key in labels and eval_set is None:
            out.run_records[labels[run.key]]["numbers"] = dict(ev.summary.get("all", {}))
        evs.append(ev)
    return evs


def base_evals(
    ctx: Context, out: Output, setting_key: str, eval_set: tuple[str, dict[str, Any]] | None = None
) -> list[Evaluation]:
    """Each untrained base, evaluated once per draw (greedy is identical per base, samples
    differ with the seed)."""
    setting = ctx.grid.settings[setting_key]
    evs = []
    for base_seed, seed in ctx.units():
        cfg = ctx.plan.references["base"][(setting_key, (base_seed, seed))]
        ecfg = eval_config(
            setting, cfg, cfg.model, seed=seed, eval_set=eval_set[1] if eval_set else None
        )
        ev = ensure_eval(ecfg, ctx.cache, say=ctx.say, progress=ctx.progress)
        ctx.keep(ev.path)
        ev.unit = (base_seed, seed)
        record_prompt(out, setting_key, ecfg)
        label = unit_label(setting_key, "base", base_seed, seed)
        out.evals[f"{label}{'/' + eval_set[0] if eval_set else ''}"] = ev.key
        record_base(ctx, out, cfg.model)
        evs.append(ev)
    return evs


def sft_evals(
    ctx: Context, out: Output, setting_key: str, reference_runs: Sequence[Run]
) -> list[Evaluation]:
    """Continued SFT of each draw's base on the update tokens of the matching RL run (equal
    compute, ``rlvr.reproduce.sft_reference.ensure_sft_reference``), evaluated."""
    setting = ctx.grid.settings[setting_key]
    evs = []
    for run in reference_runs:
        path, ecfg = evaluated_reference(
            setting,
            run.config,
            run.config.seed,
            run.update_tokens,
            ctx.cache,
            say=ctx.say,
            progress=ctx.progress,
            smoke=ctx.smoke,
            model=run.config.model,
        )
        ctx.keep(path)
        ev = ensure_eval(ecfg, ctx.cache, say=ctx.say, progress=ctx.progress)
        ctx.keep(ev.path)
        ev.unit = (run.base_seed, run.config.seed)
        record_prompt(out, setting_key, ecfg)
        label = unit_label(setting_key, "sft", run.base_seed, run.config.seed)
        out.evals[label] = ev.key
        out.run_records[label] = {
            "key": path.name,
            "weights_sha256": read_json_object(path / "sft.json")["weights_sha256"],
            "numbers": dict(ev.summary.get("all", {})),
        }
        evs.append(ev)
    return evs


def seed_values(evs: Sequence[Evaluation], metric: str, group: Any = "all") -> list[float]:
    """``metric`` of ``group`` from each draw's evaluation."""
    return [
        float(ev.summary[group][metric])
        for ev in evs
        if group in ev.summary and metric in ev.summary[group]
    ]


def seed_ci(evs: Sequence[Evaluation], metric: str, group: Any = "all") -> Interval | None:
    """Mean over draws with a hierarchical interval (bases, then runs on each base)."""
    kept = [ev for ev in evs if group in ev.summary and metric in ev.summary[group]]
    if not kept:
        return None
    return hierarchical_bootstrap_ci(seed_values(kept, metric, group), [ev.unit[0] for ev in kept])


def per_item(ev: Evaluation, mode: str = "greedy", key: str = "correct") -> dict[str, float]:
    """Per item of one evaluation: the mean of ``key`` (over samples in ``sample`` mode)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in ev.records:
        if r.get("mode") == mode:
            acc[r["item"]].append(float(r.get(key, 0.0) or 0.0))
    return {item: float(np.mean(v)) for item, v in acc.items()}


def paired_matrix(
    a: Sequence[Evaluation], b: Sequence[Evaluation], mode: str = "greedy", key: str = "correct"
) -> tuple[np.ndarray, list[int]]:
    """The per-item difference ``a - b`` as a (paired draws x shared items) matrix, with the base
    seed of each row.

    Draws are paired by ``(base seed, RL seed)`` (the same base, the same prompt order); draws
    present in only one of ``a``, ``b`` are dropped; several evaluations of one draw (one per
    evaluation set, their items named apart) are merged.
    """

    def by_unit(evs):
        merged: dict[tuple[int, int], dict[str, float]] = {}
        for ev in evs:
            merged.setdefault(ev.unit, {}).update(per_item(ev, mode, key))
        return merged

    sa_all, sb_all = by_unit(a), by_unit(b)
    units = [u for u in sa_all if u in sb_all]
    if not units:
        raise ValueError("paired_items: the two methods share no draw (base seed, seed)")
    items = [k for k in sa_all[units[0]] if all(k in sa_all[u] and k in sb_all[u] for u in units)]
    if not items:
        raise ValueError("paired_items: the two methods share no items")
    diff = np.array([[sa_all[u][k] - sb_all[u][k] for k in items] for u in units])
    return diff, [u[0] for u in units]


def paired_items(
    a: Sequence[Evaluation], b: Sequence[Evaluation], mode: str = "greedy", key: str = "correct"
) -> Interval:
    """Mean per-item difference ``a - b`` with a hierarchical interval: the matrix of
    ``paired_matrix`` resampled over bases, draws and items."""
    diff, bases = paired_matrix(a, b, mode, key)
    return hierarchical_bootstrap_ci(diff, bases)


def precision(
    diff: Interval, values: np.ndarray, bases: Sequence[int], confidence: float = 0.95
) -> dict[str, Any]:
    """What a claim records about its precision: the interval's half-width, the variance
    components of ``values`` (draws x items, or one value per draw), the design, the standard
    error of the mean under that design and the MDE at 80% power (``rlvr.eval.power``)."""
    arr = np.asarray(values, dtype=float)
    comp = estimate_components(arr, bases)
    n_bases = len(set(bases))
    design = {
        "bases": n_bases,
        "seeds": arr.shape[0] / n_bases,
        "items": arr.shape[1] if arr.ndim == 2 else 1,
    }
    se = comp.se(design["bases"], design["seeds"], design["items"])
    return {
        "half_width": (diff.high - diff.low) / 2,
        "se": se,
        "mde": mde(se, confidence),
        "components": comp.as_dict(),
        "design": design,
    }


def item_scores(
    evs: Sequence[Evaluation], mode: str = "greedy", key: str = "correct"
) -> dict[str, float]:
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


def endpoint_moved(
    grpo: Sequence[Evaluation],
    base: Sequence[Evaluation],
    min_gain: float,
    *,
    mode: str = "greedy",
    key: str = "correct",
) -> tuple[bool, str]:
    """Whether GRPO moved this endpoint (``mode``, ``key``) over the base: the paired per-item
    difference GRPO - base has a mean of at least ``min_gain`` and an interval above 0 (issue
    48: a comparison of methods on an endpoint that RL itself leaves flat decides nothing).
    Returns the answer and its evidence, GRPO's gain with its interval."""
    gain = paired_items(grpo, base, mode, key)
    moved = gain.mean >= min_gain and gain.low > 0
    what = "accuracy" if key == "correct" else key
    return moved, (
        f"GRPO - base in {mode} {what}: {gain.mean:+.3f}, 95% CI [{gain.low:+.3f}, "
        f"{gain.high:+.3f}] ({'at least' if moved else 'not'} +{min_gain:g} with its interval "
        "above 0)"
    )


def compare(
    out: Output,
    claim: str,
    setting: str,
    a: Sequence[Evaluation],
    b: Sequence[Evaluation],
    *,
    mode: str = "greedy",
    key: str = "correct",
    close_margin: float | None = None,
    margin: float | None = None,
    label: str = "",
    endpoint: tuple[Sequence[Evaluation], Sequence[Evaluation]] | None = None,
) -> Interval:
    """Decide ``claim`` from the paired per-item difference ``a - b`` and record it on ``out``
    with its precision (``precision``).

    ``close_margin``: the claim is that ``a`` is close to ``b`` (``verdict_close``). Otherwise the
    claim is that ``a`` beats ``b`` and ``margin`` (default: the grid's ``no_effect_margin``)
    is the band inside which an interval around zero says "no effect beyond ±margin".
    ``endpoint``: ``(GRPO's, the base's)`` evaluations; when GRPO did not move the endpoint by
    the grid's ``min_grpo_gain`` (``endpoint_moved``) the verdict is ``NOT_TESTABLE``, the
    difference still recorded."""
    sa, sb = item_scores(a, mode, key), item_scores(b, mode, key)
    matrix, bases = paired_matrix(a, b, mode, key)
    diff = hierarchical_bootstrap_ci(matrix, bases)
    if margin is None:
        margin = out.ctx.grid.no_effect_margin
    verdict = verdict_close(diff, close_margin) if close_margin else verdict_greater(diff, margin)
    what = "accuracy" if key == "correct" else key
    n_bases = len(set(bases))
    evidence = (
        f"paired per-item difference in {mode} {what} ({label or 'a - b'}): "
        f"{diff.mean:+.3f}, 95% CI [{diff.low:+.3f}, {diff.high:+.3f}] over {diff.n} items"
        f" x {len(bases)} run(s) on {n_bases} base(s)"
        + (f"; 'close' means the CI lies within ±{close_margin}" if close_margin else "")
    )
    shared = [k for k in sa if k in sb]
    values = {sa[k] for k in shared} | {sb[k] for k in shared}
    if diff.n < 2:
        verdict, evidence = UNDERPOWERED, evidence + "; fewer than 2 items"
    elif len(values) == 1:
        # Both methods score every item identically at 0 (or 1): no evidence either way.
        verdict = UNDERPOWERED
        evidence += (
            f"; both methods score {values.pop():g} on every item (floor/ceiling), "
            "so the comparison has no power"
        )
    if endpoint is not None:
        moved, why = endpoint_moved(*endpoint, out.ctx.grid.min_grpo_gain, mode=mode, key=key)
        evidence += f"; {why}"
        if not moved:
            verdict = NOT_TESTABLE
    out.claim(
        claim,
        setting,
        verdict,
        evidence,
        diff_mean=diff.mean,
        diff_low=diff.low,
        diff_high=diff.high,
        n=diff.n,
        margin=close_margin or margin,
        close=bool(close_margin),
        draws=[[b, float(v)] for b, v in zip(bases, matrix.mean(axis=1))],
        **precision(diff, matrix, bases),
    )
    return diff


def paired_seed_claim(
    out: Output,
    claim: str,
    setting: str,
    a: Sequence[float],
    b: Sequence[float],
    what: str,
    bases: Sequence[int] | None = None,
) -> Interval:
    """Decide ``claim`` from the per-draw paired difference ``a - b`` (runs of the same base
    and seed); ``bases[i]`` is the base seed of draw ``i`` (default: one base). These claims
    state no margin (their units are the measure's own): held, reversed or underpowered."""
    bases = list(bases) if bases is not None else [0] * len(a)
    pairs = [(x, y, g) for x, y, g in zip(a, b, bases) if np.isfinite(x) and np.isfinite(y)]
    if not pairs:
        out.claim(claim, setting, UNDERPOWERED, f"no finite per-seed values of {what}")
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    d = np.array([x - y for x, y, _ in pairs])
    groups = [g for _, _, g in pairs]
    diff = hierarchical_bootstrap_ci(d, groups)
    verdict = verdict_greater(diff)
    note = "; one seed gives no interval, so the verdict cannot be 'held'" if diff.n < 2 else ""
    if diff.n < 2:
        verdict = UNDERPOWERED
    out.claim(
        claim,
        setting,
        verdict,
        f"per-seed paired difference in {what}: {diff.mean:+.4g}, 95% CI "
        f"[{diff.low:+.4g}, {diff.high:+.4g}] over {diff.n} seeds{note}",
        diff_mean=diff.mean,
        diff_low=diff.low,
        diff_high=diff.high,
        n=diff.n,
        draws=[[g, float(v)] for g, v in zip(groups, d)],
        **precision(diff, d, groups),
    )
    return diff
