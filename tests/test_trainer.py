"""The trainer on the micro model: every algorithm, optimizer-step accounting, faults,
determinism."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch

import rlvr.training.trainer as trainer_mod
from rlvr.config import ConfigError
from rlvr.envs import make_env
from rlvr.training.train_config import ALGOS, load_train_config
from rlvr.training.trainer import Trainer, read_metrics, strip_time
from rlvr.training.update import lr_factor

from _rlvr_toys import LetterEnv, ToolEnv

torch.set_num_threads(1)

REQUIRED = (
    "step",
    "reward/mean",
    "accuracy",
    "grad_norm",
    "kl",
    "entropy",
    "weight/mean",
    "response_length",
    "time/rollout_s",
    "time/update_s",
    "tokens/s",
    "clip_frac",
    "weight/min",
    "weight/max",
    "prob/mean",
    "episodes/errors",
    "update/skipped",
)


def _cfg(tmp_path, *extra, env="kk", algo="grpo", steps=2):
    return load_train_config(
        [
            f"env={env}",
            f"algo={algo}",
            f"out={tmp_path}",
            "profile=micro",
            f"steps={steps}",
            "progress=false",
            "num_threads=1",
            *extra,
        ]
    )


def _toy_trainer(tmp_path, *extra, algo="grpo", steps=2, env_cls=LetterEnv, **env_kw):
    cfg = _cfg(tmp_path, *extra, algo=algo, steps=steps)
    return Trainer(cfg, make_env=lambda split: env_cls(**env_kw))


def _has_env(name):
    return importlib.util.find_spec(f"rlvr.envs.{name}.env") is not None


@pytest.mark.parametrize("env", ["kk", "math", "searchqa"])
@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_on_every_env(tmp_path, env, algo):
    if not _has_env(env):
        pytest.skip(f"rlvr.envs.{env} not available")
    cfg = _cfg(tmp_path, "group_size=2", "rollout.max_response_tokens=12", env=env, algo=algo)
    records = Trainer(cfg).train()
    assert [r["step"] for r in records] == [1, 2]
    lines = read_metrics(tmp_path / "metrics.jsonl")
    assert len(lines) == 2
    for rec in lines:
        for key in REQUIRED:
            assert key in rec, key
        assert rec["episodes/errors"] == 0
        assert all(v is None or not isinstance(v, float) or math.isfinite(v) for v in rec.values())
    assert (tmp_path / "checkpoints" / "step_00000002" / "MANIFEST.json").exists()
    assert (tmp_path / "final" / "config.json").exists()


def test_parameters_move_and_grad_norm_is_before_clipping(tmp_path, monkeypatch):
    seen = []
    original = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *a, **k):
        params = list(params)
        before = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in params if p.grad is not None])
        )
        out = original(params, max_norm, *a, **k)
        after = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in params if p.grad is not None])
        )
        seen.append((float(before), float(after), max_norm))
        return out

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    t = _toy_trainer(tmp_path, "optim.grad_clip=0.001")
    before = [p.detach().clone() for p in t.model.parameters()]
    records = t.train()
    assert len(seen) == 2
    for rec, (pre, post, max_norm) in zip(records, seen):
        assert max_norm == 0.001
        assert pre > 1e-2  # a real gradient, far above the clip
        assert rec["grad_norm"] == pytest.approx(pre, rel=1e-6)
        assert post == pytest.approx(1e-3, rel=1e-3)
    assert any(not torch.equal(a, p) for a, p in zip(before, t.model.parameters()))


def test_lopti_two_optimizer_steps_low_first(tmp_path, monkeypatch):
    order = []
    import rlvr.agents.algorithms.lopti as lopti_mod

    original = lopti_mod.lopti_stages

    def spy(old_logprobs, mask, eta, **kw):
        stages = original(old_logprobs, mask, eta, **kw)
        order.append([name for name, _ in stages])
        return stages

    monkeypatch.setattr(lopti_mod, "lopti_stages", spy)
    # The random micro model gives p ~ 1/260 to every token: split at the median instead of 0.5.
    t = _toy_trainer(
        tmp_path, "algo=lopti", "weights.eta=0.0038", "rollout.temperature=1.0", algo="lopti"
    )
    steps = []
    t.optimizer.register_step_post_hook(lambda *a: steps.append(t.step))
    records = t.train()
    assert order == [["low", "high"], ["low", "high"]]
    assert steps == [0, 0, 1, 1]  # two optimizer steps per batch
    assert [r["update/optimizer_steps"] for r in records] == [2.0, 2.0]


def test_entropy_top_keeps_a_fifth_of_tokens(tmp_path):
    t = _toy_trainer(tmp_path, "algo=entropy_top", algo="entropy_top", steps=1)
    rec = t.train()[0]
    assert rec["pg_token_frac"] == pytest.approx(0.2, abs=0.02)
    assert rec["kl"] >= 0


def test_episode_error_is_counted_and_training_goes_on(tmp_path):
    t = _toy_trainer(tmp_path, "error_reward=-5", fail_on=1)
    records = t.train()
    assert records[0]["episodes/errors"] == 4  # the whole group of task 1 (step 1: tasks 0, 1)
    assert records[0]["reward/min"] == -5.0 and records[0]["update/optimizer_steps"] == 1
    assert records[1]["episodes/errors"] == 0


class BadRowEnv(LetterEnv):
    """``reset`` raises on the listed tasks (a malformed dataset row)."""

    bad = {1}

    def reset(self, *, seed=None, options=None):
        if int((options or {}).get("index", 0)) in self.bad:
            raise ValueError("malformed row")
        return super().reset(seed=seed, options=options)


def test_reset_error_skips_the_task_and_is_counted(tmp_path):
    t = _toy_trainer(tmp_path, steps=1, env_cls=BadRowEnv)
    rec = t.train()[0]
    assert rec["episodes/reset_errors"] == 1 and rec["episodes/errors"] == 0
    assert rec["update/optimizer_steps"] == 1


def test_reset_failing_everywhere_stops_with_a_clear_error(tmp_path):
    class AllBad(BadRowEnv):
        bad = set(range(1000))

    t = _toy_trainer(tmp_path, steps=1, env_cls=AllBad)
    with pytest.raises(RuntimeError, match="env.reset failed on 9 tasks in a row.*malformed row"):
        t.train()


class NaNEnv(LetterEnv):
    def step(self, action):
        obs, _, term, trunc, info = super().step(action)
        return obs, float("nan"), term, trunc, info


def test_non_finite_loss_skips_update(tmp_path):
    t = _toy_trainer(tmp_path, steps=1, env_cls=NaNEnv)
    before = [p.detach().clone() for p in t.model.parameters()]
    rec = t.train()[0]
    assert rec["update/skipped"] == 1 and rec["update/optimizer_steps"] == 0
    assert all(torch.equal(a, p) for a, p in zip(before, t.model.parameters()))
    line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert line["reward/mean"] is None  # NaN logged as JSON null


def test_same_seed_same_numbers(tmp_path):
    runs = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        t = _toy_trainer(
            tmp_path / name, f"seed={seed}", "mini_batch_size=4", "ppo_epochs=2", algo="grpo_sg"
        )
        runs.append(strip_time(t.train()))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_multiturn_observations_masked_in_training_batch(tmp_path, monkeypatch):
    seen = {}
    original = trainer_mod.Trainer.update

    def spy(self, batch, adv, step):
        seen["batch"] = batch
        return original(self, batch, adv, step)

    monkeypatch.setattr(trainer_mod.Trainer, "update", spy)
    t = _toy_trainer(
        tmp_path,
        "rollout.max_response_tokens=120",
        "rollout.max_turn_tokens=12",
        steps=1,
        env_cls=ToolEnv,
        turns=2,
    )
    rec = t.train()[0]
    batch = seen["batch"]
    assert rec["turns/mean"] == 2
    real = batch.attention_mask[:, batch.prompt_len :].float()
    assert bool(((batch.response_mask == 0) & (real == 1)).any())  # observation tokens
    assert rec["response_length/generated"] < rec["response_length"]


def test_memory_check_refuses_impossible_settings(tmp_path):
    cfg = _cfg(
        tmp_path, "rollout.max_response_tokens=2000000", "prompts_per_step=64", "group_size=64"
    )
    with pytest.raises(MemoryError, match="max_response_tokens"):
        Trainer(cfg)


def test_refuses_to_overwrite_checkpoints(tmp_path):
    _toy_trainer(tmp_path, steps=1).train()
    with pytest.raises(FileExistsError, match="resume"):
        _toy_trainer(tmp_path, steps=1).train()


def test_profiles_and_overrides(tmp_path):
    cfg = _cfg(tmp_path, "env_kwargs.depth=3", "optim.lr=0.5")
    assert cfg.env_kwargs == {"template": "plain", "n_people": 2, "depth": 3}  # merged layers
    assert cfg.optim.lr == 0.5 and cfg.algo == "grpo" and cfg.model == "micro"
    assert _cfg(tmp_path, algo="ar", env="math").weights.ar_alpha == 0.1
    with pytest.raises(ConfigError, match="algo"):
        _cfg(tmp_path, algo="ppo")
    with pytest.raises(ConfigError, match="optim.lrr"):
        _cfg(tmp_path, "optim.lrr=1")
    with pytest.raises(ConfigError, match="mini_batch_size"):
        _cfg(tmp_path, "mini_batch_size=3")
    with pytest.raises(ConfigError, match="profile"):
        _cfg(tmp_path, "profile=nope")
    with pytest.raises(ConfigError, match="weights.scheme"):
        _cfg(tmp_path, "weights.scheme=ar")


def test_lr_schedule():
    kw = dict(warmup=2, total=10, min_ratio=0.1)
    assert [lr_factor(s, schedule="constant", **kw) for s in (0, 1, 5)] == [0.5, 1.0, 1.0]
    assert lr_factor(10, schedule="linear", **kw) == pytest.approx(0.1)
    assert lr_factor(6, schedule="cosine", **kw) == pytest.approx(0.55)


def test_periodic_evaluation_on_held_out_split(tmp_path):
    cfg = _cfg(tmp_path, "eval.every=2", "eval.n_prompts=2", "eval.samples=2", "group_size=2")
    records = Trainer(cfg).train()
    assert "eval/greedy_accuracy" not in records[0]
    for key in ("eval/greedy_accuracy", "eval/sampled_accuracy", "eval/greedy_reward"):
        assert key in records[1]
    assert records[1]["eval/greedy_reward"] >= -3.0


class ThreeTaskEnv(LetterEnv):
    """A finite dataset of three tasks: ``reset`` refuses an index past it, as the envs do."""

    num_tasks = 3
    seen: list[int] = []

    def reset(self, *, seed=None, options=None):
        index = int((options or {}).get("index", 0))
        if not 0 <= index < self.num_tasks:
            raise ValueError(f"options['index'] must be an int in [0, {self.num_tasks})")
        ThreeTaskEnv.seen.append(index)
        return super().reset(seed=seed, options=options)


def test_a_finite_dataset_wraps_around_instead_of_running_out(tmp_path):
    ThreeTaskEnv.seen = []
    t = _toy_trainer(tmp_path, "prompts_per_step=2", steps=3, env_cls=ThreeTaskEnv)
    records = t.train()
    assert [r["episodes/reset_errors"] for r in records] == [0, 0, 0]
    assert sorted(set(ThreeTaskEnv.seen)) == [0, 1, 2]  # 6 tasks drawn from 3


@pytest.mark.parametrize(
    "env, kwargs, expected",
    [
        ("kk", {"split": "test", "test_size": 5, "n_people": [3, 4]}, 10),
        ("kk", {"split": "train"}, None),
        ("math", {"dataset": "synthetic", "split": "test"}, None),
        ("searchqa", {"split": "test"}, None),
    ],
)
def test_every_env_says_how_many_tasks_it_has(env, kwargs, expected):
    """The trainer wraps task indices modulo ``num_tasks`` (``Trainer._reset_group``)."""
    e = make_env(env, **kwargs).unwrapped
    n = e.num_tasks
    if expected is not None:
        assert n == expected
    if n is not None:
        e.reset(seed=0, options={"index": n - 1})
        with pytest.raises(ValueError, match="index"):
            e.reset(seed=0, options={"index": n})
