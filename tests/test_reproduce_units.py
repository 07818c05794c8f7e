"""Fast tests of the reproduce pieces: spikes, claims, run keys, the paper plan, the report."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

from rlvr.agents.algorithms import algorithm_names
from rlvr.reproduce import collect, compare, fig3, fig4, gpu_plan, grid, mechanism, report
from rlvr.reproduce.common import Context, Output
from rlvr.reproduce.figures import plan_for
from rlvr.reproduce.keys import run_key
from rlvr.reproduce.plan import Need
from rlvr.reproduce.runs import train_config


def test_count_spikes_by_hand():
    g = np.array([1.0, 1.1, 0.9, 5.0, 1.0, 1.0, 2.5, 1.0])
    # t=3: 5.0 > 2 * median(1, 1.1, 0.9) = 2; t=6: 2.5 > 2 * median(1, 1.1, .9, 5, 1, 1) = 2.
    assert fig3.count_spikes(g) == 2
    assert fig3.count_spikes(np.ones(50)) == 0
    assert fig3.count_spikes(np.array([1.0, np.nan, 3.0])) == 1
    v = fig3.variability(np.array([1.0, 3.0]))
    assert v["std"] == pytest.approx(1.0) and v["spikes"] == 1.0
    assert fig4.late_mean(np.array([0.0, 0.0, 1.0, 3.0])) == pytest.approx(2.0)


class FakeEval:
    def __init__(self, correct):
        self.records = [
            {"item": f"3/{i}", "mode": "greedy", "correct": c} for i, c in enumerate(correct)
        ]
        self.summary = {}
        self.unit = (0, 0)


def _ctx(tmp_path):
    return Context(
        grid.tiny_grid(smoke=True),
        tmp_path,
        tmp_path / "cache",
        [0],
        smoke=True,
        command="rlvr reproduce test",
    )


def test_claims_are_decided_by_the_paired_interval(tmp_path):
    out = Output(_ctx(tmp_path), "t")
    rng = np.random.default_rng(0)
    base = rng.random(200) < 0.3
    better = base | (rng.random(200) < 0.3)
    collect.compare(out, "A beats B", "K&K", [FakeEval(better)], [FakeEval(base)])
    collect.compare(out, "B beats A", "K&K", [FakeEval(base)], [FakeEval(better)])
    collect.compare(
        out, "zeros", "K&K", [FakeEval([0] * 50)], [FakeEval([0] * 50)], close_margin=0.05
    )
    collect.compare(out, "close", "K&K", [FakeEval(base)], [FakeEval(base)], close_margin=0.05)
    # 2000 items, 20% of them scored apart in both directions: no effect, bounded within ±0.02
    same = np.tile([1] + [0] * 9, 200)
    collect.compare(out, "same", "K&K", [FakeEval(same)], [FakeEval(np.roll(same, 1))])
    verdicts = [c["verdict"] for c in out.claims]
    assert verdicts == ["held", "reversed", "underpowered", "held", "no effect beyond ±0.03"]
    assert "floor/ceiling" in out.claims[2]["evidence"]
    collect.paired_seed_claim(out, "smoother", "K&K", [2.0, 2.1, 2.2], [1.0, 1.05, 1.1], "std")
    collect.paired_seed_claim(out, "one seed", "K&K", [2.0], [1.0], "std")
    assert [c["verdict"] for c in out.claims[-2:]] == ["held", "underpowered"]


def test_a_comparison_is_decided_only_where_grpo_moved_the_endpoint(tmp_path):
    """Issue 48: GRPO's paired gain over the base on the same items must be at least the grid's
    ``min_grpo_gain`` (0.05) with its interval above 0, else the comparison is "not testable at
    this scale" whatever its own interval says; the report says it in words."""
    ctx = _ctx(tmp_path)
    assert ctx.grid.min_grpo_gain == 0.05
    out = Output(ctx, "table_kk")
    rng = np.random.default_rng(0)
    base = rng.random(400) < 0.3
    moved = base | (rng.random(400) < 0.2)  # GRPO about +0.14 over the base
    flat = base.copy()
    flat[:8] = ~flat[:8]  # GRPO within a few items of the base
    sg = moved | (rng.random(400) < 0.3)  # clearly above either GRPO
    for label, grpo in (("moved", moved), ("flat", flat)):
        collect.compare(
            out,
            f"GRPO-SG beats GRPO ({label})",
            "K&K",
            [FakeEval(sg)],
            [FakeEval(grpo)],
            endpoint=([FakeEval(grpo)], [FakeEval(base)]),
        )
    small = base | (rng.random(400) < 0.04)  # moved, interval above 0, but by less than 0.05
    assert 0 < collect.paired_items([FakeEval(small)], [FakeEval(base)]).mean < 0.05
    collect.compare(
        out,
        "GRPO-SG beats GRPO (small)",
        "K&K",
        [FakeEval(sg)],
        [FakeEval(small)],
        endpoint=([FakeEval(small)], [FakeEval(base)]),
    )
    verdicts = [c["verdict"] for c in out.claims]
    assert verdicts == ["held", "not testable at this scale", "not testable at this scale"]
    assert "GRPO - base in greedy accuracy: +0.1" in out.claims[0]["evidence"]
    assert "(not +0.05 with its interval above 0)" in out.claims[1]["evidence"]
    assert out.claims[1]["diff_low"] > 0  # its own interval would have said "held"
    out.finish()
    text = report.write_report(ctx).read_text()
    assert "GRPO-SG beats GRPO (flat) (K&K): not testable at this scale: GRPO itself" in text


