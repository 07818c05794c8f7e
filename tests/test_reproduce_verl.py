"""``rlvr reproduce ... --grid paper --engine verl``: the launch folders and the translation of
the native paper recipe into verl's config (``rlvr.integrations.verl.config``).

That verl itself accepts every generated config is checked in verl's venv
(``tests/integrations/verl_gen_check.py``); here: the files, the grid, every translated key.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.agents.algorithms import WeightConfig, resolved_fields
from rlvr.cli import main as rlvr_main
from rlvr.integrations.verl.config import VerlTranslationError, gpu_layout, translate
from rlvr.integrations.verl.data import agent_loop_overrides, check_service_reachable
from rlvr.reproduce.common import Context
from rlvr.reproduce.gpu_plan import verl_gpus
from rlvr.reproduce.grid import get_grid
from rlvr.reproduce.keys import run_key
from rlvr.reproduce.parallel import required_runs
from rlvr.reproduce.runs import eval_config, train_config
from rlvr.reproduce.verl.launch import grid, write
from rlvr.reproduce.verl.run_tools import main

LOGIT = {"weights.shaping_input": "logit"}

CONTRACT_FIELDS = {
    "task",
    "setting",
    "algo",
    "seed",
    "model",
    "params",
    "native_config_hash",
    "fig_or_table",
    "run_key",
    "engine",
    "verl_version",
}


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    out = tmp_path_factory.mktemp("launch")
    rows = write(get_grid("paper"), ["all"], [0, 1, 2], out, "rlvr reproduce all (test)")
    return out, rows


def load(out: Path, key: str):
    run = out / "runs" / key
    return (
        yaml.safe_load((run / "config.yaml").read_text()),
        json.loads((run / "rlvr_run.json").read_text()),
    )


def flat_of(setting_key: str, algo: str = "grpo", extra=None, gpus: int = 8, seed: int = 0):
    setting = get_grid("paper").settings[setting_key]
    cfg = train_config(setting, algo, seed, extra)
    ecfg = eval_config(
        setting, cfg, cfg.model, eval_set=next(iter(setting.eval_sets.values()), None)
    )
    return cfg, translate(cfg, ecfg, gpus=gpus, run_name="r", train_files=["t"], val_files=["v"])


# -- the folder ----------------------------------------------------------------------------------
def test_all_writes_every_file(launch):
    out, rows = launch
    keys = [r["run_key"] for r in rows]
    assert len(keys) == len(set(keys))
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(keys)
    for key in keys:
        run = out / "runs" / key
        assert {p.name for p in run.iterdir()} == {"run.sh", "config.yaml", "rlvr_run.json"}
        assert (run / "run.sh").stat().st_mode & stat.S_IXUSR
        subprocess.run(["bash", "-n", str(run / "run.sh")], check=True)
    run_all = (out / "run_all.sh").read_text()
    subprocess.run(["bash", "-n", str(out / "run_all.sh")], check=True)
    assert all(k in run_all for k in keys)
    readme = (out / "README.md").read_text()
    assert "ray job submit" in readme and "--from-verl" in readme
    assert all(f"`{k}`" in readme for k in keys)


def test_records_follow_the_contract(launch):
    out, rows = launch
    for row in rows:
        config, record = load(out, row["run_key"])
        assert CONTRACT_FIELDS <= set(record)
        assert record["engine"] == "verl" and record["verl_version"] == "0.9.1"
        assert record["run_key"] == (
            f"{record['setting']}/{record['tag']}/seed{record['seed']}".replace("/", "__")
        )
        assert record["fig_or_table"]
        setting = get_grid("paper").settings[record["setting"]]
        cfg = train_config(setting, record["algo"], record["seed"], record["overrides"])
        assert record["native_config_hash"] == run_key(cfg)
        assert record["params"] == cfg.weights.params(record["algo"])
        assert config["rlvr"]["params"] == resolved_fields(cfg.weights, record["algo"])
        assert record["model"] == config["actor_rollout_ref"]["model"]["path"] == cfg.model
        assert config["defaults"] == ["ppo_trainer", "_self_"]
        assert config["trainer"]["logger"] == ["console", "file"]
        assert config["trainer"]["experiment_name"] == record["run_key"]


def test_grid_is_the_plan_plus_the_algorithms_variants():
    """The figures' plan (the K&K table on both K&K models, the 7B included), then GRPO-SG's
    logit form beside every default-point GRPO-SG run."""
    g = get_grid("paper")
    seeds = [0, 1, 2]
    launches = grid(g, ["all"], seeds)
    ctx = Context(g, Path("."), Path("."), seeds)
    native = {
        (key, algo, tuple(sorted(extra.items())), seed)
        for (key, algo, extra), units in required_runs(ctx, ["all"])
        for _, seed in units
    }
    ours = {
        (r.run.setting, r.run.algo, tuple(sorted(r.run.extra.items())), r.run.seed): r
        for r in launches
    }
    assert {k for k, r in ours.items() if r.native} == native
    assert {("kk-7b", m) for m in ("grpo", "entropy_top", "ar", "lopti", "reverse", "grpo_sg")} <= {
        (k[0], k[1]) for k in native
    }
    variants = [r.run for r in launches if not r.native]
    assert variants and all(r.algo == "grpo_sg" and r.extra == LOGIT for r in variants)
    assert {r.setting for r in variants} == {"kk", "kk-7b", "math", "searchqa"}
    fig2 = grid(g, ["fig2"], [0])
    assert {(r.run.setting, r.run.algo, r.native) for r in fig2 if not r.run.extra} == {
        ("kk", m, True) for m in ("grpo", "grpo_sg", "reverse")
    }


def test_steps_equal_the_native_recipe(launch):
    out, rows = launch
    g = get_grid("paper")
    for row in rows:
        config, record = load(out, row["run_key"])
        cfg = train_config(g.settings[record["setting"]], record["algo"], record["seed"])
        assert config["trainer"]["total_training_steps"] == cfg.steps == record["steps"]
        # total_epochs only bounds the loop; every epoch has >= 1 step, so steps end it first
        assert config["trainer"]["total_epochs"] >= cfg.steps
        script = (out / "runs" / row["run_key"] / "run.sh").read_text()
        cap = cfg.steps * cfg.prompts_per_step
        assert f"{record['task']} train {cap} " in script
    kk, _ = load(out, "kk__grpo__seed0")
    assert kk["trainer"]["total_training_steps"] == 352


def test_native_and_verl_read_one_recipe(tmp_path):
    """Change a value of the recipe file: the native TrainConfig and the verl config change."""
    from rlvr.reproduce.grid import TRAIN_PROFILE_DIR

    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for f in TRAIN_PROFILE_DIR.glob("paper*.yaml"):
        (recipes / f.name).write_text(f.read_text())
    text = (recipes / "paper_kk.yaml").read_text()
    assert "steps: 352" in text
    (recipes / "paper_kk.yaml").write_text(text.replace("steps: 352", "steps: 123"))
    text = (recipes / "paper.yaml").read_text()
    (recipes / "paper.yaml").write_text(text.replace("lr: 1.0e-6", "lr: 3.0e-6"))
    g = get_grid("paper")
    g.settings["kk"].train["profile"] = str(recipes / "paper.yaml")
    cfg = train_config(g.settings["kk"], "grpo", 0)
    assert (cfg.optim.lr, cfg.steps) == (3e-6, 123)
    write(g, ["fig2"], [0], tmp_path / "launch", "test")
    config, record = load(tmp_path / "launch", "kk__grpo__seed0")
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-6
    assert config["trainer"]["total_training_steps"] == 123 == record["steps"]
    assert record["native_config_hash"] == run_key(cfg)
    assert "kk train 7872 " in (tmp_path / "launch/runs/kk__grpo__seed0/run.sh").read_text()


# -- every translated key ------------------------------------------------------------------------
A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
CASES = [
    ({"prompts_per_step": 32}, {"data.train_batch_size": 32}),
    ({"group_size": 4, "mini_batch_size": 128}, {R + "n": 4, A + "ppo_mini_batch_size": 32}),
    ({"mini_batch_size": 128}, {A + "ppo_mini_batch_size": 16}),
    (
        {"micro_batch_size": 4},
        {
            A + "ppo_micro_batch_size_per_gpu": 4,
            R + "log_prob_micro_batch_size_per_gpu": 4,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 4,
        },
    ),
    ({"micro_batch_size": 0}, {A + "ppo_micro_batch_size_per_gpu": 32}),  # 256 / 8 GPUs
    ({"ppo_epochs": 2}, {A + "ppo_epochs": 2}),
    ({"optim.lr": 3e-6}, {A + "optim.lr": 3e-6}),
    ({"optim.weight_decay": 0.1}, {A + "optim.weight_decay": 0.1}),
    ({"optim.beta1": 0.8, "optim.beta2": 0.95}, {A + "optim.betas": [0.8, 0.95]}),
    ({"optim.eps": 1e-6}, {A + "optim.override_optimizer_config": {"eps": 1e-6}}),
    ({"optim.grad_clip": 0.5}, {A + "optim.clip_grad": 0.5}),
    ({"optim.warmup_steps": 10}, {A + "optim.lr_warmup_steps": 10}),
    (
        {"optim.schedule": "cosine", "optim.min_lr_ratio": 0.1},
        {A + "optim.lr_scheduler_type": "cosine", A + "optim.min_lr_ratio": 0.1},
    ),
    ({"loss.clip_low": 0.1}, {A + "clip_ratio_low": 0.1}),
    ({"loss.clip_high": 0.3}, {A + "clip_ratio_high": 0.3}),
    ({"loss.dual_clip": 5.0}, {A + "clip_ratio_c": 5.0}),
    (
        {"loss.kl_coef": 0.01},
        {A + "kl_loss_coef": 0.01, A + "use_kl_loss": True, A + "kl_loss_type": "low_var_kl"},
    ),
    ({"loss.kl_coef": 0.0}, {A + "use_kl_loss": False}),
    ({"loss.agg": "seq-mean-token-sum-norm"}, {A + "loss_agg_mode": "seq-mean-token-sum-norm"}),
    ({"loss.loss_scale_factor": 512.0}, {A + "loss_scale_factor": 512.0}),
    ({"loss.advantage": "drgrpo"}, {"algorithm.norm_adv_by_std_in_grpo": False}),
    ({"loss.weight_position": "ratio"}, {"rlvr.weight_position": "ratio"}),
    ({"rollout.temperature": 0.9}, {R + "temperature": 0.9}),
    ({"rollout.top_p": 0.95}, {R + "top_p": 0.95}),
    ({"rollout.top_k": 0}, {R + "top_k": -1}),
    ({"rollout.top_k": 20}, {R + "top_k": 20}),
    ({"rollout.max_prompt_tokens": 300}, {"data.max_prompt_length": 300}),
    ({"rollout.max_response_tokens": 1024}, {"data.max_response_length": 1024}),
    ({"rollout.vllm_gpu_memory_utilization": 0.6}, {R + "gpu_memory_utilization": 0.6}),
    ({"rollout.vllm_enforce_eager": True}, {R + "enforce_eager": True}),
    ({"rollout.vllm_max_model_len": 0}, {R + "max_model_len": 400 + 4096}),
    ({"rollout.vllm_max_model_len": 8192}, {R + "max_model_len": 8192}),
    ({"rollout.vllm_sleep_mode": False}, {R + "free_cache_engine": False}),
    ({"rollout.tensor_parallel_size": 2}, {R + "tensor_model_parallel_size": 2}),
    ({"steps": 40}, {"trainer.total_training_steps": 40, "trainer.total_epochs": 40}),
    ({"save_every": 0}, {"trainer.save_freq": -1}),
    ({"save_every": 50}, {"trainer.save_freq": 50}),
    ({"keep_checkpoints": 3}, {"trainer.max_actor_ckpt_to_keep": 3}),
    ({"eval.every": 10}, {"trainer.test_freq": 10, "trainer.val_before_train": False}),
    ({"eval.every": 0}, {"trainer.test_freq": -1, "trainer.val_before_train": False}),
    ({"eval.every": 0, "eval.at_end": True, "steps": 30}, {"trainer.test_freq": 30}),
    (
        {"seed": 7},
        {"data.seed": 7, A + "data_loader_seed": 7, R + "seed": 7},
    ),
    ({"model": "Qwen/Qwen2.5-7B"}, {"actor_rollout_ref.model.path": "Qwen/Qwen2.5-7B"}),
    (
        {"gradient_checkpointing": False},
        {"actor_rollout_ref.model.enable_gradient_checkpointing": False},
    ),
]


@pytest.mark.parametrize("native,expected", CASES, ids=[str(n) for n, _ in CASES])
def test_each_key_translates(native, expected):
    _, flat = flat_of("kk", "grpo", native)
    for key, value in expected.items():
        assert flat[key] == value, key


def test_fixed_keys():
    cfg, flat = flat_of("kk", "grpo", gpus=2)
    assert flat["algorithm.adv_estimator"] == "grpo"
    assert flat["algorithm.use_kl_in_reward"] is False
    assert flat["actor_rollout_ref.actor.entropy_coeff"] == 0.0
    assert flat[A + "checkpoint.save_contents"][-1] == "hf_model"
    assert flat["reward.custom_reward_function.path"] == "pkg://rlvr.integrations.verl.reward"
    assert flat["reward.custom_reward_function.name"] == "compute_score"
    assert flat[R + "name"] == "vllm"
    assert flat[A + "fsdp_config.dtype"] == flat[R + "dtype"] == "bfloat16"
    assert (flat["trainer.n_gpus_per_node"], flat["trainer.nnodes"]) == (2, 1)
    assert flat["data.train_files"] == ["t"] and flat["data.val_files"] == ["v"]
    assert flat["trainer.logger"] == ["console", "file"]
    assert flat["trainer.default_local_dir"] == "checkpoints"
    assert flat["rlvr.algo"] == "grpo" and flat["rlvr.params"] == {}


def test_validation_follows_the_evaluation_protocol():
    _, kk = flat_of("kk")  # K&K: greedy + 8 samples at the training temperature 0.7
    v = R + "val_kwargs."
    assert (kk[v + "n"], kk[v + "do_sample"], kk[v + "temperature"], kk[v + "top_p"]) == (
        8,
        True,
        0.7,
        1.0,
    )
    _, math = flat_of("math")  # AIME/AMC: avg@16 at temperature 1.0
    assert (math[v + "n"], math[v + "do_sample"], math[v + "temperature"]) == (16, True, 1.0)
    _, qa = flat_of("searchqa")  # one greedy answer (exact match)
    assert (qa[v + "n"], qa[v + "do_sample"], qa[v + "temperature"]) == (1, False, 0.0)


@pytest.mark.parametrize(
    "algo,extra,loss_mode,plugin_keys",
    [
        ("grpo", None, "vanilla", {}),
        (
            "grpo_sg",
            None,
            "grpo_sg",
            {"shaping_input": "prob", "alpha": 3.0, "tau": 0.5, "mu": 0.5, "lower": 0.1},
        ),
        ("grpo_sg", LOGIT, "vanilla", {}),
        ("reverse", None, "reverse", {"alpha": 6.4, "mu": 0.0, "upper": 2.0}),
        ("ar", None, "ar", {"ar_alpha": 0.2}),
        ("lopti", None, "vanilla", {}),
        ("entropy_top", None, "vanilla", {}),
    ],
)
def test_policy_loss_per_algorithm(algo, extra, loss_mode, plugin_keys):
    cfg, flat = flat_of("kk", algo, extra)
    p = A + "policy_loss."
    assert flat[p + "loss_mode"] == loss_mode
    assert flat["rlvr.algo"] == algo
    assert WeightConfig(**flat["rlvr.params"]).params(algo) == cfg.weights.params(algo)
    if plugin_keys:
        assert flat[p + "_target_"] == "rlvr.integrations.verl.plugin.RlvrPolicyLossConfig"
        assert flat[p + "weight_position"] == "surrogate"
        for key, value in plugin_keys.items():
            assert flat[p + key] == value
    else:
        assert p + "_target_" not in flat
    assert flat.get(A + "calculate_entropy", False) is (algo == "entropy_top")
    if extra == LOGIT:
        assert flat["rlvr.params"]["shaping_input"] == "logit"
        assert flat["rlvr.params"]["tau"] == 10.0
    if algo == "lopti":
        assert flat["rlvr.params"] == {"eta": 0.4}
    if algo == "ar":  # AR's alpha is the WeightConfig field ar_alpha
        assert flat["rlvr.params"] == {"ar_alpha": 0.2}


def test_rlvr_params_are_the_weight_fields_an_algorithm_reads():
    assert resolved_fields(WeightConfig(ar_alpha=0.1), "ar") == {"ar_alpha": 0.1}
    assert resolved_fields(WeightConfig(), "grpo") == {}
    assert resolved_fields(WeightConfig(fraction=0.3), "entropy_top") == {"fraction": 0.3}
    sg = resolved_fields(WeightConfig(shaping_input="logit", tau=2.0), "grpo_sg")
    assert sg == {
        "shaping_input": "logit",
        "alpha": 2.75,
        "tau": 2.0,
        "mu": 0.5,
        "lower": 0.1,
        "upper": 2.0,
    }
    _, flat = flat_of("math", "ar")  # the math recipe's AR alpha reaches verl
    assert flat["rlvr.params"] == {"ar_alpha": 0.1}
    assert flat[A + "policy_loss.ar_alpha"] == 0.1


def test_searchqa_section_and_agent_loop_overrides():
    _, flat = flat_of("searchqa")
    assert flat["rlvr.searchqa"] == {
        "retrieval_url": "http://127.0.0.1:8000",
        "max_turns": 2,
        "topk": 3,
    }
    assert flat["rlvr.max_tool_failure_rate"] == 0.05  # stop past 5% failed searches
    overrides = agent_loop_overrides("searchqa")  # written without verl installed
    assert overrides["actor_rollout_ref.rollout.agent.default_agent_loop"] == "rlvr_searchqa"
    assert agent_loop_overrides("kk") == {}
    for key, value in overrides.items():
        assert flat[key] == value
    _, kk = flat_of("kk")
    assert R + "multi_turn.enable" not in kk and "rlvr.searchqa" not in kk


def test_gpus_follow_the_plan():
    assert gpu_layout(2) == (2, 1) and gpu_layout(8) == (8, 1) and gpu_layout(16) == (8, 2)
    with pytest.raises(VerlTranslationError, match="multiple of 8"):
        gpu_layout(12)
    g = get_grid("paper")
    for key in ("kk", "kk-7b", "math", "searchqa"):
        cfg = train_config(g.settings[key], "grpo", 0)
        _, flat = flat_of(key, gpus=verl_gpus(g.settings[key], cfg))
        gpus = flat["trainer.n_gpus_per_node"] * flat["trainer.nnodes"]
        assert gpus == verl_gpus(g.settings[key], cfg)


@pytest.mark.parametrize(
    "native,key",
    [
        ({"loss.dual_clip": None}, "loss.dual_clip"),
        ({"rollout.backend": "hf"}, "rollout.backend"),
        ({"optim.schedule": "linear"}, "optim.schedule"),
        ({"mini_batch_size": 4, "micro_batch_size": 4}, "mini_batch_size"),
        ({"loss.adv_eps": 1e-8}, "loss.adv_eps"),
        ({"dtype": "float32"}, "dtype"),
        ({"old_logprobs": "rollout"}, "old_logprobs"),
        ({"rollout.stop": ["</x>"]}, "rollout.stop"),
        ({"error_reward": -1.0}, "error_reward"),
        ({"optim.grad_clip": 0.0}, "optim.grad_clip"),
        ({"rollout.max_turn_tokens": 64}, "rollout.max_turn_tokens"),
    ],
)
def test_inexpressible_settings_raise_one_line(native, key):
    with pytest.raises(VerlTranslationError) as e:
        flat_of("kk", "grpo", native)
    assert str(e.value).startswith(key + "=") and "\n" not in str(e.value)


# -- run.sh --------------------------------------------------------------------------------------
RECORDER = """#!/usr/bin/env bash
# Stands in for python in run.sh: logs each call, fakes data and the retrieval service.
set -euo pipefail
if [[ "$1" == -c ]]; then exec "$REAL_PYTHON" "$@"; fi
module="$2"; shift 2
echo "$module $* | VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-}" >> "$LOG"
case "$module" in
  rlvr.reproduce.verl.run_tools) echo 7 ;;
  rlvr.cli)
    if [[ "$1" == prepare-verl ]]; then
      while [[ $# -gt 0 ]]; do [[ "$1" == --out ]] && touch "$2"; shift; done
    else
      port="$(echo "$@" | sed -E 's/.*--port ([0-9]+).*/\\1/')"
      echo $$ > "$SERVER_PID_FILE"
      exec "$REAL_PYTHON" -m http.server "$port" --bind 127.0.0.1 --directory "$SERVE_DIR"
    fi ;;
  rlvr.integrations.verl.main) ;;
  rlvr.integrations.verl.cluster)  # the real check, on SIMULATED_NODES for ray.nodes()
    exec "$REAL_PYTHON" -c 'import json, os, sys
