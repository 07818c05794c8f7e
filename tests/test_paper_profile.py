"""The paper profile without GPUs or a network: every config's memory plan passes the trainer's
own check on the GPU it names (or is routed to verl), and every config builds its environments,
offline, up to a one-line error naming ``rlvr fetch-data``; with the fetched copies in place they
build and reset."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import pytest
import torch

import rlvr  # noqa: F401  (registers the envs)
from rlvr.agents.memory import VERL_ROUTE, check_fits
from rlvr.config import ConfigError
from rlvr.envs import ENVS
from rlvr.eval.runner import make_env
from rlvr.reproduce import gpu_plan, grid
from rlvr.reproduce.runs import eval_config, train_config
from rlvr.reproduce.table_kk import KK_METHODS

PAPER = grid.paper_grid()


def _envs(setting):
    """(label, env id or short name, split, kwargs) of every env a setting's runs build."""
    cfg = train_config(setting, "grpo_sg", 0)
    out = [("train", ENVS[cfg.env].id, None, dict(cfg.env_kwargs))]
    if cfg.eval.every:
        out.append(("periodic eval", ENVS[cfg.env].id, "test", dict(cfg.env_kwargs)))
    for name, eset in setting.eval_sets.items() or [("eval", None)]:
        ec = eval_config(setting, cfg, setting.model, eval_set=eset)
        out.append((name, ec.env, ec.split, dict(ec.env_kwargs)))
    return out


def _build(env, split, kwargs):
    if split is None:
        return gym.make(env, **kwargs)
    if env.startswith("rlvr/"):
        return gym.make(env, **{**kwargs, "split": split})
    return make_env(env, split, **kwargs)


@pytest.mark.parametrize("key", list(PAPER.settings))
def test_memory_plan_passes_the_trainers_check_or_goes_to_verl(key):
    setting = PAPER.settings[key]
    rows = {r["setting"]: r for r in gpu_plan.plan_rows(PAPER)}
    for algo in KK_METHODS:
        cfg = train_config(setting, algo, 0)
        assert cfg.micro_batch_size and cfg.gradient_checkpointing and cfg.dtype == "bfloat16"
        est = gpu_plan.native_estimate(setting, cfg)
        if rows[key]["engine"] == "native":
            check_fits(est)  # the trainer's own check, on the GPU the setting names
            assert rows[key]["gpus"] == f"1x {setting.gpu}"
        else:
            with pytest.raises(MemoryError, match="verl") as e:
                check_fits(est)
            assert "\n" not in str(e.value) and VERL_ROUTE in str(e.value)


def test_engines_the_plan_chooses():
    rows = {r["setting"]: r for r in gpu_plan.plan_rows(PAPER)}
    # 3B: 16 B/param of fp32 master weights, gradients and AdamW (46 GiB) + reference fits one
    # H200; 7B (113 GiB + 28 GiB reference) fits no single GPU.
    assert rows["kk"]["engine"] == rows["searchqa"]["engine"] == "native"
    assert rows["kk-7b"]["engine"] == rows["math"]["engine"] == "verl"
    assert rows["kk-7b"]["gpus"] == "8x H100-80GB"
    with pytest.raises(ConfigError, match="kk-7b, math do not fit one GPU.*verl"):
        gpu_plan.check_engines(PAPER)


def test_native_path_refuses_a_seven_b_run_in_one_line():
    """What the trainer's memory check says for a 7B paper run on one H200."""
    setting = grid.replace(PAPER.settings["kk-7b"], gpu="H200-141GB")
    with pytest.raises(MemoryError) as e:
        check_fits(gpu_plan.native_estimate(setting, train_config(setting, "grpo", 0)))
    assert "does not fit one GPU" in str(e.value) and "verl" in str(e.value)


def test_every_paper_env_fails_offline_in_one_line_naming_the_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    monkeypatch.setenv("RLVR_SHARED_DATA", str(tmp_path / "no-shared-data"))
    monkeypatch.setitem(sys.modules, "datasets", None)  # no hub
    for key, setting in PAPER.settings.items():
        for label, env, split, kwargs in _envs(setting):
            with pytest.raises((ImportError, FileNotFoundError)) as e:
                _build(env, split, kwargs)
            msg = str(e.value)
            assert "\n" not in msg and "rlvr fetch-data " in msg, (key, label, msg)


def _rows(repo: str, config: str | None, split: str) -> list[dict]:
    """Two rows in the layout of each hub dataset."""
    if repo == "K-and-K/knights-and-knaves":
        n = int(split[0])
        names = [f"P{i}" for i in range(n)]
        return [
            {
                "quiz": f"You meet {n} inhabitants: {', '.join(names)}.",
                "names": names,
                "solution": [i % 2 == 0 for i in range(n)],
                "index": j,
            }
            for j in range(2)
        ]
    if repo == "RUC-NLPIR/FlashRAG_datasets":
        return [
            {"id": str(j), "question": f"{config} q{j}?", "golden_answers": [f"a{j}"]}
            for j in range(2)
        ]
    if repo == "math-ai/minervamath":
        return [{"problem": f"p{j}", "solution": f"so \\boxed{{{j}}}"} for j in range(2)]
    if repo == "Hothan/OlympiadBench":
        return [{"question": f"p{j}", "final_answer": [f"${j}$"]} for j in range(2)]
    return [{"problem": f"p{j}", "answer": str(j), "solution": f"\\boxed{{{j}}}"} for j in range(2)]


