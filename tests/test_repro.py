"""The reproducible kernel mode, machine records, weight hashes, base seeds, equal compute in
tokens, hierarchical intervals and ``rlvr reproduce --check``."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlvr import repro
from rlvr.eval.stats import bootstrap_ci, hierarchical_bootstrap_ci
from rlvr.repro import REPRODUCIBLE_ENV, is_x86, state_dict_sha256, weights_sha256

from _rlvr_toys import letter_trainer

REPO = Path(__file__).resolve().parents[1]


def _rlvr(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """``python -m rlvr.cli ...`` in a fresh process (the kernel libraries read their variables
    when torch loads, so only a new process shows whether the mode was applied)."""
    base = {k: v for k, v in os.environ.items() if k not in (*REPRODUCIBLE_ENV, "RLVR_KERNELS")}
    base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd or REPO,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _has_avx2() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return is_x86() and cpuinfo.exists() and " avx2" in cpuinfo.read_text()


def _python(code: str) -> str:
    """``python -c code`` in a fresh process with no kernel variables set."""
    base = {k: v for k, v in os.environ.items() if k not in (*REPRODUCIBLE_ENV, "RLVR_KERNELS")}
    base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", code], env=base, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


@pytest.mark.skipif(not _has_avx2(), reason="the reproducible mode needs x86 with AVX2")
def test_a_script_that_never_set_the_mode_is_told_before_it_trains():
    """A script that imports rlvr and trains without ``apply_kernel_mode`` runs native kernels
    (16 of the smol grid's 18 runs did, unnoticed): ``kernel_mode_note`` names it (every
    ``Trainer`` says it before it loads a model); once set, it is silent."""
    note = "from rlvr.repro import kernel_mode_note; print(repr(kernel_mode_note()))"
    assert "runs native kernels, not the reproducible mode" in _python(note)
    applied = "from rlvr.repro import apply_kernel_mode; apply_kernel_mode(); " + note
    assert _python(applied) == "''"


@pytest.mark.skipif(not _has_avx2(), reason="the reproducible mode needs x86 with AVX2")
def test_a_trainer_says_it_before_it_trains(tmp_path, monkeypatch, capsys):
    """The note comes from ``Trainer`` itself (its preflight), so a script that builds one without
    the grid's helpers is told too; what the note detects is the test above's."""
    monkeypatch.delenv("RLVR_KERNELS", raising=False)
    monkeypatch.setattr(repro, "_warned_late", False)  # no command in this process said it yet
    monkeypatch.setattr(repro, "effective_mode", lambda: "native")  # whatever this process runs
    letter_trainer(tmp_path / "run")
    assert "runs native kernels, not the reproducible mode" in capsys.readouterr().err


def test_the_command_imports_no_torch_before_it_sets_the_mode():
    code = "import sys, rlvr.cli; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(not _has_avx2(), reason="the reproducible mode holds x86 kernels to AVX2")
def test_the_mode_overrides_the_requested_capability_and_reaches_workers():
    info = json.loads(_rlvr("machine", "--worker", env={"ATEN_CPU_CAPABILITY": "default"}))
    for who in (info, info["worker"]):  # the CLI process and a spawned worker
        assert who["kernel_mode"] == "reproducible"
        assert who["aten_cpu_capability"] == "AVX2"
        assert who["env"] == REPRODUCIBLE_ENV
    native = json.loads(
        _rlvr("--kernels", "native", "machine", env={"ATEN_CPU_CAPABILITY": "default"})
    )
    assert native["kernel_mode"] == "native" and native["aten_cpu_capability"] == "DEFAULT"
    also_native = json.loads(
        _rlvr("machine", env={"RLVR_KERNELS": "native", "ATEN_CPU_CAPABILITY": "default"})
    )
    assert also_native["aten_cpu_capability"] == "DEFAULT"


@pytest.mark.skipif(not _has_avx2(), reason="the reproducible mode holds x86 kernels to AVX2")
def test_a_reproduction_records_the_mode_the_machine_and_the_hashes(tmp_path):
    out = tmp_path / "out"
    _rlvr(
        "reproduce",
        "fig1",
        "--smoke",
        "--out",
        str(out),
        "--quiet",
        env={"RLVR_HOME": str(tmp_path / "home")},
        cwd=tmp_path,
    )
    meta = json.loads((out / "fig1.meta.json").read_text())
    assert meta["machine"]["kernel_mode"] == "reproducible"
    assert meta["machine"]["aten_cpu_capability"] == "AVX2"
    ((label, record),) = meta["run_records"].items()
    assert label == "kk/grpo/seed0"
    run_dir = out / ".cache" / "runs" / record["key"]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["machine"]["kernel_mode"] == "reproducible"
    assert info["weights_sha256"] == record["weights_sha256"] == weights_sha256(run_dir / "final")
    assert info["update_tokens"] > 0
    (row,) = csv.DictReader(open(out / "runs.csv"))
    assert row["weights_sha256"] == record["weights_sha256"]
    assert "reproducible kernels" in row["machine"]
    assert "machine:" in (out / "REPORT.md").read_text()
    assert not (tmp_path / "results").exists()  # nothing written outside --out
    # --check retrains the recorded run in a fresh cache: on the same machine, the same bits.
    report = _rlvr(
        "reproduce",
        "--check",
        str(out),
        "--cache",
        str(tmp_path / "fresh"),
        "--quiet",
        env={"RLVR_HOME": str(tmp_path / "home")},
        cwd=tmp_path,
    )
    assert (tmp_path / "fresh" / "runs" / record["key"] / "run.json").exists()
    verdicts = [
        line.rsplit("|", 2)[-2].strip()
        for line in report.splitlines()
        if line.startswith("| kk/grpo/seed0")
    ]
    assert verdicts and set(verdicts) == {"bit-identical"}, report


def test_a_calibrated_run_records_its_values_and_check_compares_them(tmp_path):
    """GRPO-SG's calibrated alpha, tau and mu go to run.json and the figure's run records;
    ``--check`` retrains the run and compares them (the same machine: the same bits)."""
    out, home = tmp_path / "out", {"RLVR_HOME": str(tmp_path / "home")}
    _rlvr("reproduce", "fig4", "--smoke", "--out", str(out), "--quiet", env=home, cwd=tmp_path)
    meta = json.loads((out / "fig4.meta.json").read_text())
    record = meta["run_records"]["kk/grpo_sg/seed0"]
    assert set(record["calibration"]) == {"alpha", "tau", "mu"}
    info = json.loads((out / ".cache" / "runs" / record["key"] / "run.json").read_text())
    assert info["calibration"]["values"] == record["calibration"]
    assert "calibration" not in meta["run_records"]["kk/grpo/seed0"]
    fresh = ["--cache", str(tmp_path / "fresh"), "--quiet"]
    report = _rlvr(
        "reproduce", "--check", str(out), "--sample", "4", *fresh, env=home, cwd=tmp_path
    )
    rows = [line for line in report.splitlines() if line.startswith("| kk/grpo_sg/seed0")]
    calibrated = [r for r in rows if "calibrated" in r]
    assert len(calibrated) == 3 and all(r.rstrip(" |").endswith("bit-identical") for r in rows)


def test_the_default_output_folder_is_not_the_committed_one(tmp_path, monkeypatch):
    from rlvr.reproduce import cli

    monkeypatch.chdir(tmp_path)
    captured = {}
    monkeypatch.setattr(cli, "has_gpu", lambda: False)
    monkeypatch.setattr(
        cli, "print_plan", lambda ctx, name: captured.setdefault("out", ctx.out) and 0
    )
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_reproduce_arguments(parser)
    cli.run_reproduce(parser.parse_args(["fig2", "--grid", "paper"]))
    assert captured["out"] == Path("rlvr-results/paper")


def test_state_dict_hash_is_stable_and_sees_one_bit():
    a = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.zeros(3)}
    reordered = {"b": a["b"].clone(), "w": a["w"].clone()}
    assert state_dict_sha256(a) == state_dict_sha256(reordered)
    flipped = {"w": a["w"].clone(), "b": a["b"].clone()}
    flipped["w"].view(torch.int32)[0, 1] ^= 1  # the last mantissa bit of one weight
    assert state_dict_sha256(a) != state_dict_sha256(flipped)
    assert state_dict_sha256(a) != state_dict_sha256({"w": a["w"].double(), "b": a["b"]})


def test_saved_weights_hash_like_the_state_dict(tmp_path):
    from rlvr.models import load_model

    model, _ = load_model("micro", seed=3)
    model.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "model.safetensors"))
    assert weights_sha256(tmp_path) == state_dict_sha256(saved)
    other, _ = load_model("micro", seed=4)
    other.save_pretrained(tmp_path / "other")
    assert weights_sha256(tmp_path) != weights_sha256(tmp_path / "other")


def test_base_seeds_name_other_builds_of_one_recipe():
    from rlvr.models.presets import PRESETS, base_spec, parse_spec, preset_config
    from rlvr.reproduce import grid
    from rlvr.reproduce.keys import model_identity, run_key
    from rlvr.reproduce.runs import train_config

    assert parse_spec("tiny-kk") == ("tiny-kk", 0) and parse_spec("tiny-kk@2") == ("tiny-kk", 2)
    assert parse_spec("micro") is None and parse_spec("Qwen/Qwen2.5-3B") is None
    with pytest.raises(ValueError, match="non-negative integer"):
        parse_spec("tiny-kk@x")
    assert preset_config("tiny-kk") is PRESETS["tiny-kk"]
    assert preset_config("tiny-kk@2").seed == PRESETS["tiny-kk"].seed + 2
    assert preset_config("tiny-kk@2").tokenizer == PRESETS["tiny-kk"].tokenizer
    assert base_spec("tiny-kk", 0) == "tiny-kk" and base_spec("tiny-kk", 1) == "tiny-kk@1"
    assert model_identity("tiny-kk@1").startswith("tiny-kk-")
    assert model_identity("tiny-kk@1") != model_identity("tiny-kk")
    setting = grid.tiny_grid().settings["kk"]
    base0 = train_config(setting, "grpo", 0)
    assert base0.model == "tiny-kk" and run_key(base0) == run_key(
        train_config(setting, "grpo", 0, base_seed=0)
    )
    assert run_key(train_config(setting, "grpo", 0, base_seed=1)) != run_key(base0)
    micro = grid.tiny_grid(smoke=True).settings["kk"]
    with pytest.raises(ValueError, match="not a tiny preset"):
        train_config(micro, "grpo", 0, base_seed=1)


def test_equal_compute_is_counted_in_update_tokens():
    from rlvr.reproduce import grid
    from rlvr.reproduce.runs import train_config, update_tokens

    trained = [1234, 987, 4321]
    seconds = [0.731, 1.9, 0.0123]
    metrics = [
        {"perf/update_tokens_s": n / t, "time/update_s": t} for n, t in zip(trained, seconds)
    ]
    assert update_tokens(metrics) == sum(trained)
    lopti = train_config(grid.tiny_grid(smoke=True).settings["kk"], "lopti", 0)
    assert update_tokens(metrics, lopti) == 2 * lopti.ppo_epochs * sum(trained)


def test_hierarchical_interval_reduces_to_the_plain_bootstrap_and_widens_with_bases():
    rng = np.random.default_rng(0)
    items = (rng.random(300) < 0.4).astype(float)
    one = hierarchical_bootstrap_ci(items[None, :], [0])
    plain = bootstrap_ci(items)
    assert (one.mean, one.low, one.high) == pytest.approx((plain.mean, plain.low, plain.high))
    runs = np.array([0.30, 0.31, 0.29, 0.50, 0.52, 0.49])
    flat = hierarchical_bootstrap_ci(runs, [0] * 6)  # as if all six came from one base
    nested = hierarchical_bootstrap_ci(runs, [0, 0, 0, 1, 1, 1])
    assert nested.mean == pytest.approx(runs.mean())
    assert nested.high - nested.low > flat.high - flat.low
    with pytest.raises(ValueError, match="base labels"):
        hierarchical_bootstrap_ci(runs, [0, 1])


def test_check_samples_compares_and_refuses_old_folders(tmp_path):
    from scipy import stats

    from rlvr.reproduce import check
    from rlvr.reproduce.records import load_records

    records = {
        "kk/grpo_sg/seed0": {"numbers": {"greedy": 0.30}},
        "kk/grpo/base1/seed0": {"numbers": {"greedy": 0.20}},
        "math/grpo/seed0": {"numbers": {"greedy": 0.40}},
        "kk/grpo/seed0": {"numbers": {"greedy": 0.25}},
        "kk/grpo_sg[tau=0.25]/seed0": {"numbers": {"greedy": 0.1}},
        "kk/sft/seed0": {"numbers": {"greedy": 0.1}},
    }
    assert check.sample_labels(records, 3) == [
        "kk/grpo/seed0",
        "math/grpo/seed0",
        "kk/grpo_sg/seed0",
    ]
    # a rerun is one new draw: judged against the prediction interval of one base x seed,
    # mean +- t_{0.975, n-1} s sqrt(1 + 1/n) with one seed per base (Hahn, Meeker & Escobar
    # 2017, ch. 4)
    records["kk/grpo/base2/seed0"] = {"numbers": {"greedy": 0.31}}
    pi = check.stated_interval(records, "kk/grpo/seed0", "greedy")
    y = [0.25, 0.20, 0.31]
    ref = stats.t.interval(0.95, 2, loc=np.mean(y), scale=np.std(y, ddof=1) * np.sqrt(4 / 3))
    assert pi.n == 3 and (pi.low, pi.high) == pytest.approx((max(0.0, ref[0]), ref[1]))
    mean_ci = hierarchical_bootstrap_ci(y, [0, 1, 2])  # the interval of the 3-base mean
    assert pi.low < mean_ci.low and pi.high > mean_ci.high
    newcomer = mean_ci.high + 0.05  # outside the mean's interval, inside the prediction's
    assert check.verdict(0.25, 0.25, pi) == "bit-identical"
    assert check.verdict(0.25, newcomer, pi) == "inside the prediction interval"
    assert check.verdict(0.25, pi.high + 0.01, pi) == "outside the prediction interval"
    line = check.summary_line("kk/grpo/seed0", "greedy", 0.25, newcomer, pi)
    assert line.startswith("[check] kk/grpo/seed0: greedy ")
    assert "inside the prediction interval" in line and "from 3 recorded runs" in line
    assert "bit-identical" in check.summary_line("kk/grpo/seed0", "greedy", 0.25, 0.25, pi)
    assert check.stated_interval(records, "math/grpo/seed0", "greedy") is None
    floor = {f"qa/grpo/base{b}/seed0": {"numbers": {"greedy_em": 0.0, "n_items": 200.0,
             "greedy_reward": -0.5}} for b in range(3)}  # fmt: skip
    assert check.stated_interval(floor, "qa/grpo/base0/seed0", "greedy_em").high > 0.01
    reward = check.stated_interval(floor, "qa/grpo/base0/seed0", "greedy_reward")
    assert reward.low == reward.high == -0.5  # a reward is no proportion: no floor, no bounds
    # the evaluation's design: equal or not comparable, never a "0-1 interval" around 200 items
    assert check.stated_interval(floor, "qa/grpo/base0/seed0", "n_items") is None
    assert check.verdict(200.0, 100.0, None) == "outside the prediction interval"
    (tmp_path / "fig2.meta.json").write_text(json.dumps({"profile": "tiny", "train_runs": {}}))
    with pytest.raises(SystemExit, match="older rlvr"):
        load_records(tmp_path)
    verl = {"profile": "paper", "engine": "verl", "run_records": records}
    (tmp_path / "fig2.meta.json").write_text(json.dumps(verl))
    with pytest.raises(SystemExit, match="trained by verl"):
        load_records(tmp_path)


def test_a_base_seed_builds_another_base_and_records_its_hash(tmp_path, monkeypatch):
    from rlvr.envs.warmstart import tiny_settings
    from rlvr.models import load_model, presets
    from rlvr.models.build import BuildConfig, TokenizerConfig
    from rlvr.models.sft import SFTConfig
    from rlvr.models.tiny import ArchConfig
    from rlvr.reproduce.keys import preset_build_key
    from rlvr.reproduce.runs import base_weights

    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    small = BuildConfig(
        name="tiny-test",
        task="kk",
        data=dict(tiny_settings("kk")),
        tokenizer=TokenizerConfig(vocab_size=300, tasks=("kk",), texts_per_task=40),
        arch=ArchConfig(
            hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64
        ),
        sft=SFTConfig(steps=2, batch_size=2, warmup_steps=0, length_groups=1),
    )
    monkeypatch.setitem(presets.PRESETS, "tiny-test", small)
    preset_build_key.cache_clear()
    try:
        load_model("tiny-test")
        load_model("tiny-test@1")
        first, second = base_weights("tiny-test"), base_weights("tiny-test@1")
    finally:
        preset_build_key.cache_clear()
    assert first["build"] != second["build"]
    assert first["weights_sha256"] and first["weights_sha256"] != second["weights_sha256"]
    record = json.loads((tmp_path / "models" / second["build"] / "build.json").read_text())
    assert record["weights_sha256"] == second["weights_sha256"]
    assert record["weights_sha256"] == weights_sha256(tmp_path / "models" / second["build"])
    assert record["config"]["seed"] == 1 and record["machine"]["cpu"]


def test_evaluation_keys_do_not_depend_on_where_the_cache_lives(tmp_path):
    from rlvr.reproduce.keys import model_identity

    for root in (tmp_path / "a", tmp_path / "elsewhere" / "b"):
        (root / "sft" / "0123abcd4567").mkdir(parents=True)
        (root / "sft" / "0123abcd4567" / "sft.json").write_text("{}")
        assert (
            model_identity(str(root / "runs" / "abd13653fe52" / "final"))
            == "runs/abd13653fe52/final"
        )
        assert model_identity(str(root / "sft" / "0123abcd4567")) == "sft/0123abcd4567"


def test_every_method_is_planned_on_every_base(tmp_path):
    from rlvr.reproduce import grid
    from rlvr.reproduce.common import Context
    from rlvr.reproduce.parallel import required_runs
    from rlvr.reproduce.runs import train_config

    g = grid.tiny_grid()
    assert (g.base_seeds, g.seeds) == (5, 2)  # issue 48, item 5
    ctx = Context(g, tmp_path, tmp_path, [0, 1], base_seeds=list(range(5)))
    plan = required_runs(ctx, ["fig2"])
    assert {algo for (_, algo, _), _ in plan} == {"grpo", "grpo_sg", "tr_grpo", "reverse"}
    assert all(units == [(b, s) for b in range(5) for s in (0, 1)] for _, units in plan)
    models = {train_config(g.settings["kk"], "grpo", s, base_seed=b).model for b, s in plan[0][1]}
    assert models == {"tiny-kk", *(f"tiny-kk@{b}" for b in range(1, 5))}


def test_the_held_out_curve_reads_the_periodic_evaluations():
    from types import SimpleNamespace

    import numpy as np

    from rlvr.reproduce.curve import curve, verdict

    def run(values, every=4):
        metrics = [{"reward/mean": 0.0} for _ in range(every * len(values))]
        for i, v in enumerate(values):
            metrics[every * (i + 1) - 1]["eval/greedy_accuracy"] = v
        return SimpleNamespace(metrics=metrics)

    steps, values = curve([run([0.1, 0.3, 0.40]), run([0.2, 0.3, 0.42])], "eval/greedy_accuracy")
    assert steps.tolist() == [4, 8, 12] and values.shape == (2, 3)
    word, change = verdict(steps, values)
    assert word == "still rising" and np.isclose(change, 0.11)
    # a change inside half the runs' range at the last point is flat
    steps, values = curve([run([0.1, 0.30, 0.32]), run([0.2, 0.4, 0.48])], "eval/greedy_accuracy")
    assert verdict(steps, values)[0] == "flat"
    assert verdict(*curve([run([0.5]), run([0.4])], "eval/greedy_accuracy"))[0].startswith("one")
    # only the steps every run evaluated (a run cut short has fewer points)
    steps, values = curve([run([0.1, 0.2]), run([0.1])], "eval/greedy_accuracy")
    assert steps.tolist() == [4] and values.tolist() == [[0.1], [0.1]]
    assert curve([run([])], "eval/greedy_accuracy")[0].size == 0


def test_the_smol_grid_trains_its_three_methods_on_two_tasks(tmp_path):
    from rlvr.reproduce import grid
    from rlvr.reproduce.common import Context
    from rlvr.reproduce.figures import plan_for

    g = grid.get_grid("smol")
    assert g.methods == ["grpo", "grpo_sg", "tr_grpo"] and not g.sft_reference
    assert grid.validate(g) == 6  # 2 settings x 3 methods
    plan = plan_for(Context(g, tmp_path, tmp_path, [0, 1, 2]), ["all"])
    arms = {(r.setting, r.algo, tuple(r.extra)) for r in plan.runs.values()}
    assert arms == {(s, m, ()) for s in ("kk", "math") for m in g.methods}
    assert len(plan.runs) == 18 and not plan.references["sft"]
    for s in g.settings.values():  # at least 200 held-out items, and the test split holds them
        assert s.n_items >= 200 and s.model == "smollm2-135m-instruct"
