"""The claims of a reproduction with their precision, and the evaluation size and draws that would
decide them: ``rlvr reproduce --power DIR [--target 0.03]``.

Every claim a script decides records (``rlvr.reproduce.collect.precision``) the half-width of its
95% interval, the variance components of its paired difference (bases, RL seeds within a base,
items, residual; ``rlvr.eval.power``), its design (bases x seeds x items), the standard error of
the mean under that design and the minimum detectable effect at 80% power. ``restate`` gives the
same fields for claims written before they were recorded (the committed ``results/tiny`` of
2026-12-01), from what those folders hold:

- accuracy claims: the per-run numbers of both methods (``run_records``) give each draw's paired
  difference, whose spread measures the base variance (seed and residual/n counted in it: one seed
  per base); the item component is what the recorded bootstrap interval holds beyond it,
  ``n x max(0, (half-width / z)^2 - s2_draws / B)``, residual counted in it;
- per-run claims (gradient norms, training reward): the per-draw values are not recorded, so the
  standard error is the recorded half-width / z.

Both fallbacks err toward the conservative side for sizing (the lumped parts are assumed not to
shrink with more seeds or items than they do). Verdicts are re-read from the recorded interval
with the four-way rule of ``rlvr.eval.stats`` (held, reversed, no effect beyond ±margin,
underpowered), so an old folder's "inconclusive" shows as one of the last two.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.config import ConfigError
from rlvr.eval.power import (
    Components,
    bases_needed,
    estimate_components,
    items_needed,
    mde,
    z_quantile,
)
from rlvr.eval.stats import UNDERPOWERED, Interval, verdict_close, verdict_greater
from rlvr.reproduce.common import METHOD_LABELS, markdown_table
from rlvr.reproduce.grid import Grid, get_grid
from rlvr.reproduce.records import load_meta, parse_label

#: The target half-width of issue 28 (95% intervals at most +-0.03).
TARGET = 0.03
#: Designs the sizing table evaluates: bases x RL seeds per base.
DRAWS = ((3, 1), (5, 1), (10, 1), (5, 2))

_PAIR = re.compile(r"paired per-item difference in (\w+) (.+?) \((.+?) - (.+?)\)")
_CLOSE = re.compile(r"'close' means the CI lies within ±([0-9.]+)")
#: The verdicts of reports before the four-way rule, in its words.
_OLD_WORDS = {"inconclusive": UNDERPOWERED, "not held": "reversed"}
_LABEL_OF = {label: name for name, label in METHOD_LABELS.items()}


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _margin_of(meta: dict) -> float:
    try:
        return get_grid(meta.get("grid", meta.get("profile", "tiny"))).no_effect_margin
    except ConfigError:
        return next(f.default for f in dataclasses.fields(Grid) if f.name == "no_effect_margin")


def _legacy_draws(meta: dict, claim: dict) -> tuple[list[float], list[int], int] | None:
    """Each draw's paired difference of an accuracy claim from the two methods' per-run numbers:
    ``(differences, bases, items)``; None when the claim does not name them."""
    m = _PAIR.match(claim.get("evidence", ""))
    if not m:
        return None
    mode, what, a, b = m.groups()
    a, b = _LABEL_OF.get(a), _LABEL_OF.get(b)
    metric = ("avg@k" if mode == "sample" else "greedy") if what == "accuracy" else f"{mode}_{what}"
    runs: dict[tuple[str, str], dict[tuple[int, int], dict]] = {}
    for label, rec in meta.get("run_records", {}).items():
        p = parse_label(label)
        if p and "numbers" in rec:
            unit = (p["base"], p["seed"])
            runs.setdefault((p["setting"], p["what"]), {})[unit] = rec["numbers"]
    settings = {s for s, w in runs if w == a} & {s for s, w in runs if w == b}
    if len(settings) != 1:
        return None
    (s,) = settings
    units = sorted(u for u in runs[(s, a)] if u in runs[(s, b)] and metric in runs[(s, a)][u])
    if not units:
        return None
    diffs = [float(runs[(s, a)][u][metric]) - float(runs[(s, b)][u][metric]) for u in units]
    items = int(runs[(s, a)][units[0]].get("n_items", claim.get("n", 1)))
    return diffs, [u[0] for u in units], items


def restate(meta: dict, claim: dict) -> dict:
    """``claim`` with ``half_width``, ``se``, ``mde``, ``components``, ``design`` and ``margin``
    (recorded, or estimated as the module docstring says) and its four-way verdict."""
    c = dict(claim)
    if "components" in c:  # written by this rlvr: recorded as decided
        return c
    low, high = _num(c.get("diff_low")), _num(c.get("diff_high"))
    evidence = c.get("evidence", "")
    accuracy = evidence.startswith("paired per-item")
    close = _CLOSE.search(evidence)
    c["margin"] = float(close[1]) if close else (_margin_of(meta) if accuracy else None)
    c["close"] = bool(close)
    c["half_width"] = (high - low) / 2
    if not (math.isfinite(low) and math.isfinite(high)):  # no interval recorded: its words
        c["verdict"] = _OLD_WORDS.get(c["verdict"], c["verdict"])
    elif close:
        c["verdict"] = verdict_close(Interval(_num(c.get("diff_mean")), low, high, 0), c["margin"])
    else:
        c["verdict"] = verdict_greater(
            Interval(_num(c.get("diff_mean")), low, high, 0), c["margin"]
        )
    if "no power" in evidence or "fewer than 2" in evidence or "one seed" in evidence:
        c["verdict"] = UNDERPOWERED
    z = z_quantile(0.975)
    n_bases = len(meta.get("base_seeds", [0]))
    seeds = len(meta.get("seeds", [0]))
    drawn = _legacy_draws(meta, c) if accuracy else None
    if drawn is not None:
        diffs, bases, items = drawn
        draws = estimate_components(np.array(diffs), bases)
        n_bases, seeds = len(set(bases)), len(bases) / len(set(bases))
        between = draws.variance(n_bases, seeds) if len(diffs) > 1 else 0.0
        item = items * max(0.0, (c["half_width"] / z) ** 2 - between)
        comp = Components(
            draws.base if len(diffs) > 1 else math.nan,
            draws.seed if len(diffs) > 1 else math.nan,
            item,
            0.0,
            "not recorded: base from the per-run numbers (seed and residual/n counted in it), "
            "item from the recorded interval (residual counted in it)",
        )
        c["draws"] = [[g, d] for g, d in zip(bases, diffs)]
    else:
        items = 1
        comp = Components(
            n_bases * (c["half_width"] / z) ** 2,
            0.0,
            0.0,
            0.0,
            "not recorded: from the recorded interval (half-width / z) as base variance",
        )
    c["components"] = comp.as_dict()
    c["design"] = {"bases": n_bases, "seeds": seeds, "items": items}
    c["se"] = comp.se(n_bases, seeds, items)
    c["mde"] = mde(c["se"])
    return c


def load_claims(folder: Path, order: list[str]) -> list[tuple[str, dict]]:
    """``(script name, restated claim)`` of every ``<name>.meta.json`` in ``folder``, scripts in
    ``order``."""
    out = []
    for name in order:
        p = Path(folder) / f"{name}.meta.json"
        if os.path.lexists(p):  # a dangling link or a FIFO is refused, not skipped
            meta = load_meta(p)
            out += [(name, restate(meta, claim)) for claim in meta.get("claims", [])]
    return out


def _fmt(x: Any, digits: int = 3) -> str:
    """``0.048``; small values with 3 significant digits (``8.33e-06``); ``n/a`` if unmeasured."""
    x = _num(x)
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.{digits}g}" if 0 < abs(x) < 1e-3 else f"{x:.3f}"


def claims_rows(claims: list[dict]) -> list[list[str]]:
    """Rows ``claim | setting | **verdict** | ± half-width | MDE | evidence`` of the report."""
    return [
        [
            c["claim"],
            c["setting"],
            f"**{c['verdict']}**",
            f"±{_fmt(c.get('half_width'))}",
            _fmt(c.get("mde")),
            c["evidence"],
        ]
        for c in claims
    ]


CLAIMS_HEADER = ["claim", "setting", "verdict", "95% half-width", "MDE (80% power)", "evidence"]


def _design(d: dict) -> str:
    seeds = d["seeds"]
    return f"{d['bases']}x{seeds:g}x{d['items']}"


def sizing_rows(claims: list[dict], target: float = TARGET) -> tuple[list, list]:
    """Two tables over the accuracy claims (those with items): the measured components, and the
    designs that would give a 95% half-width ``<= target``."""
    measured, needed = [], []
    for c in claims:
        d = c.get("design", {})
        if d.get("items", 1) <= 1:
            continue
        comp = Components(**{k: _num(v) if k != "note" else v for k, v in c["components"].items()})
        measured.append(
            [
                c["claim"],
                c["setting"],
                _design(d),
                f"±{_fmt(1.96 * _num(c['se']))}",
                *(f"{getattr(comp, k):.3g}" for k in ("base", "seed", "item", "resid")),
                comp.note or "measured",
            ]
        )
        if not all(math.isfinite(getattr(comp, k)) for k in ("base", "seed", "item", "resid")):
            needed.append([c["claim"], c["setting"]] + ["n/a"] * (len(DRAWS) + 3))
            continue
        n = int(d["items"])
        row = [c["claim"], c["setting"]]
        row += [_count(items_needed(comp, b, s, target)) for b, s in DRAWS]
        row += [_count(bases_needed(comp, 1, k * n, target)) for k in (1, 2, 4)]
        needed.append(row)
    return measured, needed


def _count(x: float) -> str:
    return "never" if math.isinf(x) else f"{int(x)}"


def run_power(folder: Path, order: list[str], target: float = TARGET) -> int:
    """Print the claims table of ``folder`` (scripts in ``order``) and the sizing tables for a
    half-width ``target``."""
    if not target > 0:
        raise SystemExit(f"--target must be > 0, got {target}")
    claims = [c for _, c in load_claims(Path(folder), order)]
    if not claims:
        raise SystemExit(f"--power {folder}: no <name>.meta.json with claims here")
    print(f"## Claims of {folder}\n")
    print(markdown_table(CLAIMS_HEADER, claims_rows(claims)))
    measured, needed = sizing_rows(claims, target)
    print(
        "\n## Variance components of the accuracy claims (rlvr.eval.power)\n\n"
        "design: bases x RL seeds per base x items; SE^2 = s2_base/B + s2_seed/(B S) + "
        "s2_item/n + s2_resid/(B S n) (Searle, Casella & McCulloch 1992)\n"
    )
    print(
        markdown_table(
            [
                "claim",
                "setting",
                "design",
                "1.96 SE",
                "s2_base",
                "s2_seed",
                "s2_item",
                "s2_resid",
                "how measured",
            ],
            measured,
        )
    )
    n_cols = [f"items at {b}x{s}" for b, s in DRAWS]
    print(f"\n## Draws and items for a 95% half-width <= {target:g}\n")
    print(
        "items: total over the claim's sizes / levels / QA sets at bases x seeds; bases: with "
        "one RL seed each at 1x, 2x, 4x the current items; 'never': the other factor's "
        "variance alone is wider than the target. A seed variance counted in the base's (one "
        "seed per base) makes more seeds look useless: measure it with 2 seeds on some bases\n"
    )
    print(
        markdown_table(
            ["claim", "setting", *n_cols, "bases at n", "bases at 2n", "bases at 4n"], needed
        )
    )
    return 0


__all__ = [
    "CLAIMS_HEADER",
    "TARGET",
    "claims_rows",
    "load_claims",
    "restate",
    "run_power",
    "sizing_rows",
]