def test_claims_record_their_half_width_mde_and_variance_components(tmp_path):
    from scipy import stats

    from rlvr.eval.power import estimate_components

    out = Output(_ctx(tmp_path), "t")
    rng = np.random.default_rng(3)
    a, b = [], []
    for base in range(3):  # 3 bases x 2 seeds, 150 items
        for seed in range(2):
            ea, eb = FakeEval(rng.random(150) < 0.4), FakeEval(rng.random(150) < 0.35)
            ea.unit = eb.unit = (base, seed)
            a.append(ea)
            b.append(eb)
    collect.compare(out, "A beats B", "K&K", a, b)
    c = out.claims[-1]
    assert c["design"] == {"bases": 3, "seeds": 2.0, "items": 150}
    assert c["half_width"] == pytest.approx((c["diff_high"] - c["diff_low"]) / 2)
    multiplier = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert c["mde"] == pytest.approx(multiplier * c["se"])
    k = c["components"]
    se = np.sqrt(k["base"] / 3 + k["seed"] / 6 + k["item"] / 150 + k["resid"] / 900)
    assert c["se"] == pytest.approx(se) and c["se"] > 0
    matrix = [
        [float(x["correct"]) - float(y["correct"]) for x, y in zip(ea.records, eb.records)]
        for ea, eb in zip(a, b)
    ]
    assert k == estimate_components(np.array(matrix, dtype=float), [0, 0, 1, 1, 2, 2]).as_dict()
    assert len(c["draws"]) == 6 and c["margin"] == 0.03


def test_run_key_ignores_output_fields_only():
    setting = grid.tiny_grid(smoke=True).settings["kk"]
    a = train_config(setting, "grpo", 0)
    assert run_key(a) == run_key(
        dataclasses.replace(a, out="/elsewhere", resume=True, progress=False)
    )
    assert run_key(a) != run_key(train_config(setting, "grpo", 1))
    assert run_key(a) != run_key(train_config(setting, "grpo_sg", 0))


