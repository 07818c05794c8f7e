"""A results folder keeps the records of its runs and evaluations (``rlvr.reproduce.archive``):
a fresh machine goes on from them, and what needs weights trains them again."""

from __future__ import annotations

import gzip
import json

import pytest

from rlvr.files import RecordError
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


@pytest.mark.slow
def test_a_reproduction_goes_on_from_its_folder_s_records_on_a_fresh_machine(
    tmp_path, monkeypatch, capsys
):
    """The pool keeps each finished run and evaluation in ``<out>/records``; a reproduction into
    the same folder with an empty run cache (another machine) trains and evaluates no RL run
    and writes the same figure."""
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
    capsys.readouterr()

    assert main([*argv, "--jobs", "1", "--cache", str(tmp_path / "there")]) == 0
    printed = capsys.readouterr().out
    assert "[reproduce] restored" in printed
    assert f"{len(meta['run_records']) - 1} of the" in printed  # every RL run; the SFT is no run
    rl = [line for line in printed.splitlines() if line.startswith("[reproduce] training")]
    assert rl == [], rl
    assert (out / "fig2.csv").read_text() == first

    # --check on that machine trains its sample again (the restored records have no weights) and
    # evaluates it again: a comparison, not the records read back.
    assert main(["reproduce", "--check", str(out), "--cache", str(tmp_path / "there")]) == 0
    printed = capsys.readouterr().out
    assert "came without weights" in printed and "trained now" in printed
    assert "bit-identical" in printed and "differs" not in printed
