"""``rlvr reproduce --check DIR``: rerun a sample of the runs a reproduction recorded, and compare.

Every ``<name>.meta.json`` of a reproduction lists its runs (``run_records``: label -> config
hash, SHA-256 of the final weights, the evaluation's numbers over all items) and its bases
(``bases``: model -> build, weights SHA-256). The check rebuilds the configuration of each
sampled run from this checkout's grid, verifies that its config hash is the recorded one,
trains it (or takes it from the run cache, which the check shares with ``rlvr reproduce``),
evaluates it, and says per number:

- ``bit-identical``: the same value (for weights: the same SHA-256);
- ``within the stated interval``: inside the 95% interval the reproduction states for that
  method (the hierarchical interval over its runs, ``rlvr.reproduce.collect.seed_ci``);
- ``outside``: neither. One run may fall outside the interval of a mean by chance, more often the
  fewer runs the interval rests on; a different base hash explains most differences.

Runs are sampled in a fixed order: base seed, RL seed, then GRPO before the other methods and
K&K before math and search QA (the first is the README's main job's run).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rlvr.data_paths import rlvr_home
from rlvr.eval.stats import hierarchical_bootstrap_ci
from rlvr.repro import machine_info, machine_line
from rlvr.reproduce.common import markdown_table
from rlvr.reproduce.grid import get_grid
from rlvr.reproduce.runs import (
    DONE,
    base_weights,
    ensure_eval,
    ensure_run,
    eval_config,
    run_key,
    train_config,
)

_LABEL = re.compile(
    r"^(?P<setting>[\w-]+)/(?P<what>[\w-]+)/(?:base(?P<base>\d+)/)?seed(?P<seed>\d+)$"
)
_SETTING_ORDER = ("kk", "math", "searchqa")
_METHOD_ORDER = ("grpo", "grpo_sg", "reverse", "ar", "lopti", "entropy_top")


def load_records(folder: Path) -> tuple[dict[str, Any], dict[str, dict], dict[str, dict]]:
    """``(meta of the first script, label -> run record, model -> base record)`` of ``folder``."""
    metas = [json.loads(p.read_text()) for p in sorted(folder.glob("*.meta.json"))]
    if not metas:
        raise SystemExit(f"--check {folder}: no <name>.meta.json here (not a reproduction folder)")
    records: dict[str, dict] = {}
    bases: dict[str, dict] = {}
    for meta in metas:
        for label, rec in meta.get("run_records", {}).items():
            records.setdefault(label, {}).update(rec)
        bases.update({m: b for m, b in meta.get("bases", {}).items() if b})
    engine = metas[0].get("engine", "native")
    if engine != "native":
        raise SystemExit(
            f"--check {folder}: its runs were trained by {engine} (--from-verl); the check "
            "retrains natively and would compare two engines, so it applies to native results only"
        )
    if not records:
        raise SystemExit(
            f"--check {folder}: its meta.json files record no per-run numbers or "
            "hashes (written by an older rlvr); regenerate it with `rlvr reproduce "
            "... --out` first"
        )
    return metas[0], records, bases


def parse_label(label: str) -> dict[str, Any] | None:
    m = _LABEL.match(label)
    if not m:
        return None
    return {
        "setting": m["setting"],
        "what": m["what"],
        "base": int(m["base"] or 0),
        "seed": int(m["seed"]),
    }


def sample_labels(records: dict[str, dict], n: int) -> list[str]:
    """The first ``n`` rerunnable runs in the fixed order of the module docstring."""

    def order(label: str):
        p = parse_label(label)
        return (
            p["base"],
            p["seed"],
            _METHOD_ORDER.index(p["what"]) if p["what"] in _METHOD_ORDER else 99,
            _SETTING_ORDER.index(p["setting"]) if p["setting"] in _SETTING_ORDER else 99,
        )

    ok = [lab for lab in records if (p := parse_label(lab)) and p["what"] in _METHOD_ORDER]
    return sorted(ok, key=order)[: max(0, n)]


def stated_interval(records: dict[str, dict], label: str, metric: str):
    """The 95% interval over every recorded run of ``label``'s setting and method."""
    p = parse_label(label)
    values, bases = [], []
    for other, rec in records.items():
        q = parse_label(other)
        if (
            q
            and (q["setting"], q["what"]) == (p["setting"], p["what"])
            and metric in rec.get("numbers", {})
        ):
            values.append(float(rec["numbers"][metric]))
            bases.append(q["base"])
    return hierarchical_bootstrap_ci(values, bases) if values else None


def verdict(committed: float, rerun: float, interval) -> str:
    if rerun == committed:
        return "bit-identical"
    if interval is not None and interval.low <= rerun <= interval.high:
        return "within the stated interval"
    return "outside"


def run_check(
    folder: Path, *, sample: int = 1, cache: Path | None = None, progress: bool = True
) -> int:
    """Rerun ``sample`` runs recorded in ``folder`` and print the comparison. Returns 1 when a
    number lies outside its interval or a run's config no longer matches, else 0 (differing
    weight hashes alone are reported, not failed: other machines may differ in threads)."""
    meta, records, bases = load_records(folder)
    # "profile": what reproductions written before the grid had its name recorded
    grid = get_grid(meta.get("grid", meta.get("profile")), smoke=bool(meta.get("smoke")))
    cache = cache or rlvr_home()
    rows: list[list[str]] = []
    outside = 0
    recorded_on = machine_line(meta["machine"]) if "machine" in meta else "an unrecorded machine"
    print(f"[check] {folder}: recorded on {recorded_on}")
    print(f"[check] here: {machine_line(machine_info())}", flush=True)
    for label in sample_labels(records, sample):
        p = parse_label(label)
        rec = records[label]
        setting = grid.settings[p["setting"]]
        cfg = train_config(setting, p["what"], p["seed"], base_seed=p["base"])
        if run_key(cfg) != rec["key"]:
            rows.append(
                [
                    label,
                    "config hash",
                    rec["key"],
                    run_key(cfg),
                    "not comparable: this checkout's config differs",
                ]
            )
            outside += 1
            continue
        cached = (Path(cache) / "runs" / rec["key"] / DONE).exists()
        run = ensure_run(cfg, cache, progress=progress)
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
                    "bit-identical" if same else "differs",
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
                "bit-identical" if run.weights_sha256 == rec.get("weights_sha256") else "differs",
            ]
        )
        ev = ensure_eval(
            eval_config(setting, cfg, str(run.final), seed=cfg.seed), cache, progress=progress
        )
        for metric, value in sorted(rec.get("numbers", {}).items()):
            new = ev.summary.get("all", {}).get(metric)
            if new is None:
                continue
            ci = stated_interval(records, label, metric)
            v = verdict(float(value), float(new), ci)
            outside += v == "outside"
            stated = "" if ci is None else f" (stated {ci.low:.3f}-{ci.high:.3f})"
            rows.append([label, metric, f"{float(value):.4f}{stated}", f"{float(new):.4f}", v])
    print(markdown_table(["run", "number", "recorded", "rerun", "verdict"], rows))
    return 1 if outside else 0


__all__ = ["load_records", "run_check", "sample_labels", "stated_interval", "verdict"]
