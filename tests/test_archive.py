"""A results folder keeps the records of its runs and evaluations (``rlvr.reproduce.archive``):
a fresh machine goes on from them, and what needs weights trains them again."""

from __future__ import annotations

import gzip
import json

import pytest

from rlvr.cli import main
from rlvr.files import RecordError
from rlvr.models import accept
from rlvr.models import build as build_module
from rlvr.models.accept import AcceptConfig
from rlvr.repro import MODES
from rlvr.reproduce import archive, grid, runs


def _finished(cache):
    setting = grid.tiny_grid(smoke=True).settings["kk"]
    cfg = runs.train_config(setting, "grpo", 0)
    run = runs.ensure_run(cfg, cache, say=lambda m: None, progress=False)
    ecfg = runs.eval_config(setting, cfg, str(run.final), seed=0)
    ev = runs.ensure_eval(ecfg, cache, say=lambda m: None, progress=False)
    return cfg, run, ecfg, ev


def test_records_restore_a_finished_run_without_training_and_retrain_for_weights(
    tmp_path, monkeypatch
):
    here, there, out = tmp_path / "here", tmp_path / "there", tmp_path / "results"
    cfg, run, ecfg, ev = _finished(here)
    kept = archive.keep(run.path, out)
    assert archive.keep(ev.path, out) is not None
    names = sorted(p.name for p in kept.iterdir())
    assert "run.json.gz" in names and "metrics.jsonl.gz" in names
    assert not any("safetensors" in n or "checkpoint" in n for n in names)  # records, no weights
    packed = (kept / "run.json.gz").read_bytes()
    archive.keep(run.path, out)  # the same record gives the same bytes (no time stamp)
    assert (kept / "run.json.gz").read_bytes() == packed

    said: list[str] = []
    assert archive.restore(out, there, say=said.append) == 2
    assert "restored 2" in said[-1]
    assert archive.restore(out, there, say=said.append) == 0  # finished folders are left alone

    import rlvr.training.trainer as trainer_mod

    class NoTraining:
        def __init__(self, *a, **k):
            raise AssertionError("a restored run must not be trained for its records")

    with monkeypatch.context() as m:
        m.setattr(trainer_mod, "Trainer", NoTraining)
        again = runs.ensure_run(cfg, there, say=lambda m: None, progress=False)
        ev_again = runs.ensure_eval(ecfg, there, say=lambda m: None, progress=False)
    assert again.metrics == run.metrics and again.weights_sha256 == run.weights_sha256
    assert not again.final.exists()
    assert ev_again.summary == ev.summary and ev_again.records == ev.records

    # What needs the weights trains the run again from its first step: the same bits.
    said.clear()
    trained = runs.ensure_run(cfg, there, say=said.append, progress=False, weights=True)
    assert any("came without weights" in s for s in said)
    from rlvr.repro import weights_sha256

    assert weights_sha256(trained.final) == run.weights_sha256
    strip = trainer_mod.strip_time
    assert strip(trained.metrics) == strip(run.metrics)


def test_restore_replaces_an_interrupted_run_and_refuses_a_bad_record(tmp_path):
    here, there, out = tmp_path / "here", tmp_path / "there", tmp_path / "results"
    _, run, _, _ = _finished(here)
    archive.keep(run.path, out)
    partial = runs.run_path(there, run.key)
    (partial / "checkpoints" / "step_00000001").mkdir(parents=True)
    (partial / "metrics.jsonl").write_text('{"step": 1}\n')
    assert archive.restore(out, there, say=lambda m: None) == 1
    assert not (partial / "checkpoints").exists()
    assert runs.read_metrics(partial / "metrics.jsonl") == run.metrics

    (out / archive.RECORDS / "runs" / run.key / "final.gz").write_bytes(gzip.compress(b"x"))
    elsewhere = tmp_path / "elsewhere0"
    assert archive.restore(out, elsewhere, say=lambda m: None) == 1
    assert not (runs.run_path(elsewhere, run.key) / "final").exists()  # record files only

    bad = out / archive.RECORDS / "runs" / ("0" * 12)
    bad.mkdir(parents=True)
    (bad / "run.json.gz").write_bytes(b"not gzip")
    with pytest.raises(RecordError, match="not a readable gzip record"):
        archive.restore(out, tmp_path / "elsewhere", say=lambda m: None)
    (bad / "run.json.gz").write_bytes(gzip.compress(b" " * (archive.MAX_UNPACKED_BYTES + 1)))
    with pytest.raises(RecordError, match="unpacked"):
        archive.restore(out, tmp_path / "elsewhere2", say=lambda m: None)