def test_paper_grid_validates_and_plans():
    p = grid.paper_grid()
    assert grid.validate(p) == len(p.settings) * len(algorithm_names())
    rows = {r["setting"]: r for r in gpu_plan.plan_rows(p)}
    # Public parameter counts: Qwen2.5-3B 3.09B, Qwen2.5-7B 7.62B.
    assert rows["kk"]["params_B"] == pytest.approx(3.09, abs=0.01)
    assert rows["kk-7b"]["params_B"] == pytest.approx(7.62, abs=0.01)
    assert rows["kk"]["steps"] == 352 and rows["kk"]["rollouts_per_step"] == 512
    assert all(r["engine"] in ("native", "verl") and r["gpus"][0].isdigit() for r in rows.values())
    cfg = train_config(p.settings["kk"], "grpo_sg", 0)
    assert cfg.rollout.temperature == 0.7 and cfg.loss.kl_coef == 0.001 and cfg.optim.lr == 1e-6


def test_cli_paper_without_gpu_prints_the_plan(tmp_path, capsys):
    from rlvr.cli import main

    assert main(["reproduce", "fig2", "--grid", "paper", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "not started: no GPU" in text and "Qwen/Qwen2.5-7B-Instruct-1M" in text
    assert "| vllm_gmu | kv_GiB_per_gpu | kv_holds |" in text and "64/64" in text
    assert (tmp_path / "plan.md").read_text().startswith("# Plan")
    # --profile, the old name of --grid, still works and says so
    assert main(["reproduce", "fig2", "--profile", "paper", "--out", str(tmp_path)]) == 0
    assert "--profile is deprecated, use --grid" in capsys.readouterr().err


def test_report_states_each_verdict_plainly(tmp_path):
    ctx = _ctx(tmp_path)
    out = Output(ctx, "table_kk")
    out.claim("GRPO-SG beats GRPO", "K&K", "reversed", "diff -0.1 [-0.2, -0.05]")
    out.claim("Reverse is close to GRPO", "K&K", "held", "diff 0.0 [-0.01, 0.01]")
    out.write_md("# K&K\n\n| a |\n|---|\n| 1 |")
    out.claim(
        "GRPO-SG beats GRPO",
        "math",
        "underpowered",
        "paired per-item difference in greedy accuracy (GRPO-SG - GRPO): +0.010, 95% CI "
        "[-0.010, +0.030] over 500 items x 3 run(s) on 3 base(s)",
        diff_mean=0.01,
        diff_low=-0.01,
        diff_high=0.03,
        n=500,
        margin=0.03,
        half_width=0.02,
        se=0.0102,
        mde=0.0286,
        components={"base": 1e-4, "seed": 0.0, "item": 0.04, "resid": 0.0, "note": ""},
        design={"bases": 3, "seeds": 1, "items": 500},
    )
    out.finish()
    text = report.write_report(ctx).read_text()
    assert (
        "| GRPO-SG beats GRPO | math | **underpowered** | ±0.020 | 0.029 | paired per-item" in text
    )
    assert "only an effect of 0.029 or more would be seen at 80% power" in text
    assert "| claim | setting | verdict | 95% half-width | MDE (80% power) | evidence |" in text
    assert "GRPO-SG beats GRPO (K&K): did NOT hold" in text
    assert "Reverse is close to GRPO (K&K): held at this scale" in text
    assert "0.42" in text and "python" in text and "git_commit" in text
    meta = json.loads((tmp_path / "table_kk.meta.json").read_text())
    assert meta["command"] == "rlvr reproduce test" and meta["files"] == [
        "table_kk.md",
        "table_kk.meta.json",
    ]


def test_keys_follow_the_preset_a_model_name_stands_for(monkeypatch):
    """A changed tiny preset must not reuse runs or evaluations of the old base."""
    from rlvr.models import presets
    from rlvr.reproduce import keys, runs

    setting = grid.tiny_grid().settings["kk"]
    cfg = train_config(setting, "grpo", 0)
    ecfg = runs.eval_config(setting, cfg, setting.model)
    keys.preset_build_key.cache_clear()
    before = run_key(cfg), keys.eval_key(ecfg)
    changed = dataclasses.replace(
        presets.PRESETS["tiny-kk"], seed=presets.PRESETS["tiny-kk"].seed + 1
    )
    monkeypatch.setitem(presets.PRESETS, "tiny-kk", changed)
    keys.preset_build_key.cache_clear()
    try:
        after = run_key(cfg), keys.eval_key(ecfg)
    finally:
        keys.preset_build_key.cache_clear()
    assert before[0] != after[0] and before[1] != after[1]
    # A path or hub name is hashed as given.
    assert keys.model_identity("/some/dir") == "/some/dir"


def test_table_kk_has_a_table_and_claims_per_kk_model(tmp_path):
    """The paper's K&K table has a 3B and a 7B block: every K&K setting of a grid gets its
    tables, CSV rows and claims (here two settings naming the same micro model, so the second
    reuses the first's runs from the cache)."""
    import csv

    from rlvr.reproduce import table_kk

    g = grid.tiny_grid(smoke=True)
    g.settings["kk-b"] = grid.replace(g.settings["kk"])
    ctx = Context(g, tmp_path / "out", tmp_path / "cache", [0], smoke=True, progress=False)
    ctx.plan = plan_for(ctx, ["table_kk"])
    result = table_kk.run(ctx)
    text = (tmp_path / "out" / "table_kk.md").read_text()
    assert text.count("# K&K accuracy by number of people") == 2
    claims = json.loads((tmp_path / "out" / "table_kk.meta.json").read_text())["claims"]
    # the paper's three, TR-GRPO's, the avg@k one, and on the first the ablations' (greedy, avg@k)
    assert [c["setting"] for c in claims] == ["K&K"] * 8 + ["K&K, micro"] * 4
    names = [c["claim"] for c in claims]
    for ab in g.ablations.values():
        assert ab.claim in names and f"{ab.claim} (avg@k)" in names
    # two micro-model steps move no endpoint: every comparison says so instead of a verdict
    assert {c["verdict"] for c in claims} == {"not testable at this scale"}
    assert all("GRPO - base in" in c["evidence"] for c in claims)
    assert "grpo_sg_minus_grpo" in result and "grpo_sg_minus_grpo[kk-b]" in result
    rows = list(csv.DictReader(open(tmp_path / "out" / "table_kk.csv")))
    assert {r["model"] for r in rows} == {"micro"} and len(rows) % 2 == 0


def test_report_includes_changes_and_compare_reads_verdicts_back(tmp_path, capsys):
    from rlvr.cli import main
    from rlvr.files import RecordError
    from rlvr.reproduce.compare import compare_claims, read_claims

    def reproduce(folder, verdict, changes=None):
        folder.mkdir()
        if changes:
            (folder / "CHANGES.md").write_text(changes)
        ctx = _ctx(folder)
        out = Output(ctx, "table_kk")
        out.claim("GRPO-SG beats GRPO", "K&K", verdict, "diff | 0.1 [0.05, 0.2]")
        out.claim("Reverse is close to GRPO", "K&K", "held", "diff 0.0 [-0.01, 0.01]")
        out.finish()
        return report.write_report(ctx)

    reproduce(tmp_path / "old", "inconclusive")
    new = reproduce(tmp_path / "new", "held", "# Why\n\nThe kernels changed.\n")
    text = new.read_text()
    assert "## Why\n\nThe kernels changed." in text
    claims = read_claims(tmp_path / "new")
    assert [c["verdict"] for c in claims] == ["held", "held"]
    assert claims[0]["evidence"] == "diff | 0.1 [0.05, 0.2]"
    rows = compare_claims(read_claims(tmp_path / "old"), claims)
    # the old report's "inconclusive" (no interval recorded) reads as "underpowered" now
    assert [r[4] for r in rows] == ["**underpowered -> held**", "same"]
    assert main(["reproduce", "--compare", str(tmp_path / "old"), str(new)]) == 0
    assert "1 of 2 verdicts changed" in capsys.readouterr().out
    with pytest.raises(RecordError, match="no report"):  # one line from rlvr.cli, exit 2
        read_claims(tmp_path / "missing")


def test_compare_reads_reports_before_the_precision_columns(tmp_path):
    from rlvr.reproduce.compare import read_claims
    from rlvr.reproduce.report import CLAIMS_HEADING

    (tmp_path / "REPORT.md").write_text(
        f"{CLAIMS_HEADING}\n\n| claim | setting | verdict | evidence |\n|---|---|---|---|\n"
        "| GRPO-SG beats GRPO | K&K | **inconclusive** | diff -0.003 [-0.05, 0.047] |\n"
    )
    (claim,) = read_claims(tmp_path)
    assert claim["verdict"] == "inconclusive" and claim["evidence"] == "diff -0.003 [-0.05, 0.047]"


def _legacy_meta():
    """A table's meta.json as rlvr wrote it before claims recorded their precision."""
    numbers = {"grpo": [0.16, 0.31, 0.27], "grpo_sg": [0.16, 0.29, 0.28]}
    records = {
        f"kk/{m}/" + (f"base{b}/" if b else "") + "seed0": {
            "numbers": {"greedy": v[b], "n_items": 100.0}
        }
        for m, v in numbers.items()
        for b in range(3)
    }
    claim = {
        "claim": "GRPO-SG beats GRPO",
        "setting": "K&K",
        "verdict": "inconclusive",
        "evidence": "paired per-item difference in greedy accuracy (GRPO-SG - GRPO): -0.003, "
        "95% CI [-0.050, +0.047] over 100 items x 3 run(s) on 3 base(s)",
        "diff_mean": -0.0033,
        "diff_low": -0.05,
        "diff_high": 0.047,
        "n": 100,
    }
    seed_claim = {
        "claim": "GRPO-SG reaches a higher training reward",
        "setting": "Knights & Knaves",
        "verdict": "reversed",
        "evidence": "per-seed paired difference in mean reward: -0.02, 95% CI [-0.024, -0.016] "
        "over 3 seeds",
        "diff_mean": -0.02,
        "diff_low": -0.024,
        "diff_high": -0.016,
        "n": 3,
    }
    return {
        "name": "table_kk",
        "profile": "tiny",
        "seeds": [0],
        "base_seeds": [0, 1, 2],
        "run_records": records,
        "claims": [claim, seed_claim],
    }


def test_old_claims_are_restated_from_their_per_run_numbers_and_interval(tmp_path, capsys):
    from scipy import stats

    from rlvr.cli import main
    from rlvr.reproduce.precision import restate

    meta = _legacy_meta()
    c = restate(meta, meta["claims"][0])
    assert c["verdict"] == "underpowered" and c["margin"] == 0.03
    diffs = [0.0, -0.02, 0.01]
    assert [d for _, d in c["draws"]] == pytest.approx(diffs)
    z = stats.norm.ppf(0.975)
    s2 = np.var(diffs, ddof=1)
    assert c["components"]["base"] == pytest.approx(s2)
    assert c["components"]["item"] == pytest.approx(100 * ((0.097 / 2 / z) ** 2 - s2 / 3))
    assert c["se"] == pytest.approx(0.097 / 2 / z)  # the item part is what the interval holds
    assert c["mde"] == pytest.approx((z + stats.norm.ppf(0.8)) * c["se"])
    r = restate(meta, meta["claims"][1])
    assert r["verdict"] == "reversed" and r["margin"] is None
    assert r["se"] == pytest.approx(0.004 / z) and r["design"]["items"] == 1
    (tmp_path / "table_kk.meta.json").write_text(json.dumps(meta))
    assert main(["reproduce", "--power", str(tmp_path), "--target", "0.03"]) == 0
    text = capsys.readouterr().out
    assert "| GRPO-SG beats GRPO | K&K | **underpowered** | ±0.049 | 0.069 |" in text
    # items for +-0.03 at 3 bases x 1 seed: (0.053) / ((0.03 / z)^2 - s2 / 3), rounded up
    need = int(np.ceil(c["components"]["item"] / ((0.03 / z) ** 2 - s2 / 3)))
    assert f"| GRPO-SG beats GRPO | K&K | {need} |" in text


def test_the_report_opens_with_its_bottom_line_and_is_rewritten_from_its_files(tmp_path):
    """REPORT.md starts with the main claim's interval and the count of verdicts, names no path
    of the machine (the run cache), says what its time measures, and ``--report`` writes it again
    from the folder's files alone (issue 52, item 4)."""
    from rlvr.cli import main
    from rlvr.locks import LOCK_FILE

    folder = tmp_path / "results"
    folder.mkdir()
    ctx = _ctx(folder)
    out = Output(ctx, "table_kk")
    out.claim(
        "GRPO-SG beats GRPO", "K&K", "held", "diff", diff_mean=0.1, diff_low=0.05, diff_high=0.2
    )
    out.claim("Reverse is close to GRPO", "K&K", "held", "diff 0.0 [-0.01, 0.01]")
    out.notes.append("a note of the table")
    out.finish()
    Output(ctx, "table_math").finish()
    (folder / "runs.csv").write_text("config_hash,compute_seconds\naaa,3600\nbbb,1800\n")
    text = report.write_report(ctx).read_text()
    assert "\n- a note of the table\n\n## " in text  # a list ends before the next heading
    head = text.splitlines()
    assert head[2].startswith("**Smoke run**") and head[4] == "## Bottom line"  # the first screen
    assert "GRPO-SG beats GRPO, the paper's main claim: K&K +0.100 [+0.050, +0.200], held" in text
    assert "Of the 2 claims checked at this scale: 2 held" in text
    assert str(tmp_path) not in text, [x for x in text.splitlines() if str(tmp_path) in x]
    assert "run cache:" not in text
    assert "this invocation" in text

    def others():  # every file but the report and the folder's lock (one writer at a time)
        return {p.name: p.read_bytes() for p in folder.iterdir() if p.name not in skip}

    skip = ("REPORT.md", LOCK_FILE)
    before = others()
    assert main(["reproduce", "--report", str(folder)]) == 0
    again = (folder / "REPORT.md").read_text()
    assert others() == before
    assert again.splitlines()[:8] == head[:8]
    assert "training 1.5 h (2 runs)" in again and "this invocation" not in again
    assert "nothing rerun" in again and str(tmp_path) not in again


def test_cost_lists_every_piece_of_compute_the_folder_used(tmp_path, monkeypatch):
    """cost.csv has a row for each training run's rollouts and updates and its held-out curve,
    each evaluation, continued-SFT reference and base build the metas name, with the seconds
    of its own record; REPORT.md's line sums them by kind, and ``--report`` reads them back
    (issue 49, item 4: the CPU hours)."""
    import csv

    from rlvr.files import write_json_atomic as write_json
    from rlvr.reproduce import cost

    def write_json_atomic(path, record):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, record)

    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    cache = tmp_path / "cache"
    write_json_atomic(cache / "evals" / "e1" / "summary.json", {"summary": {}, "seconds": 1800.0})
    write_json_atomic(cache / "evals" / "e2" / "summary.json", {"summary": {}, "seconds": 900.0})
    write_json_atomic(cache / "evals" / "e3" / "summary.json", {"summary": {}})  # no seconds
    write_json_atomic(cache / "sft" / "s1" / "sft.json", {"seconds": 360.0})
    build = tmp_path / "home" / "models" / "tiny-kk-abc"
    write_json_atomic(build / "build.json", {"seconds": 5400.0, "torch_threads": 1})
    metas = {
        "table_kk": {
            "train_runs": {"kk/grpo/seed0": "r1"},
            "evaluations": {"r1": "e1", "base": "e2", "sft": "e3"},
            "run_records": {"kk/grpo/seed0": {"key": "r1"}, "kk/sft/seed0": {"key": "s1"}},
            "bases": {"tiny-kk": {"build": "tiny-kk-abc"}, "other": {}},
        },
        "fig2": {"train_runs": {"kk/grpo/seed0": "r1"}, "evaluations": {"r1": "e1"}},
    }
    runs = {"r1": {"compute_seconds": 7200.0, "eval_seconds": 720.0, "threads": 1}}
    rows = cost.cost_rows(cache, metas, runs)
    assert [(r["kind"], r["key"], r["seconds"]) for r in rows] == [
        ("training", "r1", 7200.0),
        ("held-out curve", "r1", 720.0),
        ("evaluation", "e1", 1800.0),
        ("evaluation", "e2", 900.0),
        ("continued SFT", "s1", 360.0),
        ("base build", "tiny-kk-abc", 5400.0),
    ]
    assert {r["threads"] for r in rows if r["kind"] in ("training", "base build")} == {"1"}
    cost.write_cost(tmp_path, rows)
    back = cost.read_cost(tmp_path, [])
    assert [r["key"] for r in back] == [r["key"] for r in rows]
    line = cost.cost_line(back, None)
    assert line.startswith("- cost: 4.6 process-hours in all (cost.csv): training 2.0 h (1 run)")
    assert "held-out curve 0.2 h (1 run), evaluation 0.8 h (2 evaluations)" in line
    assert "continued SFT 0.1 h (1 reference), base build 1.5 h (1 base)" in line
    assert "not in the files" in line
    assert "this invocation 2.0 min" in cost.cost_line(back, 120.0)
    with open(tmp_path / "cost.csv") as f:
        assert next(csv.reader(f)) == cost.COLUMNS


def test_a_new_figure_is_one_registration(tmp_path, capsys):
    """A figure defined in the tests alone (name, caption, place in the report, needs, run) is
    planned and run by ``all``, gets its REPORT.md section and its ``--power`` rows."""
    from rlvr.reproduce import figures
    from rlvr.reproduce.cli import run_all
    from rlvr.reproduce.precision import run_power

    def needs(ctx):
        return [Need.of("kk", "grpo", units=((0, 0),))]

    def run(ctx):
        out = Output(ctx, "toy_fig")
        out.claim("a toy claim", "K&K", "held", "diff +0.1 [+0.05, +0.15]", diff_mean=0.1,
                  diff_low=0.05, diff_high=0.15, n=10, half_width=0.05)  # fmt: skip
        out.write_md("# Toy\n\n| a |\n|---|\n| 1 |")
        return out.finish()

    toy = figures.register_figure(figures.Figure("toy_fig", "Toy — from the tests", 5, needs, run))
    try:
        ctx = _ctx(tmp_path)
        assert figures.expand(["all"])[-1] == "toy_fig" and "toy_fig" in figures.names()
        assert figures.report_order()[0] == "toy_fig"
        plan = plan_for(ctx, ["toy_fig"])
        assert [(r.setting, r.algo) for r in plan.runs.values()] == [("kk", "grpo")]
        registered = dict(figures.FIGURES)
        figures.FIGURES.clear()
        figures.FIGURES["toy_fig"] = toy  # `all` runs the toy alone here (no training)
        try:
            meta = run_all(ctx)
        finally:
            figures.FIGURES.update(registered)
        assert meta["scripts"] == ["toy_fig"]
        # the line `rlvr reproduce all` prints lists the claims of every script
        assert [(c["claim"], c["verdict"]) for c in meta["claims"]] == [("a toy claim", "held")]
        text = (tmp_path / "REPORT.md").read_text()
        assert "## Toy — from the tests" in text and "| a toy claim | K&K |" in text
        assert run_power(tmp_path, figures.report_order()) == 0
        assert "a toy claim" in capsys.readouterr().out
    finally:
        figures.FIGURES.pop("toy_fig")


def test_the_smoke_grid_trains_kk_and_math_on_digits_and_evaluates_on_their_own_task():
    from rlvr.config import ConfigError
    from rlvr.reproduce.runs import eval_config

    g = grid.tiny_grid(smoke=True)
    for key in ("kk", "math"):
        setting = g.settings[key]
        cfg = train_config(setting, "grpo_sg", 0)
        assert (setting.run_env, cfg.env) == ("digits", "digits")
        ecfg = eval_config(setting, cfg, cfg.model)
        assert ecfg.env == key and ecfg.env_kwargs == {"template": "plain"}  # none of digits'
    assert train_config(g.settings["searchqa"], "grpo", 0).env == "searchqa"
    with pytest.raises(ConfigError, match="settings.kk.train_env: 'nope' is not one of"):
        grid._setting("kk", {"env": "kk", "model": "micro", "train_env": "nope"}, {})


def test_the_report_counts_its_runs_per_kernel_mode():
    """A results folder whose records come from several sessions may mix kernel modes (16 of the
    smol grid's 18 runs ran native kernels): the report's header counts them and says so."""
    from rlvr.reproduce.report import runs_machines

    native = "Intel(R) Xeon(R) Processor (x86_64), native kernels, 1 thread(s)"
    held = "Intel(R) Xeon(R) Processor (x86_64), reproducible kernels, 1 thread(s)"
    (line,) = runs_machines([{"machine": native}] * 2 + [{"machine": held}, {"machine": ""}])
    assert line.startswith(f"- training runs: 2 x {native}; 1 x {held}")
    assert "mixed kernel modes" in line and "--retrain native` trains the others again" in line
    (line,) = runs_machines([{"machine": held}] * 3)
    assert line == f"- training runs: 3 x {held}"
    assert runs_machines([]) == []


def test_the_mechanism_curve_averages_what_runs_logged_without_a_warning():
    runs = [
        {"k": np.array([1.0, np.nan, np.nan, 4.0])},
        {"k": np.array([3.0, np.nan, 2.0, np.nan, 9.0])},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        curve = mechanism._mean_curve(runs, "k")
    assert curve[0] == 2.0 and np.isnan(curve[1]) and curve[2] == 2.0 and curve[3] == 4.0
    assert curve.shape == (4,)
    assert mechanism._mean_curve([{"k": np.array([])}], "k").size == 0


def test_compare_reads_an_earlier_report_s_claim_under_its_name_now():
    def row(claim, verdict):
        return {"claim": claim, "setting": "math", "verdict": verdict}

    old = [row("GRPO-SG has smoother gradient norms", "held")]
    old.append(
        row("GRPO-SG has smoother gradient norms (scale-free, beyond the paper)", "reversed")
    )
    new = [row(fig3.CV_CLAIM, "reversed"), row(fig3.STD_CLAIM, "underpowered")]
    rows = compare.compare_claims(old, new)
    assert [r[:4] for r in rows] == [
        [fig3.CV_CLAIM, "math", "reversed", "reversed"],
        [fig3.STD_CLAIM, "math", "held", "underpowered"],
    ]
    assert (
        rows[0][4]
        == "same (was: GRPO-SG has smoother gradient norms (scale-free, beyond the paper))"
    )
    assert rows[1][4] == "**held -> underpowered** (was: GRPO-SG has smoother gradient norms)"
    assert compare.summary_line(rows) == "1 of 2 verdicts changed"
    # an old report that already has the new name keeps both claims apart
    both = compare.compare_claims([*old, row(fig3.STD_CLAIM, "held")], new)
    assert [r[4] for r in both][1:] == ["**held -> underpowered**", "absent from the new report"]
