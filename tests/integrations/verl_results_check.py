"""Reading verl's results back (``rlvr.reproduce.verl.results``) from files verl 0.9.1 itself
wrote.

Run inside verl's venv by ``scripts/test_integrations.sh verl``. The metrics come from verl's own
metric functions (``verl/trainer/ppo/metric_utils.py``) and are written by its own
``FileLogger`` (``verl/utils/tracking.py``); the checkpoint is written by its own
``FSDPCheckpointManager`` (``verl/utils/checkpoint/fsdp_checkpoint_manager.py``) around an FSDP2
model on the CPU (a one-process gloo group), at the path ``RayPPOTrainer._save_checkpoint`` gives it
(``<default_local_dir>/global_step_<N>/actor``).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.distributed as dist
from verl import DataProto
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
)
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict
from verl.utils.tracking import FileLogger

from rlvr.models import build_micro, load_model
from rlvr.reproduce import grid, keys, runs
from rlvr.reproduce.plan import PlannedRun
from rlvr.reproduce.verl.results import METRIC_NAMES, VerlRuns, folder_name, read_metrics

P, R, B = 4, 6, 4  # prompt and response widths, batch size


def batch(step: int) -> DataProto:
    """A rollout batch as verl's trainer holds it after the advantage step (left-padded
    prompts, right-padded responses, the score on the last response token)."""
    g = torch.Generator().manual_seed(step)
    resp_len = torch.tensor([R, 3, 1, 5])
    prompt_len = torch.tensor([P, 2, 3, P])
    prompt_mask = torch.arange(P).flip(0).unsqueeze(0) < prompt_len.unsqueeze(1)
    response_mask = torch.arange(R).unsqueeze(0) < resp_len.unsqueeze(1)
    scores = torch.zeros(B, R)
    seq_scores = torch.tensor([3.0, -1.5, -2.0, 3.0]) * (step / 2)
    scores[torch.arange(B), resp_len - 1] = seq_scores
    adv = torch.randn(B, 1, generator=g).expand(B, R) * response_mask
    data = DataProto.from_dict(
        tensors={
            "prompts": torch.randint(0, 50, (B, P), generator=g),
            "responses": torch.randint(0, 50, (B, R), generator=g),
            "attention_mask": torch.cat([prompt_mask, response_mask], 1).long(),
            "response_mask": response_mask.long(),
            "token_level_scores": scores,
            "token_level_rewards": scores,
            "advantages": adv,
            "returns": adv,
        },
        meta_info={"global_token_num": (prompt_len + resp_len).tolist()},
    )
    return data


def trainer_metrics(step: int) -> dict:
    """What ``RayPPOTrainer.fit`` logs for a training step: the update's metrics (reduced and
    prefixed ``actor/`` as ``_update_actor`` does), the entropy of the old-log-prob pass, and the
    data, timing and throughput metrics of the batch."""
    timing = {"gen": 2.0 + step, "update_actor": np.float64(1.5), "step": 4.0}
    actor = rename_dict(
        reduce_metrics(
            {
                "grad_norm": [np.float32(0.5 * step)],
                "actor/pg_loss": [np.float32(0.1), 0.3],
                "lr": 1e-6,
                "actor/pg_clipfrac": [float("nan")],
            }
        ),
        "actor/",
    )
    return {
        **actor,
        "actor/entropy": np.float32(1.25),
        "training/global_step": step,
        "training/epoch": np.int64(0),
        **compute_data_metrics(batch=batch(step), use_critic=False),
        **compute_timing_metrics(batch=batch(step), timing_raw=timing),
        **compute_throughout_metrics(batch=batch(step), timing_raw=timing, n_gpus=1),
    }


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def shard(model):
    """FSDP2 over the one-process group, as verl's FSDP workers wrap the actor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    return model


def save_with_verl(model, tokenizer, run_folder, step: int, contents: list[str]) -> None:
    """``RayPPOTrainer._save_checkpoint``'s call: the actor's checkpoint manager saves to
    ``<default_local_dir>/global_step_<step>/actor``."""
    manager = FSDPCheckpointManager(
        model=model,
        optimizer=None,
        lr_scheduler=None,
        processing_class=tokenizer,
        checkpoint_config={"save_contents": contents, "load_contents": ["model"]},
    )
    local = run_folder / "checkpoints" / f"global_step_{step}" / "actor"
    manager.save_checkpoint(str(local), global_step=step)


