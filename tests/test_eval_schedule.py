"""The trainer's ``eval.*`` section is a schedule; the evaluation it runs is a runner
``EvalConfig``, the type ``rlvr eval`` runs."""

from __future__ import annotations

import dataclasses

import pytest

from rlvr.config import ConfigError
from rlvr.eval.runner import EvalConfig
from rlvr.training.train_config import EvalScheduleConfig, load_train_config, periodic_eval_config


def test_the_schedule_keeps_its_keys():
    # Run-cache keys hash these names and values (tests/test_tiny_keys.py).
    assert [f.name for f in dataclasses.fields(EvalScheduleConfig)] == [
        "every",
        "n_prompts",
        "samples",
        "split",
        "at_end",
    ]


def test_due():
    s = EvalScheduleConfig(every=3)
    assert [t for t in range(1, 8) if s.due(t, 7)] == [3, 6]
    s = EvalScheduleConfig(at_end=True)
    assert [t for t in range(1, 8) if s.due(t, 7)] == [7]
    assert not any(EvalScheduleConfig().due(t, 7) for t in range(1, 8))


def test_periodic_evaluation_is_a_runner_config_from_schedule_and_rollout():
    cfg = load_train_config(
        [
            "profile=micro",
            "env=searchqa",
            "out=x",
            "seed=5",
            "eval.every=2",
            "eval.n_prompts=3",
            "eval.samples=4",
            "eval.split=test",
            "rollout.temperature=0.9",
            "rollout.top_p=0.8",
            "rollout.max_response_tokens=40",
        ]
    )
    ecfg = periodic_eval_config(cfg)
    assert isinstance(ecfg, EvalConfig)
    assert (ecfg.env, ecfg.split, ecfg.n_items, ecfg.greedy, ecfg.k) == (
        "searchqa",
        "test",
        3,
        1,
        4,
    )
    assert (ecfg.temperature, ecfg.top_p, ecfg.max_new_tokens) == (0.9, 0.8, 40)
    assert ecfg.stop == ["</search>", "</answer>"] and ecfg.env_kwargs == cfg.env_kwargs
    assert ecfg.seed == 5 and ecfg.model == cfg.model
    assert ecfg.batch_size == 3 * (1 + 4)  # one chunk, as the trainer plays it


def test_an_evaluation_the_runner_cannot_sample_is_refused_before_training():
    with pytest.raises(ConfigError, match=r"^eval: .*temperature must be > 0") as e:
        load_train_config(["profile=micro", "out=x", "rollout.temperature=0", "eval.at_end=true"])
    assert "\n" not in str(e.value)
    # Without a scheduled evaluation nothing is sampled for it.
    load_train_config(["profile=micro", "out=x", "rollout.temperature=0"])
