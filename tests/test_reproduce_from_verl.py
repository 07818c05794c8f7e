"""``rlvr reproduce <name> --from-verl DIR``: figures, evaluations and the report from runs verl
trained.

The fixture is a generated folder as verl leaves it (``rlvr.reproduce.verl.results``): per run
``rlvr_run.json``, a ``metrics.jsonl`` in the exact format of verl 0.9.1's ``FileLogger``
(compact JSON, ``{"step", "data"}``, NaN as ``null``, a validation-only line at step 0) and a real
micro model saved where verl's checkpoint manager saves Hugging Face weights. The same reader is
checked on a file written by verl's own ``FileLogger`` in
``tests/integrations/verl_results_check.py``.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest

from rlvr.models import build_micro
from rlvr.repro import weights_sha256
from rlvr.reproduce import grid, keys, runs
from rlvr.reproduce.common import Context, Output
from rlvr.reproduce.plan import PlannedRun
from rlvr.reproduce.verl.results import (
    METRIC_NAMES,
    VerlRuns,
    folder_name,
    read_file_logger,
    read_metrics,
)

#: (setting, algorithm) of every run fig2 and fig3 read in the smoke grid.
RUNS = [
    ("kk", "grpo"),
    ("kk", "grpo_sg"),
    ("kk", "reverse"),
    ("kk", "tr_grpo"),
    ("math", "grpo"),
    ("math", "grpo_sg"),
    ("searchqa", "grpo"),
    ("searchqa", "grpo_sg"),
]


def logger_line(step: int, data: dict) -> str:
    """One line as ``orjson.dumps({"step": step, "data": data})`` writes it (compact, NaN as
    null)."""
    clean = {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in data.items()
    }
    return json.dumps({"step": step, "data": clean}, separators=(",", ":"))


def grad_norms(i: int) -> list[float]:
    return [1.0 + i, 2.5 + i]


def verl_step(i: int, step: int) -> dict:
    """Metrics of training step ``step`` of run ``i`` under verl's names."""
    return {
        "training/global_step": step,
        "critic/score/mean": -1.0 + 0.5 * step + 0.1 * i,
        "critic/score/max": 3,
        "critic/score/min": -3,
        "actor/grad_norm": grad_norms(i)[step - 1],
        "actor/entropy": 0.9 - 0.1 * step,
        "actor/pg_loss": float("nan") if step == 1 else 0.01,
        "response_length/mean": 40.0 + step,
        "perf/total_num_tokens": 1000 + step,
        "timing_s/gen": 2.0,
        "timing_s/update_actor": 1.0,
    }