def test_fetch_data_paper_covers_every_paper_env(tmp_path, monkeypatch):
    from rlvr.data_paths import fetched_file
    from rlvr.fetch_data import paper_targets

    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    monkeypatch.setenv("RLVR_SHARED_DATA", str(tmp_path / "no-shared-data"))
    monkeypatch.setitem(sys.modules, "datasets", None)
    for repo, config, split in paper_targets():
        path = fetched_file(repo, config, split)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in _rows(repo, config, split)))
    for key, setting in PAPER.settings.items():
        for label, env, split, kwargs in _envs(setting):
            e = _build(env, split, kwargs)
            prompt, info = e.reset(seed=0, options={"index": 0})
            assert prompt and info, (key, label)
            if env.endswith("SearchQA-v0") or env == "searchqa":
                assert e.unwrapped.topk == 3 and e.unwrapped.max_turns == 2
                assert e.unwrapped.retriever.url.startswith(grid.QA_RETRIEVER)


def test_hub_models_get_no_silent_smoke_sft(tmp_path):
    from rlvr.reproduce.sft_reference import ensure_sft_reference

    assert PAPER.sft_reference is False
    with pytest.raises(ConfigError, match="only tiny presets have"):
        ensure_sft_reference(PAPER.settings["kk"], 0, 60.0, tmp_path)


def test_meta_model_matches_the_public_parameter_counts():
    for name, arch in grid.QWEN_ARCH.items():
        m = gpu_plan.meta_model(arch)
        assert sum(p.numel() for p in m.parameters()) == gpu_plan.param_count(arch)
        assert next(m.parameters()).device == torch.device("meta")


def test_fetch_data_targets_and_round_trip(tmp_path, monkeypatch):
    """``rlvr fetch-data`` writes what ``hub_rows`` reads. The hub is out of reach here, so a
    stand-in ``datasets.load_dataset`` returns rows (the file layout is what is tested)."""
    import types

    from rlvr.cli import main
    from rlvr.data_paths import hub_rows
    from rlvr.fetch_data import targets

    assert ("RUC-NLPIR/FlashRAG_datasets", "hotpotqa", "dev") in targets("flashrag:nq+hotpotqa")
    assert ("RUC-NLPIR/FlashRAG_datasets", "nq", "train") in targets("flashrag:nq+hotpotqa")
    assert targets("deepscaler") == [("agentica-org/DeepScaleR-Preview-Dataset", None, "train")]
    assert len(targets("K-and-K/knights-and-knaves")) == 14
    with pytest.raises(SystemExit, match="unknown dataset"):
        main(["fetch-data", "nope"])
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(SystemExit, match=r"rlvr\[hub\]"):
        main(["fetch-data", "deepscaler"])
    served = []

    def load_dataset(repo, config, split):
        served.append((repo, config, split))
        return [{"problem": "1+1", "answer": "2", "split": split}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert main(["fetch-data", "deepscaler", "math500"]) == 0
    assert served == [
        ("agentica-org/DeepScaleR-Preview-Dataset", None, "train"),
        ("HuggingFaceH4/MATH-500", None, "test"),
    ]
    monkeypatch.setitem(sys.modules, "datasets", None)
    rows = hub_rows("agentica-org/DeepScaleR-Preview-Dataset", None, "train", fetch="deepscaler")
    assert rows == [{"problem": "1+1", "answer": "2", "split": "train"}]
    from rlvr.envs.math.data import load_dataset as load_math

    assert load_math("agentica-org/DeepScaleR-Preview-Dataset", "train")[0]["ground_truth"] == "2"


def test_rollout_memory_plan():
    """The KV cache facts behind the plan (issue 25): Qwen2.5-7B keeps 56 KiB of bf16 K and V per
    token (28 layers x 4 KV heads x 128 x 2 x 2 B), so one sequence at its 1,010,000-token
    max_position_embeddings needs ~54 GiB; at the paper's 400 + 4096 tokens and 512 rollouts
    over 8 engines, each engine holds 64 sequences. The sized ``gpu_memory_utilization`` holds
    them all; the profile's constant 0.3 on one H200 holds fewer for the 3B native run, and the
    plan says how many."""
    s7 = PAPER.settings["kk-7b"]
    assert gpu_plan.kv_bytes_per_token(s7.arch) == 57344
    assert 1_010_000 * 57344 / 2**30 == pytest.approx(53.9, abs=0.05)
    cfg = train_config(s7, "grpo", 0)
    mem = gpu_plan.verl_rollout_memory(s7, cfg, gpu_plan.verl_gpus(s7, cfg))
    assert (mem.engines, mem.sequences, mem.tokens) == (8, 64, 4496)
    assert mem.fits and mem.kv_sequences >= 64 and not mem.optimizer_offload
    assert mem.gpu_memory_utilization == pytest.approx(0.43)
    # Three GPUs: AdamW leaves for CPU memory so that the KV cache fits; two: nothing fits.
    three = gpu_plan.verl_rollout_memory(s7, cfg, 3)
    assert three.fits and three.optimizer_offload and three.kv_sequences >= three.sequences
    assert not gpu_plan.verl_rollout_memory(s7, cfg, 2).fits
    native = gpu_plan.native_rollout_memory(
        PAPER.settings["kk"], train_config(PAPER.settings["kk"], "grpo", 0)
    )
    assert native.gpu_memory_utilization == 0.3 and 0 < native.kv_sequences < native.sequences
    rows = {r["setting"]: r for r in gpu_plan.plan_rows(PAPER)}
    assert rows["kk-7b"]["vllm_gmu"] == 0.43 and rows["kk-7b"]["kv_holds"] == "64/64"
    assert rows["kk"]["kv_holds"] == f"{native.kv_sequences}/512"
    assert "kv_GiB_per_gpu" in gpu_plan.PLAN_NOTE