def test_a_run_trained_again_to_other_weights_drops_its_restored_evaluations(tmp_path):
    """Evaluation keys name a run, not its weights: when a restored run trained again here does
    not give the weights its records name (another machine's kernels), its restored evaluations
    are made again."""
    here, there, out = tmp_path / "here", tmp_path / "there", tmp_path / "results"
    cfg, run, ecfg, ev = _finished(here)
    archive.keep(run.path, out)
    archive.keep(ev.path, out)
    archive.restore(out, there, say=lambda m: None)
    record = runs.run_path(there, run.key) / runs.DONE
    record.write_text(json.dumps({**json.loads(record.read_text()), "weights_sha256": "0" * 64}))
    assert runs.is_done(runs.eval_path(there, ecfg))
    said: list[str] = []
    runs.ensure_run(cfg, there, say=said.append, progress=False, weights=True)
    assert any("weights differ" in s and "1 restored evaluation(s)" in s for s in said), said
    assert not runs.eval_path(there, ecfg).exists()


def test_runs_of_a_kernel_mode_are_forgotten_with_their_evaluations_and_records(tmp_path):
    """``rlvr reproduce ... --retrain native``: a run whose record says that mode goes, with its
    evaluations and the records of both (a restore would bring the old bits back), and trains
    again; runs of other modes stay; the command refuses the mode it runs itself."""
    cache, out = tmp_path / "cache", tmp_path / "results"
    cfg, run, ecfg, ev = _finished(cache)
    archive.keep(run.path, out)
    archive.keep(ev.path, out)
    kept = out / archive.RECORDS
    summary = json.loads(
        gzip.decompress((kept / "evals" / ev.key / "summary.json.gz").read_bytes())
    )
    for key, machine in (("base", summary["machine"]), ("older", None)):
        # a base's evaluation, and one recorded before evaluations named their machine
        (kept / "evals" / key).mkdir()
        base = {**summary, "config": {**summary["config"], "model": "tiny-kk"}, "machine": machine}
        (kept / "evals" / key / "summary.json.gz").write_bytes(
            gzip.compress(json.dumps(base).encode())
        )
    mode = run.info["machine"]["kernel_mode"]  # the mode this test process runs
    other = next(m for m in MODES if m != mode)
    assert archive.retrain_mode(out, cache, [run.key], other, say=lambda m: None) == []
    assert runs.is_done(run.path) and runs.is_done(ev.path)

    said: list[str] = []
    assert archive.retrain_mode(out, cache, [run.key], mode, say=said.append) == [run.key, "base"]
    assert f"the {mode} kernel mode: 1 evaluation(s) and its records removed" in said[0]
    assert not runs.is_done(run.path) and not ev.path.exists()
    assert not (kept / "runs" / run.key).exists()
    assert [p.name for p in (kept / "evals").iterdir()] == ["older"]
    assert archive.restore(out, cache, say=lambda m: None) == 1  # "older" only: no old bits back
    assert not runs.is_done(run.path)
    again = runs.ensure_run(cfg, cache, say=lambda m: None, progress=False)
    assert again.weights_sha256 == run.weights_sha256  # trained again, in the same mode here

    with pytest.raises(SystemExit, match=f"--retrain {mode}: this process runs the {mode}"):
        main(["reproduce", "fig2", "--smoke", "--retrain", mode, "--out", str(out)])


@pytest.mark.slow
def test_a_reproduction_goes_on_from_its_folder_s_records_on_a_fresh_machine(
    tmp_path, monkeypatch, capsys
):
    """The pool keeps each finished run, evaluation and continued-SFT reference in
    ``<out>/records``; a reproduction into the same folder with an empty run cache (another
    machine) trains no RL run and no reference, and writes the same figure."""
    from rlvr.cli import main
    from rlvr.reproduce import cli

    def with_records(name, smoke=False):
        g = grid.get_grid(name, smoke=smoke)
        g.records = True
        return g

    monkeypatch.setattr(cli, "get_grid", with_records)
    out = tmp_path / "results"
    argv = ["reproduce", "fig2", "--smoke", "--out", str(out), "--quiet"]
    assert main([*argv, "--jobs", "2", "--cache", str(tmp_path / "here")]) == 0
    first = (out / "fig2.csv").read_text()
    kept = {p.name for p in (out / archive.RECORDS / "runs").iterdir()}
    meta = json.loads((out / "fig2.meta.json").read_text())
    rl_keys = {r["key"] for label, r in meta["run_records"].items() if "/sft/" not in label}
    assert rl_keys and rl_keys <= kept
    assert list((out / archive.RECORDS / "sft").iterdir())  # the continued-SFT reference's record
    capsys.readouterr()

    assert main([*argv, "--jobs", "1", "--cache", str(tmp_path / "there")]) == 0
    printed = capsys.readouterr().out
    assert "[reproduce] restored" in printed
    assert f"{len(meta['run_records']) - 1} of the" in printed  # every RL run; the SFT is no run
    made = [
        line
        for line in printed.splitlines()
        if line.startswith(("[reproduce] training", "[reproduce] continued SFT"))
    ]
    assert made == [], made  # no RL run, no continued SFT: their records are here
    assert (out / "fig2.csv").read_text() == first

    # --check on that machine trains its sample again (the restored records have no weights) and
    # evaluates it again: a comparison, not the records read back.
    assert main(["reproduce", "--check", str(out), "--cache", str(tmp_path / "there")]) == 0
    printed = capsys.readouterr().out
    assert "came without weights" in printed and "trained now" in printed
    assert "bit-identical" in printed and "differs" not in printed

    # Figure 1 reads a run's weights, not only its evaluation: from the records alone (a third
    # machine) it trains that run again first instead of failing on the missing weights.
    fig1 = ["reproduce", "fig1", "--smoke", "--out", str(out), "--quiet", "--jobs", "1"]
    assert main([*fig1, "--cache", str(tmp_path / "third")]) == 0
    assert "came without weights" in capsys.readouterr().out
    assert (out / "fig1.png").exists()