def test_verl_metric_names_are_the_ones_verl_logs():
    """Every name of the table that a single-turn batch without KL in the loss produces is one
    verl's functions really log (the rest: ``num_turns/*`` of multi-turn batches, ``kl_loss``,
    ``pg_clipfrac_lower`` and ``ppo_kl`` of the policy loss, rlvr's ``actor/rlvr_*``)."""
    logged = set(trainer_metrics(1))
    single_turn = {
        n
        for n in METRIC_NAMES
        if not n.startswith(("num_turns/", "actor/rlvr_"))
        and n not in ("actor/kl_loss", "actor/pg_clipfrac_lower", "actor/ppo_kl")
    }
    assert single_turn - logged == set()


def test_file_logger_output_reads_back_as_native_metrics(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger(project_name="rlvr", experiment_name="kk__grpo__seed0")
    logger.log(data={"val-core/kk/acc/mean@1": np.float64(0.25)}, step=0)  # val_before_train
    for step in (1, 2, 3):
        logger.log(data=trainer_metrics(step), step=step)
    logger.finish()
    recs = read_metrics(tmp_path)
    assert [r["step"] for r in recs] == [1, 2, 3]
    for r in recs:
        step = r["step"]
        want = trainer_metrics(step)
        assert r["grad_norm"] == pytest.approx(0.5 * step)
        assert r["reward/mean"] == pytest.approx(np.mean([3.0, -1.5, -2.0, 3.0]) * step / 2)
        assert r["response_length"] == pytest.approx(np.mean([R, 3, 1, 5]))
        assert r["finish/length"] == pytest.approx(0.25)  # one response hit the width
        assert r["tokens/update"] == sum([P, 2, 3, P]) + sum([R, 3, 1, 5])
        assert r["time/rollout_s"] == 2.0 + step and r["time/update_s"] == 1.5
        assert r["entropy"] == 1.25 and r["pg_loss"] == pytest.approx(0.2)
        assert math.isnan(r["clip_frac"])  # orjson writes NaN as null
        assert r["training/epoch"] == want["training/epoch"]


def test_checkpoint_saved_by_verl_is_the_run_final_model(tmp_path, process_group):
    g = grid.tiny_grid(smoke=True)
    cfg = runs.train_config(g.settings["kk"], "grpo", 0)
    folder = tmp_path / "runs" / folder_name("kk", "grpo", 0)
    folder.mkdir(parents=True)
    (folder / "rlvr_run.json").write_text(
        json.dumps(
            {
                "task": "kk",
                "setting": "kk",
                "algo": "grpo",
                "seed": 0,
                "model": cfg.model,
                "params": {},
                "native_config_hash": keys.run_key(cfg),
                "run_key": folder.name,
                "engine": "verl",
                "verl_version": "0.9.1",
            }
        )
    )
    logger_path = folder / "metrics.jsonl"
    with pytest.MonkeyPatch.context() as m:
        m.setenv("VERL_FILE_LOGGER_PATH", str(logger_path))
        logger = FileLogger(project_name="rlvr", experiment_name=folder.name)
        for step in (1, 2):
            logger.log(data=trainer_metrics(step), step=step)
        logger.finish()
    model, tokenizer = build_micro(seed=7)
    model.config.architectures = ["Qwen2ForCausalLM"]  # as from_pretrained sets it
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    model = shard(model)
    # Without hf_model verl writes config and tokenizer to huggingface/, but no weights.
    save_with_verl(model, tokenizer, folder, 2, ["model"])
    source = VerlRuns(tmp_path)
    assert "has no weights (actor.checkpoint.save_contents must include hf_model)" in (
        source.problem(folder.name, cfg)
    )
    save_with_verl(model, tokenizer, folder, 2, ["model", "hf_model"])
    run = VerlRuns(tmp_path).run(PlannedRun("kk", "grpo", {}, 0, 0, cfg, keys.run_key(cfg)))
    assert run.final == folder / "checkpoints/global_step_2/actor/huggingface"
    assert [m["grad_norm"] for m in run.metrics] == [0.5, 1.0]
    loaded, _ = load_model(str(run.final))
    state = loaded.state_dict()
    assert all(torch.equal(state[k], weights[k]) for k in weights)
    assert keys.model_identity(str(run.final)) == f"verl-weights:{run.weights_sha256}"