def write_run(root, setting_key: str, algo: str, i: int, g) -> str:
    cfg = runs.train_config(g.settings[setting_key], algo, 0)
    name = folder_name(setting_key, algo, 0)
    folder = root / "runs" / name
    folder.mkdir(parents=True)
    (folder / "rlvr_run.json").write_text(
        json.dumps(
            {
                "task": cfg.env,
                "setting": setting_key,
                "algo": algo,
                "seed": 0,
                "model": cfg.model,
                "params": cfg.weights.params(algo),
                "native_config_hash": keys.run_key(cfg),
                "fig_or_table": "fig2",
                "run_key": name,
                "engine": "verl",
                "verl_version": "0.9.1",
            }
        )
    )
    (folder / "config.yaml").write_text(
        "trainer:\n  total_training_steps: 2\n  logger: [console, file]\n"
    )
    lines = [logger_line(0, {"val-core/kk/acc/mean@1": 0.0})]
    lines += [logger_line(s, verl_step(i, s)) for s in (1, 2)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for step in (1, 2):  # verl saves every save_freq steps; the last one is evaluated
        hf = folder / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface"
        model, tokenizer = build_micro(seed=100 + 10 * i + step)
        model.save_pretrained(hf)
        tokenizer.save_pretrained(hf)
    return name


@pytest.fixture(scope="module")
def verl_dir(tmp_path_factory):
    g = grid.tiny_grid(smoke=True)
    root = tmp_path_factory.mktemp("verl") / "paper-verl"
    for i, (setting_key, algo) in enumerate(RUNS):
        write_run(root, setting_key, algo, i, g)
    return root


def test_file_logger_lines_become_native_steps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [
        logger_line(0, {"val-core/acc": 0.5}),
        logger_line(1, {"actor/grad_norm": 2.0, "critic/score/mean": 1.0}),
        logger_line(1, {"actor/grad_norm": 3.0}),  # a later line of a step wins
        logger_line(2, {"actor/grad_norm": float("nan"), "actor/entropy": 0.4}),
    ]
    path.write_text("\n".join(lines) + '\n{"step":3,"da')  # killed mid-line
    assert sorted(read_file_logger(path)) == [0, 1, 2]
    recs = read_metrics(tmp_path)
    assert [r["step"] for r in recs] == [1, 2]  # step 0 holds validation only
    assert recs[0]["grad_norm"] == 3.0 and recs[0]["reward/mean"] == 1.0
    assert math.isnan(recs[1]["grad_norm"]) and recs[1]["entropy"] == 0.4
    assert recs[1]["actor/entropy"] == 0.4  # verl's own names are kept beside
    # A rotated earlier attempt is read first; the restarted file's steps replace its steps.
    (tmp_path / "metrics.1.jsonl").write_text(
        logger_line(1, {"actor/grad_norm": 9.0})
        + "\n"
        + logger_line(5, {"actor/grad_norm": 5.0})
        + "\n"
    )
    merged = read_metrics(tmp_path)
    assert [r["step"] for r in merged] == [1, 2, 5]
    assert merged[0]["grad_norm"] == 3.0 and merged[2]["grad_norm"] == 5.0
    bad = tmp_path / "bad" / "metrics.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"step": 1}\n{"step": 2, "data": {}}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: not a verl file-logger line"):
        read_metrics(bad.parent)


def test_metric_table_names_the_native_metrics_the_figures_read():
    native = set(METRIC_NAMES.values())
    for name in ("reward/mean", "grad_norm", "entropy", "response_length", "tokens/update"):
        assert name in native
    assert len(native) == len(METRIC_NAMES)  # one verl name per native name


def test_fig3_and_fig2_from_verl(verl_dir, monkeypatch):
    import csv

    from rlvr.cli import main

    monkeypatch.setenv("RLVR_HOME", str(verl_dir.parent / "home"))
    args = ["--from-verl", str(verl_dir), "--grid", "tiny", "--smoke", "--quiet"]
    assert main(["reproduce", "fig3", *args]) == 0
    out = verl_dir / "results"  # the default --out
    rows = list(csv.DictReader(open(out / "fig3.csv")))
    for i, (setting_key, algo) in enumerate(RUNS):
        if algo in ("reverse", "tr_grpo"):
            continue
        series = [
            float(r["grad_norm"])
            for r in rows
            if r["setting"] == setting_key and r["method"] == algo
        ]
        assert series == grad_norms(i), (setting_key, algo)
    meta = json.loads((out / "fig3.meta.json").read_text())
    assert meta["engine"] == "verl" and meta["verl_versions"] == ["0.9.1"]
    assert meta["train_runs"]["kk/grpo/seed0"] == "kk__grpo__seed0"
    rec = meta["run_records"]["kk/grpo_sg/seed0"]
    hf = verl_dir / "runs/kk__grpo_sg__seed0/checkpoints/global_step_2/actor/huggingface"
    assert rec["engine"] == "verl" and rec["weights_sha256"] == weights_sha256(hf)
    assert rec["run"]["checkpoint"] == "checkpoints/global_step_2/actor/huggingface"
    assert rec["run"]["update_tokens"] == 1001 + 1002  # perf/total_num_tokens, one PPO epoch
    report = (out / "REPORT.md").read_text()
    assert "engine: **verl**" in report and f"verl folder `{verl_dir.name}`" in report
    assert str(verl_dir) not in report  # no path of the machine that made it (issue 52)

    assert main(["reproduce", "fig2", *args]) == 0
    meta = json.loads((out / "fig2.meta.json").read_text())
    assert meta["engine"] == "verl"
    for algo in ("grpo", "grpo_sg", "tr_grpo", "reverse"):
        key = f"kk__{algo}__seed0"
        ev = out / ".cache" / "evals" / meta["evaluations"][key] / "summary.json"
        summary = json.loads(ev.read_text())
        # rlvr's evaluation ran on the last checkpoint verl saved
        assert summary["config"]["model"].endswith(
            f"{key}/checkpoints/global_step_2/actor/huggingface"
        )
        assert "greedy" in meta["run_records"][f"kk/{algo}/seed0"]["numbers"]
    assert (out / "fig2.png").stat().st_size > 0 and "kk__reverse__seed0" in (
        out / "runs.csv"
    ).read_text()
    # Evaluations are keyed by the weights, not by where the folder lives.
    assert keys.model_identity(str(hf)) == f"verl-weights:{weights_sha256(hf)}"