def test_a_base_s_record_is_kept_and_restored_and_its_weights_built_again(tmp_path, capsys):
    """A tiny base's ``build.json`` travels in the records (it names the base's weights and sizes
    its continued SFT); training on it here builds it again, to the recorded weights."""
    from test_models import micro_build_config

    from rlvr.models.build import built, ensure_built, has_weights

    cfg = micro_build_config()
    here = ensure_built(cfg, home=tmp_path / "here" / "models", progress=False)
    out = tmp_path / "results"
    kept = archive.keep(here, out)
    assert sorted(p.name for p in kept.iterdir()) == ["build.json.gz"]  # the record, no model
    there = tmp_path / "there" / "models"
    assert archive.restore(out, tmp_path / "there", models=there, say=lambda m: None) == 1
    folder = there / here.name
    assert built(folder) == built(here) and not has_weights(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["build.json"]

    capsys.readouterr()
    assert ensure_built(cfg, home=there, progress=True) == folder
    printed = capsys.readouterr().out
    assert "came without weights: building it again" in printed
    assert "other weights" not in printed
    assert has_weights(folder) and built(folder)["weights_sha256"] == built(here)["weights_sha256"]

    # a record another machine's kernels wrote: the build here says its weights differ
    elsewhere = tmp_path / "elsewhere" / "models"
    archive.restore(out, tmp_path / "elsewhere", models=elsewhere, say=lambda m: None)
    record = elsewhere / here.name / "build.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "weights_sha256": "0" * 64}))
    ensure_built(cfg, home=elsewhere, progress=False)
    assert "built again to other weights than its record" in capsys.readouterr().out


def test_a_restored_base_builds_only_the_draw_its_record_kept(tmp_path, monkeypatch, capsys):
    """A base record that lists rejected draws (tiny-kk@4: four, about 1.5 h of one core) is
    built again from its kept draw alone when those draws were built in this kernel mode, to the
    recorded weights; a record from other kernels has every draw built again."""
    from test_models import micro_build_config

    real = build_module.machine_info  # the records say "held", and so does this process
    monkeypatch.setattr(build_module, "machine_info", lambda: {**real(), "kernel_mode": "held"})
    monkeypatch.setattr(build_module, "running_mode", lambda: "held")
    cfg = micro_build_config(accept=AcceptConfig(draws=3, groups=(2, 3), items=2))
    scores = iter([0.0, 0.5, 0.5, 0.0, 0.5])  # here: draws 0, 1; there: 1; elsewhere: 0, 1

    def scripted(*args, **kwargs):  # the check's greedy scores, one per draw built
        accuracy = next(scores)
        return [{"group": f"kk{size}", "accuracy": accuracy} for size in (2, 3)]

    monkeypatch.setattr(accept, "evaluate_base", scripted)
    here = build_module.ensure_built(cfg, home=tmp_path / "here" / "models", progress=False)
    record = build_module.built(here)
    assert [t["draw"] for t in record["rejected"]] == [0]
    out = tmp_path / "results"
    assert archive.keep(here, out)

    there = tmp_path / "there" / "models"
    archive.restore(out, tmp_path / "there", models=there, say=lambda m: None)
    capsys.readouterr()
    folder = build_module.ensure_built(cfg, home=there, progress=True)
    printed = capsys.readouterr().out
    assert "lists 1 rejected draw(s), built in this kernel mode: not built again" in printed
    assert "other weights" not in printed
    again = build_module.built(folder)
    assert again["weights_sha256"] == record["weights_sha256"]
    assert again["rejected"] == record["rejected"]

    elsewhere = tmp_path / "elsewhere" / "models"
    archive.restore(out, tmp_path / "elsewhere", models=elsewhere, say=lambda m: None)
    other = elsewhere / here.name / "build.json"
    kept = json.loads(other.read_text())
    other.write_text(json.dumps({**kept, "machine": {**kept["machine"], "kernel_mode": "native"}}))
    folder = build_module.ensure_built(cfg, home=elsewhere, progress=False)
    assert build_module.built(folder)["weights_sha256"] == record["weights_sha256"]
    assert next(scores, "all used") == "all used"  # draw 0 was built and checked again


def test_a_continued_sft_reference_is_restored_from_its_record_and_trained_again_for_weights(
    tmp_path, monkeypatch
):
    from rlvr.reproduce import sft_reference

    here, there, out = tmp_path / "here", tmp_path / "there", tmp_path / "results"
    setting = grid.tiny_grid(smoke=True).settings["kk"]
    cfg = runs.train_config(setting, "grpo", 0)

    def reference(cache, **kw):
        return sft_reference.ensure_sft_reference(
            setting, 0, 2000, cache, say=kw.pop("say", lambda m: None), progress=False, **kw
        )

    path = reference(here)
    ev = runs.ensure_eval(runs.eval_config(setting, cfg, str(path), seed=0), here, progress=False)
    assert sorted(p.name for p in archive.keep(path, out).iterdir()) == ["sft.json.gz"]
    archive.keep(ev.path, out)
    assert archive.restore(out, there, say=lambda m: None) == 2

    def no_sft(*a, **k):
        raise AssertionError("a restored reference must not be trained for its record")

    with monkeypatch.context() as m:
        m.setattr(sft_reference, "_continued_sft", no_sft)
        restored = reference(there)
        ecfg = runs.eval_config(setting, cfg, str(restored), seed=0)
        assert runs.eval_path(there, ecfg).name == ev.key  # the same evaluation key
        assert runs.ensure_eval(ecfg, there, progress=False).summary == ev.summary
    assert restored.name == path.name and not list(restored.glob("*.safetensors"))

    said: list[str] = []
    again = reference(there, weights=True, say=said.append)
    assert any("came without weights" in s for s in said), said
    recorded = json.loads((path / "sft.json").read_text())["weights_sha256"]
    assert json.loads((again / "sft.json").read_text())["weights_sha256"] == recorded
    assert runs.is_done(runs.eval_path(there, ecfg))  # the same weights: evaluation kept


def test_the_pool_builds_a_missing_base_first_with_its_work_behind_it(tmp_path, monkeypatch):
    """Base by base: a base without weights is built in the pool with its own runs and
    evaluations as follow-ups, bases in seed order; a single one left to build is built before
    the pool, as the main job always did; a base whose work is all finished (restored records)
    is not built at all."""
    from rlvr.models.presets import preset_config
    from rlvr.reproduce import pool
    from rlvr.reproduce.common import Context
    from rlvr.reproduce.figures import plan_for
    from rlvr.reproduce.keys import model_identity

    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    ctx = Context(grid.tiny_grid(), tmp_path / "out", tmp_path / "cache", [0], base_seeds=[0, 1])
    ctx.plan = plan_for(ctx, ["fig2"])
    queued: list = []
    monkeypatch.setattr(pool, "_pool_map", lambda ctx, jobs, tasks, *a, **k: queued.extend(tasks))

    pool.prefetch(ctx, ctx.plan, 2)
    builds = [(args[0], then) for fn, args, then in queued if fn is pool._build]
    assert [m for m, _ in builds] == [m for m, _ in sorted(builds, key=lambda b: b[0])]
    assert len(builds) == len(queued) >= 2  # nothing built: every task waits behind its base
    assert builds[0][0] == "tiny-kk" and builds[-1][0].endswith("@1")
    for model, then in builds:
        trained = [args[0].model for fn, args, _ in then if fn is pool._train]
        assert trained and set(trained) == {model}

    base = tmp_path / "home" / "models" / model_identity(builds[0][0])
    base.mkdir(parents=True)
    (base / "build.json").write_text(json.dumps({"weights_sha256": "0" * 64}))
    (base / "model.safetensors").write_bytes(b"")
    built_here: list = []
    monkeypatch.setattr(
        pool, "ensure_built", lambda cfg, progress: built_here.append(cfg) or tmp_path / "x"
    )
    queued.clear()
    pool.prefetch(ctx, ctx.plan, 2)
    # one base left to build: built before the pool starts, with its progress shown
    assert [cfg.seed for cfg in built_here] == [preset_config(builds[1][0]).seed]
    assert not [t for t in queued if t[0] is pool._build] and len(queued) > 2

    monkeypatch.setattr(pool, "is_done", lambda folder: True)
    queued.clear()
    pool.prefetch(ctx, ctx.plan, 2)
    assert not [t for t in queued if t[0] is pool._build]
