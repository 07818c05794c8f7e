"""Fast tests of the reproduce pieces: spikes, claims, run keys, the paper plan, the report."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rlvr.agents.algorithms import algorithm_names
from rlvr.reproduce import collect, fig3, fig4, grid, report
from rlvr.reproduce.common import Context, Output
from rlvr.reproduce.figures import plan_for
from rlvr.reproduce.runs import run_key, train_config


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
    verdicts = [c["verdict"] for c in out.claims]
    assert verdicts == ["held", "reversed", "inconclusive", "held"]
    assert "floor/ceiling" in out.claims[2]["evidence"]
    collect.paired_seed_claim(out, "smoother", "K&K", [2.0, 2.1, 2.2], [1.0, 1.05, 1.1], "std")
    collect.paired_seed_claim(out, "one seed", "K&K", [2.0], [1.0], "std")
    assert [c["verdict"] for c in out.claims[-2:]] == ["held", "inconclusive"]


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
    rows = {r["setting"]: r for r in grid.plan_rows(p)}
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
    out.finish()
    text = report.write_report(ctx).read_text()
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
    from rlvr.reproduce import runs

    setting = grid.tiny_grid().settings["kk"]
    cfg = train_config(setting, "grpo", 0)
    ecfg = runs.eval_config(setting, cfg, setting.model)
    runs._preset_build_key.cache_clear()
    before = run_key(cfg), runs.eval_key(ecfg)
    changed = dataclasses.replace(
        presets.PRESETS["tiny-kk"], seed=presets.PRESETS["tiny-kk"].seed + 1
    )
    monkeypatch.setitem(presets.PRESETS, "tiny-kk", changed)
    runs._preset_build_key.cache_clear()
    try:
        after = run_key(cfg), runs.eval_key(ecfg)
    finally:
        runs._preset_build_key.cache_clear()
    assert before[0] != after[0] and before[1] != after[1]
    # A path or hub name is hashed as given.
    assert runs.model_identity("/some/dir") == "/some/dir"


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
    assert [c["setting"] for c in claims] == ["K&K"] * 3 + ["K&K, micro"] * 3
    assert "grpo_sg_minus_grpo" in result and "grpo_sg_minus_grpo[kk-b]" in result
    rows = list(csv.DictReader(open(tmp_path / "out" / "table_kk.csv")))
    assert {r["model"] for r in rows} == {"micro"} and len(rows) % 2 == 0


def test_report_includes_changes_and_compare_reads_verdicts_back(tmp_path, capsys):
    from rlvr.cli import main
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
    assert [r[4] for r in rows] == ["**inconclusive -> held**", "same"]
    assert main(["reproduce", "--compare", str(tmp_path / "old"), str(new)]) == 0
    assert "1 of 2 verdicts changed" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no report"):
        read_claims(tmp_path / "missing")
