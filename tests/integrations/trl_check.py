"""Checks against the real TRL 1.16.0, run inside its own venv by ``scripts/test_integrations.sh``.

Not collected by the main suite (the file name does not match ``test_*.py``): it needs TRL.
"""
from __future__ import annotations

import inspect
import os
from importlib.metadata import version

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from rlvr.envs.kk import score as kk_score
from rlvr.integrations.trl_rewards import (
    SearchToolEnvironment,
    kk_reward,
    search_environment_factory,
    trl_dataset,
)
from rlvr.models import build_micro


def test_version_pinned():
    assert version("trl") == "1.16.0"


def test_reward_signature_matches_trl():
    """TRL calls reward_func(prompts=, completions=, completion_ids=, **columns, trainer_state=, ...)."""
    params = inspect.signature(kk_reward).parameters
    assert {"prompts", "completions"} <= set(params)
    assert any(p.kind is p.VAR_KEYWORD for p in params.values())
    assert "environment_factory" in inspect.signature(GRPOTrainer.__init__).parameters


def test_grpo_trainer_two_steps_on_micro_model_with_kk_reward(tmp_path):
    torch.set_num_threads(2)
    model, tokenizer = build_micro(seed=0)
    model_dir = tmp_path / "micro"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    # Standard (string) prompts: the micro tokenizer has no chat template; the env renders the
    # Qwen template itself, ending with the "<think>" prefill.
    dataset = trl_dataset("kk", 8, split="train", conversational=False, env_kwargs={"n_people": 2, "template": "qwen"})
    assert set(dataset.column_names) >= {"prompt", "ground_truth", "prefilled_think"}
    assert all(dataset["prefilled_think"])

    calls = []

    def kk(prompts, completions, **kwargs):
        rewards = kk_reward(prompts, completions, **kwargs)
        calls.append((list(completions), list(kwargs["ground_truth"]), list(kwargs["prefilled_think"]), rewards))
        return rewards

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=12, learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, seed=0, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=kk, args=args, train_dataset=dataset,
                          processing_class=tokenizer)
    assert next(trainer.model.parameters()).dtype == torch.float32
    trainer.train()

    assert trainer.state.global_step == 2
    assert len(calls) == 2
    for completions, gts, prefilled, rewards in calls:
        assert len(completions) == 4 and len(set(gts)) == 1  # one prompt, four generations
        assert rewards == [kk_score(c, gt, prefilled_think=p).reward for c, gt, p in zip(completions, gts, prefilled)]
        assert all(-3.0 <= r <= 3.0 for r in rewards)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and all(-3.0 <= h["reward"] <= 3.0 for h in logged)


def test_search_environment_shape_for_trl():
    """The class TRL would instantiate per rollout: ``reset`` plus one public tool method."""
    public = [n for n, _ in inspect.getmembers(SearchToolEnvironment, predicate=inspect.isfunction)
              if not n.startswith("_") and n != "reset"]
    assert public == ["search"]
    doc = inspect.getdoc(SearchToolEnvironment.search)
    assert "Args:" in doc and "query" in doc and "Returns:" in doc
    factory = search_environment_factory(retriever=None)
    assert factory() is not factory()
    with pytest.raises(ValueError, match="max_calls"):
        SearchToolEnvironment(None, max_calls=0)