def test_missing_and_incomplete_runs_fail_in_one_line(verl_dir, tmp_path, capsys):
    from rlvr.cli import main

    broken = tmp_path / "broken"
    shutil.copytree(verl_dir, broken, ignore=shutil.ignore_patterns("results"))
    shutil.rmtree(broken / "runs" / "math__grpo__seed0")
    (broken / "runs" / "kk__grpo__seed0" / "metrics.jsonl").unlink()
    for f in (broken / "runs/searchqa__grpo_sg__seed0/checkpoints/global_step_2").rglob(
        "*.safetensors"
    ):
        f.unlink()
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "fig3", "--from-verl", str(broken), "--grid", "tiny", "--smoke"])
    msg = str(exc.value)
    assert "\n" not in msg and "3 of 6 run(s) missing or incomplete" in msg
    assert "math__grpo__seed0 (no run folder)" in msg
    assert "kk__grpo__seed0 (no metrics.jsonl)" in msg
    assert "searchqa__grpo_sg__seed0 (checkpoints/global_step_2/actor/huggingface has no " in msg
    assert not (broken / "results" / "fig3.png").exists()  # no partial figure
    # The wrong grid names the folders that stand for other configs.
    with pytest.raises(SystemExit, match="pass the --grid/--smoke it was generated with"):
        main(["reproduce", "fig3", "--from-verl", str(verl_dir), "--grid", "tiny"])


def test_a_run_short_of_its_steps_is_incomplete(verl_dir, tmp_path):
    folder = tmp_path / "runs" / "kk__grpo__seed0"
    shutil.copytree(verl_dir / "runs" / "kk__grpo__seed0", folder)
    (folder / "config.yaml").write_text("trainer:\n  total_training_steps: 3\n")
    g = grid.tiny_grid(smoke=True)
    cfg = runs.train_config(g.settings["kk"], "grpo", 0)
    source = VerlRuns(tmp_path)
    assert source.problem("kk__grpo__seed0", cfg) == "metrics reach step 2 of 3"
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    (folder / "metrics.jsonl").write_text("\n".join([lines[0], lines[2]]) + "\n")
    (folder / "config.yaml").write_text("trainer:\n  total_training_steps: 2\n")
    assert source.problem("kk__grpo__seed0", cfg).startswith("metrics.jsonl lacks steps 1 ")


def test_the_steps_expected_are_those_of_the_last_launch(verl_dir, tmp_path):
    """run.sh's arguments (``trainer.total_training_steps=2``) count: Hydra's composed config
    of the last launch, in the run folder, before the folder's config.yaml."""
    folder = tmp_path / "runs" / "kk__grpo__seed0"
    shutil.copytree(verl_dir / "runs" / "kk__grpo__seed0", folder)
    (folder / "config.yaml").write_text("trainer:\n  total_training_steps: 352\n")
    cfg = runs.train_config(grid.tiny_grid(smoke=True).settings["kk"], "grpo", 0)
    assert VerlRuns.expected_steps(folder, cfg) == 352
    for when, steps in (("2026-12-05/09-00-00", 5), ("2026-12-05/10-00-00", 2)):
        hydra = folder / "outputs" / when / ".hydra"
        hydra.mkdir(parents=True)
        (hydra / "config.yaml").write_text(f"trainer:\n  total_training_steps: {steps}\n")
    assert VerlRuns.expected_steps(folder, cfg) == 2
    assert VerlRuns(tmp_path).problem("kk__grpo__seed0", cfg) == ""


