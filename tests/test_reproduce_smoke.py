"""The run cache (reuse, resume) and ``rlvr reproduce all --smoke`` end to end."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest

from rlvr.reproduce import grid, runs


def test_run_cache_reuses_and_resumes(tmp_path, monkeypatch):
    setting = grid.tiny_grid(smoke=True).settings["kk"]
    cfg = runs.train_config(setting, "grpo", 0)
    first = runs.ensure_run(cfg, tmp_path, say=lambda m: None, progress=False)
    assert (first.path / runs.DONE).exists() and (first.final / "config.json").exists()
    assert len(first.metrics) == cfg.steps == 2
    # A finished run keeps its weights, metrics and record, not its checkpoints.
    assert not (first.path / "checkpoints").exists()
    with monkeypatch.context() as m:  # the same run again, checkpoints kept, to interrupt below
        m.setattr(runs, "drop_checkpoints", lambda path: None)
        shutil.rmtree(first.path)
        first = runs.ensure_run(cfg, tmp_path, say=lambda m: None, progress=False)
    assert (first.path / "checkpoints" / "step_00000001").exists()

    import rlvr.training.trainer as trainer_mod

    class NoTraining:
        def __init__(self, *a, **k):
            raise AssertionError("a cached run must not be trained again")

    with monkeypatch.context() as m:
        m.setattr(trainer_mod, "Trainer", NoTraining)
        again = runs.ensure_run(cfg, tmp_path, say=lambda m: None)
    assert again.key == first.key and again.metrics == first.metrics

    # Interrupt after step 1: no completion marker, no final model, no step-2 checkpoint.
    (first.path / runs.DONE).unlink()
    shutil.rmtree(first.final)
    for ckpt in (first.path / "checkpoints").glob("step_00000002*"):
        shutil.rmtree(ckpt)
    said = []
    resumed = runs.ensure_run(cfg, tmp_path, say=said.append, progress=False)
    assert "resuming" in said[0]
    strip = trainer_mod.strip_time
    assert strip(resumed.metrics) == strip(first.metrics)


EXPECTED = {
    "curve": (".md",),
    "fig1": (".png", ".csv"),
    "fig2": (".png", ".csv", ".md"),
    "fig3": (".png", ".csv", "_variability.csv"),
    "fig4": (".png", ".csv"),
    "mechanism": (".png", ".csv", ".md"),
    "table_kk": (".md", ".csv"),
    "table_math": (".md", ".csv"),
    "table_qa": (".md", ".csv"),
    "sweep": (".png", ".csv", ".md"),
}


@pytest.mark.slow
def test_reproduce_all_smoke(tmp_path):
    from rlvr.cli import main

    out = tmp_path / "results"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "0123456789ab.yaml").write_text("from: an earlier reproduction\n")
    assert main(["reproduce", "all", "--smoke", "--out", str(out), "--quiet"]) == 0
    for name, suffixes in EXPECTED.items():
        for suffix in (*suffixes, ".meta.json"):
            path = out / f"{name}{suffix}"
            assert path.exists() and path.stat().st_size > 0, path
    text = (out / "REPORT.md").read_text()
    for name in EXPECTED:
        assert f"]({name}" in text
    # the mechanism figure reads what every run logged: weights, kept mass, calibrated values
    mechanism = (out / "mechanism.md").read_text()
    assert "| GRPO-SG | alpha " in mechanism and "| TR-GRPO | alpha " in mechanism
    assert "GRPO-SG beats GRPO" in text and "Smoke run" in text
    # Every setting's prompt settings are in its figures' records and in the report (issue 54).
    meta = json.loads((out / "fig2.meta.json").read_text())
    assert meta["prompt_formats"]["kk"]["template"] == "plain"
    assert "## Prompt formats" in text and "| kk | `template='plain'" in text
    # --jobs relies on required_runs listing every run the scripts trained, and nothing more.
    from rlvr.reproduce import grid
    from rlvr.reproduce.common import Context
    from rlvr.reproduce.keys import run_key
    from rlvr.reproduce.parallel import required_runs
    from rlvr.reproduce.runs import train_config

    g = grid.tiny_grid(smoke=True)
    ctx = Context(g, out, out / ".cache", [0], smoke=True)
    planned = {
        run_key(train_config(g.settings[k], algo, seed, extra, base_seed=b))
        for (k, algo, extra), units in required_runs(ctx, ["all"])
        for b, seed in units
    }
    trained = {p.name for p in (out / ".cache" / "runs").iterdir()}
    assert planned == trained
    index = (out / "runs.csv").read_text().splitlines()
    assert len(index) == 1 + len(trained)
    assert {p.stem for p in (out / "runs").glob("*.yaml")} == trained  # stale configs removed
    # The smoke profile evaluates only at the end: the curve figure says there is no curve.
    assert "No held-out curve" in (out / "curve.md").read_text()

    # A grid that trains fewer methods on fewer tasks (the smol grid: GRPO, GRPO-SG, TR-GRPO on
    # K&K and math) shows only those, decides only the claims between two of them, and says
    # which table it has no task for; from the same cache, so nothing is trained again.
    from rlvr.reproduce.figures import FIGURES, plan_for
    from rlvr.reproduce.report import write_report

    settings = {k: v for k, v in g.settings.items() if k != "searchqa"}
    assert len(settings) < len(g.settings)
    few = dataclasses.replace(g, methods=["grpo", "grpo_sg"], sweep={}, settings=settings)
    ctx = Context(few, tmp_path / "few", out / ".cache", [0], smoke=True)
    ctx.plan = plan_for(ctx, ["all"])
    metas = {n: FIGURES[n].run(ctx) for n in FIGURES}
    assert "GRPO-SG beats GRPO" in write_report(ctx).read_text()
    assert {p.name for p in (out / ".cache" / "runs").iterdir()} == trained
    kk = (tmp_path / "few" / "table_kk.md").read_text()
    rows = {line.split("|")[1].strip() for line in kk.splitlines() if line.startswith("| ")}
    assert {"GRPO", "GRPO-SG"} <= rows and not rows & {"Lopti", "AR", "TR-GRPO", "Reverse"}
    claims = [c["claim"] for m in metas.values() for c in m["claims"]]
    assert "GRPO-SG beats GRPO" in claims
    assert not [c for c in claims if "TR-GRPO" in c or "Reverse" in c]
    assert "| GRPO-SG | alpha " in (tmp_path / "few" / "mechanism.md").read_text()
    qa = (tmp_path / "few" / "table_qa.md").read_text()
    assert "no `searchqa` setting" in qa and not metas["table_qa"]["claims"]


@pytest.mark.slow
def test_reproduce_jobs_prefetches_everything(tmp_path, capsys):
    """With --jobs 2 the worker processes train and evaluate; the script then finds it all
    cached."""
    from rlvr.cli import main

    out = tmp_path / "results"
    assert main(["reproduce", "fig2", "--smoke", "--jobs", "2", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "on 2 processes" in printed
    assert re.search(r" \[1 of \d+, 0\.\d h\]\n", printed)  # --quiet: what a bar would say
    # the smoke grid trains its K&K setting on digits (train_env), evaluated on K&K
    assert "trained digits/grpo_sg seed 0" in printed and "continued SFT seed 0" in printed
    # The script itself trained and evaluated nothing: ensure_* only announce work they do.
    after_prefetch = printed.split("[reproduce] evaluated")[-1]
    assert (
        "[reproduce] training" not in after_prefetch
        and "[reproduce] evaluating" not in after_prefetch
    )
    assert (out / "fig2.png").exists()
    # The report's wall time is the invocation's, prefetch included (it once said 0.0 min for a
    # 44-minute main job, because only the script's own time, after the prefetch, was counted).
    seconds = json.loads(printed.strip().splitlines()[-1])["seconds"]
    report = (out / "REPORT.md").read_text()
    minutes = float(re.search(r"this invocation ([0-9.]+) min of wall time", report)[1])
    assert minutes * 60 >= seconds - 3.1  # the report rounds to 0.1 min
