"""Table: K&K accuracy per puzzle size and average for GRPO, 80/20, AR, Lopti, Reverse, TR-GRPO,
GRPO-SG, and the grid's ablations on K&K (the placement ablation, the KL control).

Cells are the mean over seeds with a 95% bootstrap interval over seeds; greedy accuracy (the
paper's metric) first, avg@k at the training temperature second. The paper's claims on K&K are
decided here from paired per-item differences (each item's accuracy averaged over seeds):
"GRPO-SG beats GRPO" holds when the interval of GRPO-SG - GRPO lies above 0; "Reverse is close
to GRPO" holds when the interval of Reverse - GRPO lies within the grid's ``close_margin``; each
ablation decides its own claim. Every comparison is decided only where GRPO moved the endpoint
(greedy or avg@k) by the grid's ``min_grpo_gain`` over the base; elsewhere it is "not testable
at this scale" (``collect.endpoint_moved``).
"""

from __future__ import annotations

from rlvr.reproduce import paper_numbers
from rlvr.reproduce.collect import (
    base_evals,
    compare,
    evals_for,
    runs_for,
    sample_metric,
    seed_ci,
)
from rlvr.reproduce.common import METHOD_LABELS, Context, Output, fmt_ci, markdown_table
from rlvr.reproduce.plan import Need

NAME = "table_kk"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = "Table — K&K accuracy for seven methods and the ablations"
REPORT_ORDER = 50
#: The methods of the K&K table (docs/design.md, "Optimizer math"), in the paper's order, with
#: TR-GRPO (the earlier version's probability form) before GRPO-SG.
KK_METHODS = ("grpo", "entropy_top", "ar", "lopti", "reverse", "tr_grpo", "grpo_sg")


def kk_settings(ctx: Context) -> list[str]:
    """The grid's K&K settings in order (the paper's table has one per model: 3B and 7B)."""
    return [key for key, s in ctx.grid.settings.items() if s.env == "kk"]


def ablations(ctx: Context, key: str) -> dict:
    """The grid's ablations on setting ``key`` (name -> ``grid.Ablation``)."""
    return {n: ab for n, ab in ctx.grid.ablations.items() if ab.setting == key}


def needs(ctx: Context) -> list[Need]:
    """The base, the methods and the ablations on every K&K setting."""
    out = []
    for key in kk_settings(ctx):
        out += [Need.of(key, m) for m in ("base", *ctx.grid.arms(KK_METHODS))]
        out += [Need.of(key, ab.algo, ab.train) for ab in ablations(ctx, key).values()]
    return out


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    csv_rows, md, results = [], [], {}
    keys = kk_settings(ctx)
    for key in keys:
        where = "K&K" if key == keys[0] else f"K&K, {ctx.grid.settings[key].model}"
        tables, evs = _setting_table(ctx, out, key, csv_rows)
        md += tables
        suffix = "" if key == keys[0] else f"[{key}]"
        results.update({f"{name}{suffix}": ci for name, ci in _claims(ctx, out, evs, where, key)})
    md += [
        "GRPO-SG is Eq. 20 on the sampled token's logit with alpha, tau, mu calibrated on each "
        "run's first batch for a token-mean weight of 1 (TR-GRPO: alpha; Reverse: mirrored); "
        "the weight multiplies the clipped surrogate and not the KL term, as GRPO-SG's text; "
        "the KL control is GRPO with its KL coefficient divided by GRPO-SG's same-batch "
        "gradient-norm ratio (docs/algorithms.md).",
        "",
        "## Claims (paired per-item differences)",
        "",
    ]
    md += [
        f"- **{c['claim']}** ({c['setting']}): {c['verdict']}. {c['evidence']}." for c in out.claims
    ]
    md += ["", "## The paper's reported K&K average accuracy (Qwen2.5, 3-7 people)", ""]
    md += paper_numbers.kk_lines()
    out.write_csv(csv_rows)
    out.write_md("\n".join(md))
    return out.finish(results)