def test_two_settings_training_one_config_each_find_their_own_folder(verl_dir, tmp_path):
    cfg = runs.train_config(grid.tiny_grid(smoke=True).settings["kk"], "grpo", 0)
    for setting in ("math", "kk"):
        folder = tmp_path / "runs" / f"{setting}__grpo__seed0"
        shutil.copytree(verl_dir / "runs" / "kk__grpo__seed0", folder)
        info = json.loads((folder / "rlvr_run.json").read_text())
        info.update(setting=setting, native_config_hash=keys.run_key(cfg))
        (folder / "rlvr_run.json").write_text(json.dumps(info))
    source = VerlRuns(tmp_path)
    assert source.find(cfg, "kk") == ("kk__grpo__seed0", "")
    assert source.find(cfg, "math") == ("math__grpo__seed0", "")
    assert source.find(cfg, "searchqa") == ("kk__grpo__seed0", "")  # the config, any setting


def test_a_folder_from_an_older_config_is_matched_and_noted(verl_dir, tmp_path):
    folder = tmp_path / "runs" / "kk__grpo_sg__seed0"
    shutil.copytree(verl_dir / "runs" / "kk__grpo_sg__seed0", folder)
    info = json.loads((folder / "rlvr_run.json").read_text())
    (folder / "rlvr_run.json").write_text(json.dumps({**info, "native_config_hash": "0" * 12}))
    g = grid.tiny_grid(smoke=True)
    cfg = runs.train_config(g.settings["kk"], "grpo_sg", 0)
    source = VerlRuns(tmp_path)
    run = source.run(PlannedRun("kk", "grpo_sg", {}, 0, 0, cfg, keys.run_key(cfg)))
    assert run.key == "kk__grpo_sg__seed0"
    assert "generated from native config 000000000000" in run.info["note"]
    out = Output(Context(g, tmp_path / "results", tmp_path / "cache", [0]), "fig3")
    out.run_records["kk/grpo_sg/seed0"] = {}
    source.record(out, "kk/grpo_sg/seed0", run)
    assert out.notes == [run.info["note"]]
    assert out.run_records["kk/grpo_sg/seed0"]["engine"] == "verl"
    # Other weight parameters (a sweep point) are another run.
    tau = runs.train_config(g.settings["kk"], "grpo_sg", 0, {"weights.tau": 0.25})
    assert VerlRuns(tmp_path).find(tau, "kk") == (None, "no run folder")


def test_paper_grid_curves_from_verl_need_no_gpu(tmp_path, monkeypatch):
    """fig4 of the paper grid reads only metrics: on a machine without GPUs it is drawn from
    the verl folder instead of printing the training plan."""
    from rlvr.cli import main

    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    g = grid.paper_grid()
    root = tmp_path / "paper-verl"
    for i, (setting_key, algo) in enumerate(r for r in RUNS if r[1] != "reverse"):
        write_run(root, setting_key, algo, i, g)
    args = ["--from-verl", str(root), "--grid", "paper", "--seeds", "1", "--quiet"]
    assert main(["reproduce", "fig4", *args]) == 0
    assert not (root / "results" / "plan.md").exists()
    meta = json.loads((root / "results" / "fig4.meta.json").read_text())
    assert meta["grid"] == "paper" and meta["engine"] == "verl"
    assert meta["run_records"]["kk/grpo/seed0"]["run"]["model"] == "Qwen/Qwen2.5-3B-Instruct"