from rlvr.integrations.verl.data import check_service_reachable
env, url = sys.argv[2], sys.argv[4]  # --env ENV --url URL
try:
    check_service_reachable(env, url, json.loads(os.environ.get("SIMULATED_NODES", "[]")))
except ValueError as e:
    sys.exit(f"error: {e}")' "$@" ;;
esac
"""
#: ``ray.nodes()`` of a cluster of two nodes with CPUs and GPUs (the fields verl reads).
TWO_NODES = [
    {
        "NodeID": c * 56,
        "Alive": True,
        "NodeManagerAddress": f"10.0.0.{i}",
        "Resources": {"CPU": 64.0, "GPU": 8.0},
    }
    for i, c in ((1, "a"), (2, "b"))
]


def run_script(path: Path, tmp: Path, **env) -> subprocess.CompletedProcess:
    recorder = tmp / "python"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    serve = tmp / "serve"
    serve.mkdir(exist_ok=True)
    (serve / "health").write_text("{}")
    full = {
        **os.environ,
        "PYTHON": str(recorder),
        "REAL_PYTHON": sys.executable,
        "LOG": str(tmp / "log"),
        "SERVER_PID_FILE": str(tmp / "server.pid"),
        "SERVE_DIR": str(serve),
        **env,
    }
    args = env.get("ARGS", "").split()
    return subprocess.run(
        ["bash", str(path), *args], env=full, capture_output=True, text=True, timeout=120
    )


def test_run_sh_prepares_once_then_launches(launch, tmp_path):
    out, _ = launch
    run = out / "runs" / "kk__grpo__seed1"
    proc = run_script(run / "run.sh", tmp_path)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "log").read_text().splitlines()
    prepares = [line for line in log if line.startswith("rlvr.cli prepare-verl")]
    assert len(prepares) == 6  # train + one test file per size 3..7
    counts = [line for line in log if line.startswith("rlvr.reproduce.verl.run_tools count")]
    assert "--split train --cap 22528 " in counts[0]
    # the native periodic evaluation's 100 puzzles, shared by the five sizes
    assert all("--split test --cap 20 " in line for line in counts[1:]) and len(counts) == 6
    assert "--n 7 " in prepares[0] and "--env-arg n_people=[3, 4, 5, 6, 7]" in prepares[0]
    assert (out / "data" / "kk" / "train.parquet").exists()
    main_call = [line for line in log if line.startswith("rlvr.integrations.verl.main")]
    assert len(main_call) == 1
    assert f"--config-path {run} --config-name config" in main_call[0]
    assert f"VERL_FILE_LOGGER_PATH={run}/metrics.jsonl" in main_call[0]
    assert (run / "DONE").exists()
    (run / "DONE").unlink()
    assert run_script(run / "run.sh", tmp_path, ARGS="--check").returncode == 0
    assert not (run / "DONE").exists()  # verl_main --check validates only
    (tmp_path / "log").unlink()
    (run / "metrics.jsonl").write_text('{"step": 1, "data": {}}\n')  # a first attempt's lines
    assert run_script(run / "run.sh", tmp_path).returncode == 0
    assert not any("prepare-verl" in x for x in (tmp_path / "log").read_text().splitlines())
    assert (run / "metrics.001.jsonl").read_text().startswith('{"step": 1')
    assert not (run / "metrics.jsonl").exists()  # the recorder wrote none: verl would


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_searchqa_run_sh_serves_retrieval_and_stops_it(tmp_path):
    g = get_grid("paper")
    port = free_port()
    g.settings["searchqa"].train["env_kwargs.retriever"] = f"http://127.0.0.1:{port}"
    out = tmp_path / "launch"
    write(g, ["table_qa"], [0], out, "test")
    script = out / "runs" / "searchqa__grpo__seed0" / "run.sh"
    missing = run_script(script, tmp_path)
    assert missing.returncode != 0 and "RLVR_INDEX" in missing.stderr
    proc = run_script(script, tmp_path, RLVR_INDEX=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "log").read_text()
    assert f"retrieval-serve --index {tmp_path} --host 127.0.0.1 --port {port}" in log
    pid = int((tmp_path / "server.pid").read_text())
    with pytest.raises(ProcessLookupError):  # the trap stopped the service on exit
        os.kill(pid, 0)
    remote = run_script(script, tmp_path, RLVR_RETRIEVAL_URL="http://10.1.2.3:9000")
    assert remote.returncode == 0
    assert "rlvr.searchqa.retrieval_url=http://10.1.2.3:9000" in (tmp_path / "log").read_text()


def test_searchqa_run_sh_on_two_nodes_needs_a_reachable_url(tmp_path):
    """verl places agent-loop workers on every node: served on loopback, the other node's
    searches would all fail, so run.sh refuses in one line before it starts the service."""
    g = get_grid("paper")
    out = tmp_path / "launch"
    write(g, ["table_qa"], [0], out, "test")
    script = out / "runs" / "searchqa__grpo__seed0" / "run.sh"
    two = json.dumps(TWO_NODES)
    proc = run_script(script, tmp_path, RLVR_INDEX=str(tmp_path), SIMULATED_NODES=two)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: rlvr.searchqa.retrieval_url=http://127.0.0.1:8000 is a loopback address, but "
        "verl places its agent-loop workers on all 2 nodes"
    ), proc.stderr
    log = (tmp_path / "log").read_text()
    assert "retrieval-serve" not in log and "rlvr.integrations.verl.main" not in log
    for url in ("http://localhost:8000", "http://[::1]:8000"):
        proc = run_script(script, tmp_path, RLVR_RETRIEVAL_URL=url, SIMULATED_NODES=two)
        assert proc.returncode == 2 and "loopback" in proc.stderr
    (tmp_path / "log").unlink()
    reachable = run_script(
        script, tmp_path, RLVR_RETRIEVAL_URL="http://10.0.0.1:8000", SIMULATED_NODES=two
    )
    assert reachable.returncode == 0, reachable.stderr
    assert "rlvr.searchqa.retrieval_url=http://10.0.0.1:8000" in (tmp_path / "log").read_text()


def test_a_loopback_url_is_refused_only_where_workers_spread_over_nodes():
    one_alive = [TWO_NODES[0], {**TWO_NODES[1], "Alive": False}]
    gpu_only = [TWO_NODES[0], {**TWO_NODES[1], "Resources": {"GPU": 8.0}}]
    for nodes in ([], TWO_NODES[:1], one_alive, gpu_only):
        check_service_reachable("searchqa", "http://127.0.0.1:8000", nodes)
    check_service_reachable("searchqa", "http://10.0.0.1:8000", TWO_NODES)
    for url in ("http://127.0.0.1:8000", "http://127.0.1.1:8000", "http://localhost:1"):
        with pytest.raises(ValueError, match="loopback address.*all 2 nodes") as e:
            check_service_reachable("searchqa", url, TWO_NODES)
        assert "\n" not in str(e.value)


# -- helpers and the command line ----------------------------------------------------------------
def test_count_caps_the_export(capsys):
    assert main(["count", "kk", "--split", "train", "--cap", "5"]) == 0  # procedural: unbounded
    assert capsys.readouterr().out.strip() == "5"
    main(["count", "kk", "--split", "test", "--cap", "100000", "--env-arg", "n_people=3"])
    assert 0 < int(capsys.readouterr().out) < 100000


def test_cli_engine_flag(tmp_path, capsys):
    with pytest.raises(SystemExit, match="--out"):
        rlvr_main(["reproduce", "fig2", "--grid", "paper", "--engine", "verl"])
    with pytest.raises(SystemExit, match="--grid paper"):
        rlvr_main(["reproduce", "fig2", "--engine", "verl", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="use one"):
        rlvr_main(
            ["reproduce", "fig2", "--grid", "paper", "--engine", "verl"]
            + ["--out", str(tmp_path), "--from-verl", str(tmp_path)]
        )
    code = rlvr_main(
        [
            "reproduce",
            "fig2",
            "--grid",
            "paper",
            "--engine",
            "verl",
            "--seeds",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["engine"] == "verl" and summary["runs"] == 4  # 3 methods + the logit form
    assert (tmp_path / "runs" / "kk__grpo_sg-logit__seed0" / "config.yaml").exists()


def test_wall_time_bound_counts_generation_updates_and_validation():
    from rlvr.reproduce.gpu_plan import param_count
    from rlvr.reproduce.verl.launch import estimate_hours

    setting = get_grid("paper").settings["kk"]
    cfg, flat = flat_of("kk", "grpo", {"eval.every": 0}, gpus=2)
    tokens = 352 * 64 * 8 * (400 + 4096)
    flops = tokens * param_count(setting.arch) * (2 + 2 + 2 + 6)
    assert estimate_hours(setting, cfg, 2, flat, 0) == pytest.approx(
        flops / (2 * 989e12 * 0.15) / 3600
    )
    lopti, lflat = flat_of("kk", "lopti", {"eval.every": 0}, gpus=2)  # two update passes
    assert estimate_hours(setting, lopti, 2, lflat, 0) / estimate_hours(
        setting, cfg, 2, flat, 0
    ) == pytest.approx(18 / 12)
    cfg, flat = flat_of("kk", "grpo", gpus=2)  # 18 validations of 100 tasks x 8 samples
    extra = 18 * 100 * 8 * (400 + 4096) * 2 * param_count(setting.arch)
    assert estimate_hours(setting, cfg, 2, flat, 100) == pytest.approx(
        (flops + extra) / (2 * 989e12 * 0.15) / 3600
    )


# -- what reaches vLLM and the actor (issue 25) ----------------------------------------------------
#: Qwen2.5-7B-Instruct-1M's config.json, with the fields of its model card (no download).
CARD_1M = json.loads(
    (Path(__file__).parent / "data" / "qwen2.5-7b-instruct-1m.config.json").read_text()
)


def test_every_config_has_a_numeric_max_model_len(launch):
    """verl takes the model's max_position_embeddings when ``rollout.max_model_len`` is null
    (1,010,000 for Qwen2.5-7B-Instruct-1M, ``vllm_async_server.py`` ~1104): every generated
    config sets the run's prompt + response budget instead."""
    out, rows = launch
    assert len(rows) == 84
    for row in rows:
        config, record = load(out, row["run_key"])
        rollout = config["actor_rollout_ref"]["rollout"]
        budget = config["data"]["max_prompt_length"] + config["data"]["max_response_length"]
        assert type(rollout["max_model_len"]) is int and rollout["max_model_len"] == budget
        assert record["memory"]["max_model_len"] == budget