def _setting_table(ctx: Context, out: Output, key: str, csv_rows: list) -> tuple[list, dict]:
    """The greedy and avg@k tables of one K&K setting as markdown lines (rows added to
    ``csv_rows``), and its evaluations per method."""
    setting = ctx.grid.settings[key]
    evs = {
        m: evals_for(ctx, out, key, runs_for(ctx, out, key, m)) for m in ctx.grid.arms(KK_METHODS)
    }
    labels = dict(METHOD_LABELS)
    for name, ab in ablations(ctx, key).items():
        runs = runs_for(ctx, out, key, ab.algo, ab.train, tag=name)
        evs[name], labels[name] = evals_for(ctx, out, key, runs), ab.label
    evs["base"] = base_evals(ctx, out, key)
    sizes = [str(v) for v in setting.group_values]
    avg_key = sample_metric(evs["grpo"])
    md = [
        f"# K&K accuracy by number of people ({ctx.grid.name} grid, "
        f"{ctx.draws()}, model {setting.model})",
        "",
    ]
    for metric in ("greedy", avg_key):
        table = []
        for m in [m for m in evs if m != "base"]:
            cells = []
            for size in sizes + ["all"]:
                ci = seed_ci(evs[m], metric, size)
                cells.append(fmt_ci(ci))
                if ci is not None:
                    csv_rows.append(
                        {
                            "model": setting.model,
                            "method": m,
                            "metric": metric,
                            "n_people": size,
                            "mean": ci.mean,
                            "low": ci.low,
                            "high": ci.high,
                            "seeds": ci.n,
                        }
                    )
            table.append([labels[m]] + cells)
        md += [
            f"## {metric} accuracy"
            + (" (as the paper)" if metric == "greedy" else " at the training temperature"),
            "",
            markdown_table(["method"] + [f"{s} ppl" for s in sizes] + ["avg"], table),
            "",
        ]
    return md, evs


#: The paper's K&K claims (and TR-GRPO's): name, claim, a, b, extra ``compare`` keywords.
PAPER_CLAIMS = (
    ("grpo_sg_minus_grpo", "GRPO-SG beats GRPO", "grpo_sg", "grpo", {}),
    ("reverse_minus_grpo", "Reverse is close to GRPO", "reverse", "grpo", {"close": True}),
    ("tr_grpo_minus_grpo", "TR-GRPO beats GRPO", "tr_grpo", "grpo", {}),
)


def _claims(ctx: Context, out: Output, evs: dict, where: str, key: str):
    """Decide the paper's K&K claims and the ablations' on one setting's evaluations, each only
    where GRPO moved the endpoint (greedy, then the avg@k ones); yields ``(name, interval)`` of
    the greedy ones."""
    claims = [
        (name, claim, a, b, {"close_margin": ctx.grid.close_margin} if kw else {})
        for name, claim, a, b, kw in PAPER_CLAIMS
    ]
    claims += [
        (f"{ab.a}_minus_{ab.b}", ab.claim, ab.a, ab.b, {})
        for ab in ablations(ctx, key).values()
        if ab.claim
    ]
    sampled = [(n, f"{c} (avg@k)", a, b, kw) for n, c, a, b, kw in claims[len(PAPER_CLAIMS) :]]
    sampled.append(("", "GRPO-SG beats GRPO (avg@k, beyond the paper)", "grpo_sg", "grpo", {}))
    endpoint = (evs["grpo"], evs["base"])
    labels = {**METHOD_LABELS, **{n: ab.label for n, ab in ablations(ctx, key).items()}}
    for mode, group in (("greedy", claims), ("sample", sampled)):
        for name, claim, a, b, kw in group:
            if a not in evs or b not in evs:  # a method the grid does not train
                continue
            label = f"{labels[a]} - {labels[b]}"
            d = compare(
                out, claim, where, evs[a], evs[b], label=label, mode=mode, **kw, endpoint=endpoint
            )
            if mode == "greedy":
                yield name, d.as_dict()
