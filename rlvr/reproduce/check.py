"""``rlvr reproduce --check DIR``: rerun a sample of the runs a reproduction recorded, and compare.

Every ``<name>.meta.json`` of a reproduction lists its runs (``run_records``: label -> config
hash, SHA-256 of the final weights, the values a calibrated method's first batch set, the
evaluation's numbers over all items) and its bases
(``bases``: model -> build, weights SHA-256). The check rebuilds the configuration of each
sampled run from this checkout's grid, verifies that its config hash is the recorded one,
trains it (or takes it from the run cache, which the check shares with ``rlvr reproduce``),
evaluates it, and says per number:

- ``bit-identical``: the same value (for weights: the same SHA-256);
- ``inside the prediction interval``: inside the 95% prediction interval of one new draw (a new
  base build, one RL seed on it) computed from the reproduction's runs of that method
  (``rlvr.eval.power.prediction_interval``: mean +- t_{0.975, bases-1} x sqrt(s2_new draw +
  s2_of the mean)). A rerun that is not bit-identical is such a draw, and the interval of the
  three-base *mean* is the wrong yardstick for it: one draw varies as much as a base does. For
  an accuracy, the new draw's variance is at least its evaluation's binomial variance over the
  recorded ``n_items`` (equal recorded draws would give a zero-width interval), and the interval
  is cut to [0, 1];
- ``outside the prediction interval``: neither; 1 run in 20 by chance, more when the base or the
  code differs (a different base hash explains most differences).

After the table, one line per rerun run says where its headline number (greedy accuracy or EM)
lies against that prediction interval.

Runs are sampled in a fixed order: base seed, RL seed, then the baseline GRPO (the default
``algo``) before the other registered methods, and the grid's settings in its order, K&K before
math and search QA (the first is the README's main job's run).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.agents.algorithms import algorithm_names
from rlvr.config import KEY_SCHEMA
from rlvr.data_paths import rlvr_home
from rlvr.eval.power import prediction_interval
from rlvr.eval.stats import Interval
from rlvr.repro import machine_info, machine_line
from rlvr.reproduce.common import markdown_table
from rlvr.reproduce.grid import get_grid
from rlvr.reproduce.keys import run_key
from rlvr.reproduce.records import load_records, parse_label
from rlvr.reproduce.runs import (
    base_weights,
    ensure_eval,
    ensure_run,
    eval_config,
    eval_path,
    read_run_record,
    run_path,
    train_config,
)
from rlvr.training.train_config import TrainConfig


def sample_labels(records: dict[str, dict], n: int, settings: Sequence[str] = ()) -> list[str]:
    """The first ``n`` rerunnable runs (a registered method's, at its default point) in the
    order of the module docstring: the baseline (the default ``algo``) before the other methods
    in registration order, and ``settings`` (the grid's, in its order) before any other."""
    methods = [TrainConfig.algo, *(a for a in algorithm_names() if a != TrainConfig.algo)]

    def order(label: str):
        p = parse_label(label)
        where = settings.index(p["setting"]) if p["setting"] in settings else len(settings)
        return (p["base"], p["seed"], methods.index(p["what"]), where, p["setting"])

    ok = [lab for lab in records if (p := parse_label(lab)) and p["what"] in methods]
    return sorted(ok, key=order)[: max(0, n)]


#: Numbers an evaluation records about its own design, not its outcome: a rerun matches them
#: exactly or evaluated something else, so they get no prediction interval.
DESIGN = ("n_items", "n_samples")


def stated_interval(records: dict[str, dict], label: str, metric: str) -> Interval | None:
    """The 95% prediction interval of one new draw of ``label``'s setting and method, from every
    recorded run of it (None with fewer than two, and for the evaluation's ``DESIGN`` counts)."""
    if metric in DESIGN:
        return None
    p = parse_label(label)
    values, bases, items = [], [], []
    for other, rec in records.items():
        q = parse_label(other)
        if (
            q
            and (q["setting"], q["what"]) == (p["setting"], p["what"])
            and metric in rec.get("numbers", {})
        ):
            values.append(float(rec["numbers"][metric]))
            bases.append(q["base"])
            items.append(int(rec["numbers"].get("n_items", 0)))
    # Accuracies are proportions over the evaluation's items; rewards (K&K's go below 0) are not.
    proportion = "reward" not in metric
    return prediction_interval(
        values,
        bases,
        n_items=min(items) if proportion and items and min(items) > 0 else None,
        bounds=(0.0, 1.0) if proportion else None,
    )


INSIDE, OUTSIDE = "inside the prediction interval", "outside the prediction interval"
#: The number a run's one-line summary reports, the first its evaluation has.
HEADLINE = ("greedy_em", "greedy")


def verdict(committed: float, rerun: float, interval: Interval | None) -> str:
    if rerun == committed:
        return "bit-identical"
    if interval is not None and interval.low <= rerun <= interval.high:
        return INSIDE
    return OUTSIDE


def summary_line(label: str, metric: str, committed: float, rerun: float, pi) -> str:
    """One line for a rerun run: bit-identical, or where it lies against the prediction
    interval."""
    v = verdict(committed, rerun, pi)
    if v == "bit-identical":
        return f"[check] {label}: {metric} {rerun:.4f}, bit-identical to the recorded run"
    where = (
        "no prediction interval (fewer than two recorded runs)"
        if pi is None
        else f"{v} [{pi.low:.3f}, {pi.high:.3f}] of one new draw "
        f"(from {pi.n} recorded runs, mean {pi.mean:.3f})"
    )
    return f"[check] {label}: {metric} {rerun:.4f} (recorded {committed:.4f}): {where}"


def run_check(
    folder: Path,
    *,
    sample: int = 1,
    cache: Path | None = None,
    progress: bool = True,
    loaded: tuple[dict[str, Any], dict[str, dict], dict[str, dict]] | None = None,
) -> int:
    """Rerun ``sample`` runs recorded in ``folder`` and print the comparison. Returns 1 when a
    number lies outside its interval or a run's config no longer matches, else 0 (differing
    weight hashes alone are reported, not failed: other machines may differ in threads).
    ``loaded``: the folder's ``rlvr.reproduce.records.load_records``, when the caller read it."""
    meta, records, bases = loaded or load_records(folder)
    # "profile": what reproductions written before the grid had its name recorded
    grid = get_grid(meta.get("grid", meta.get("profile")), smoke=bool(meta.get("smoke")))
    cache = cache or rlvr_home()
    rows: list[list[str]] = []
    summaries: list[str] = []
    outside = 0
    recorded_on = machine_line(meta["machine"]) if "machine" in meta else "an unrecorded machine"
    print(f"[check] {folder}: recorded on {recorded_on}")
    print(f"[check] here: {machine_line(machine_info())}", flush=True)
    # "key_schema": absent from folders written under schema 1 (whole configurations hashed)
    same_keys = meta.get("key_schema", 1) == KEY_SCHEMA
    if not same_keys:
        print(
            f"[check] its run keys are of schema {meta.get('key_schema', 1)}, this checkout's of "
            f"{KEY_SCHEMA}: configurations are not compared by key",
            flush=True,
        )
    for label in sample_labels(records, sample, list(grid.settings)):
        p = parse_label(label)
        rec = records[label]
        if p["setting"] not in grid.settings:
            why = f"not comparable: grid {grid.name} has no setting {p['setting']!r}"
            rows.append([label, "setting", p["setting"], "-", why])
            summaries.append(f"[check] {label}: {why}")
            outside += 1
            continue
        setting = grid.settings[p["setting"]]
        cfg = train_config(setting, p["what"], p["seed"], base_seed=p["base"])
        if same_keys and run_key(cfg) != rec.get("key"):
            why = "this checkout's config differs" if "key" in rec else "no config hash recorded"
            rows.append(
                [label, "config hash", rec.get("key", "-"), run_key(cfg), f"not comparable: {why}"]
            )
            summaries.append(f"[check] {label}: not comparable: {why}")
            outside += 1
            continue
        path = run_path(cache, run_key(cfg))
        # a run restored from a results folder's records (no weights) is trained again: the check
        recorded = read_run_record(path) is not None
        cached = recorded and (path / "final").is_dir()
        restored = recorded and not cached
        run = ensure_run(cfg, cache, progress=progress, weights=True)
        base = base_weights(cfg.model)
        committed_base = bases.get(cfg.model, {}).get("weights_sha256", "")
        if committed_base:
            same = base.get("weights_sha256") == committed_base
            rows.append(
                [
                    label,
                    f"base {cfg.model} weights",
                    committed_base[:16],
                    base.get("weights_sha256", "")[:16],
                    _same(same),
                ]
            )
        where = "from the run cache" if cached else "trained now"
        ran_on = run.info.get("machine", {})
        rows.append(
            [
                label,
                f"weights ({where}; {ran_on.get('kernel_mode', '?')} kernels)",
                rec.get("weights_sha256", "")[:16],
                run.weights_sha256[:16],
                _same(run.weights_sha256 == rec.get("weights_sha256")),
            ]
        )
        rerun = run.info.get("calibration", {}).get("values", {})
        for name, value in sorted(rec.get("calibration", {}).items()):  # the first batch's values
            again = rerun.get(name)
            same = again == value
            shown = "n/a" if again is None else f"{again:.6g}"
            rows.append([label, f"calibrated {name}", f"{value:.6g}", shown, _same(same)])
        ecfg = eval_config(setting, cfg, str(run.final), seed=cfg.seed)
        if restored:  # its evaluation came with its records: made again from these weights
            shutil.rmtree(eval_path(cache, ecfg), ignore_errors=True)
        ev = ensure_eval(ecfg, cache, progress=progress)
        headline = None
        for metric, value in sorted(rec.get("numbers", {}).items()):
            new = ev.summary.get("all", {}).get(metric)
            if new is None:
                continue
            pi = stated_interval(records, label, metric)
            v = verdict(float(value), float(new), pi)
            outside += v == OUTSIDE
            stated = "" if pi is None else f" (predicted {pi.low:.3f}-{pi.high:.3f})"
            rows.append([label, metric, f"{float(value):.4f}{stated}", f"{float(new):.4f}", v])
            if metric in HEADLINE and (headline is None or metric == HEADLINE[0]):
                headline = summary_line(label, metric, float(value), float(new), pi)
        summaries.append(headline or f"[check] {label}: no greedy number recorded")
    print(markdown_table(["run", "number", "recorded", "rerun", "verdict"], rows))
    print("\n".join(summaries))
    return 1 if outside else 0


def _same(same: bool) -> str:
    return "bit-identical" if same else "differs"


__all__ = [
    "DESIGN",
    "INSIDE",
    "OUTSIDE",
    "run_check",
    "sample_labels",
    "stated_interval",
    "summary_line",
    "verdict",
]