def test_dual_chunk_attention_is_removed_for_the_models_that_have_it(launch):
    """The grid's facts of Qwen2.5-7B-Instruct-1M agree with its config.json (the fixture), and
    every run of it, and no other, removes ``dual_chunk_attention_config`` through
    ``engine_kwargs.vllm.hf_overrides``, recorded in rlvr_run.json."""
    from rlvr.agents.rollout.vllm import hf_overrides

    arch = get_grid("paper").settings["kk-7b"].arch
    shape = {"hidden": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads"}
    shape |= {
        "kv_heads": "num_key_value_heads",
        "inter": "intermediate_size",
        "vocab": "vocab_size",
    }
    assert {k: CARD_1M[v] for k, v in shape.items()} == {k: arch[k] for k in shape}
    assert hf_overrides(arch) == hf_overrides(CARD_1M) == {"dual_chunk_attention_config": None}
    out, rows = launch
    models = set()
    for row in rows:
        config, record = load(out, row["run_key"])
        vllm_args = config["actor_rollout_ref"]["rollout"].get("engine_kwargs", {}).get("vllm", {})
        if record["model"] == "Qwen/Qwen2.5-7B-Instruct-1M":
            models.add(record["setting"])
            assert vllm_args == {"hf_overrides": {"dual_chunk_attention_config": None}}
            assert record["hf_overrides"] == vllm_args["hf_overrides"]
            assert set(record["removed_config_keys"]) == {"dual_chunk_attention_config"}
        else:
            assert vllm_args == {} and record["hf_overrides"] == {}
    assert models == {"kk-7b"}


def test_the_actor_uses_sdpa_and_the_readme_says_why(launch):
    out, rows = launch
    for row in rows:
        config, record = load(out, row["run_key"])
        model = config["actor_rollout_ref"]["model"]
        assert model["override_config"] == {"attn_implementation": "sdpa"}
        assert record["attn_implementation"] == "sdpa"
    readme = (out / "README.md").read_text()
    assert "verl[vllm]==0.9.1" in readme and "`sdpa`" in readme and "flash-attn" in readme


def test_gpu_memory_utilization_comes_from_the_plan(launch):
    """Each run's ``gpu_memory_utilization`` is its memory plan's: the KV cache it leaves holds
    every rollout of the engine at full length, beside the FSDP shards, within the GPU; the
    README prints the plan per run."""
    from rlvr.reproduce.gpu_plan import GPUS

    out, rows = launch
    readme = (out / "README.md").read_text()
    for row in rows:
        config, record = load(out, row["run_key"])
        mem = record["memory"]
        rollout = config["actor_rollout_ref"]["rollout"]
        assert rollout["gpu_memory_utilization"] == mem["gpu_memory_utilization"] < 1
        assert mem["kv_sequences"] >= mem["sequences_per_engine"]
        per_token = mem["kv_bytes_per_token"] * mem["max_model_len"]
        assert mem["kv_cache_GiB"] * 2**30 >= 0.99 * mem["sequences_per_engine"] * per_token
        used = mem["trainer_resident_GiB"] + mem["gpu_memory_utilization"] * GPUS[record["gpu"]]
        assert used <= GPUS[record["gpu"]] - 1.0
        assert (
            f"{mem['gpu_memory_utilization']:.2f}, KV {mem['kv_cache_GiB']:.1f} GiB/GPU" in readme
        )
    assert len({load(out, r["run_key"])[1]["memory"]["gpu_memory_utilization"] for r in rows}) > 1


def test_a_1m_run_reads_a_model_view_without_the_sparse_attention_file(launch, tmp_path):
    """vLLM's verify step writes a model folder's sparse_attention_config.json into
    ``dual_chunk_attention_config``, which the override made None: a kk-7b run.sh points the actor
    and vLLM at a view of the snapshot without that file (and only kk-7b runs do)."""
    from rlvr.reproduce.verl.run_tools import model_view

    out, rows = launch
    for row in rows:
        text = (out / "runs" / row["run_key"] / "run.sh").read_text()
        assert ("model-view" in text) == (row["setting"] == "kk-7b"), row["run_key"]
    run = out / "runs" / "kk-7b__grpo__seed0"
    proc = run_script(run / "run.sh", tmp_path, RLVR_MODEL_VIEWS=str(tmp_path / "views"))
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "log").read_text().splitlines()
    view = tmp_path / "views" / "Qwen--Qwen2.5-7B-Instruct-1M"
    assert any(
        line.startswith("rlvr.reproduce.verl.run_tools model-view Qwen/Qwen2.5-7B-Instruct-1M ")
        and f"--out {view} --drop sparse_attention_config.json" in line
        for line in log
    ), log
    main_call = [line for line in log if line.startswith("rlvr.integrations.verl.main")]
    assert f"actor_rollout_ref.model.path={view}" in main_call[0]
    (run / "DONE").unlink()

    # The view itself, from a local snapshot with the model card's files.
    snap = tmp_path / "snapshot"
    snap.mkdir()
    (snap / "config.json").write_text(json.dumps(CARD_1M))
    (snap / "sparse_attention_config.json").write_text("{}")
    (snap / "model-00001-of-00004.safetensors").write_bytes(b"\0" * 16)
    (snap / "tokenizer.json").write_text("{}")
    got = model_view(str(snap), tmp_path / "v", ["sparse_attention_config.json"])
    names = sorted(p.name for p in got.iterdir())
    assert names == [
        "config.json",
        "model-00001-of-00004.safetensors",
        "rlvr_model_view.json",
        "tokenizer.json",
    ]
    assert json.loads((got / "config.json").read_text()) == CARD_1M
    assert (got / "tokenizer.json").resolve() == (snap / "tokenizer.json").resolve()
    assert model_view(str(snap), tmp_path / "v", ["sparse_attention_config.json"]) == got
    with pytest.raises(SystemExit, match="already"):
        model_view(str(snap), tmp_path / "v", [])
    assert main(["model-view", str(snap), "--out", str(tmp_path / "w"), "--drop", "x"]) == 0


def test_a_multi_turn_env_brings_its_agent_loop_section_and_service():
    """The verl path reads a multi-turn environment's agent loop, its config section and the
    service it calls from the registry (``EnvSpec.verl``): a toy declared in the test gets its
    ``rlvr.<env>`` section, its overrides, the loopback check and run.sh's service block."""
    from rlvr.envs import EnvSpec, VerlService, VerlSpec
    from rlvr.integrations.verl.data import agent_loop_section
    from rlvr.reproduce.verl.launch import DataFile
    from rlvr.reproduce.verl.run_script import run_sh

    from _rlvr_toys import ToolEnv, registered, toy_score

    service = VerlService(
        what="Toy: the counter service",
        url_key="url",
        serve='toy-serve --data "$TOY_DATA" --port {port} --turns {turns}',
        url_var="TOY_URL",
        source_var="TOY_DATA",
        source_help="a folder of counts",
    )
    toy = EnvSpec(
        name="toy_mt",
        id="rlvr-test/ToyMultiTurn-v0",
        entry_point=ToolEnv,
        scorer=toy_score,
        min_reward=0.0,
        multi_turn=True,
        stop=("</call>",),
        verl=VerlSpec(
            agent_loop="rlvr_toy_mt",
            section=lambda kw: {"url": kw["service"], "turns": int(kw.get("turns", 2))},
            section_keys={"url": "service", "turns": "turns"},
            task=lambda info, gold: {"question": info.get("question", "")},
            service=service,
        ),
    )
    with registered(toy):
        section = {"url": "http://127.0.0.1:9100", "turns": 2}
        assert agent_loop_section("toy_mt", {"service": section["url"]}) == ("toy_mt", section)
        overrides = agent_loop_overrides("toy_mt")
        assert overrides["actor_rollout_ref.rollout.agent.default_agent_loop"] == "rlvr_toy_mt"
        with pytest.raises(ValueError, match=r"rlvr\.toy_mt\.url=.*`rlvr toy-serve .*TOY_URL"):
            check_service_reachable("toy_mt", section["url"], TWO_NODES)
        data = DataFile("toy_mt", "train", 4, (), "train")
        record = {"task": "toy_mt", "hf_overrides": {}, "model": "m", "run_key": "r",
                  "setting": "toy", "tag": "grpo", "seed": 0, "gpus": 1,
                  "native_config_hash": "0" * 12}  # fmt: skip
        files = {"record": record, "data": (data, data), "folder": "toy_mt",
                 "config": {"rlvr": {"toy_mt": section}}}  # fmt: skip
        script = run_sh(files, "rlvr reproduce test")
    assert "rlvr.integrations.verl.cluster --env toy_mt" in script
    assert '-m rlvr.cli toy-serve --data "$TOY_DATA" --port 9100 --turns 2 &' in script
    assert 'OVERRIDES+=("rlvr.toy_mt.url=$TOY_URL")' in script
    assert "http://127.0.0.1:9100/health" in script and "TOY_DATA:?set TOY_DATA" in script
