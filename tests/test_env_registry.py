"""A new environment is one package plus one registration: a toy env defined in the tests alone
(``_rlvr_toys.TOY``: a Gymnasium env, its scorer, warm start and spec) runs through training,
evaluation, the warm start, a reproduction grid, the verl export and reward, and the TRL and
episode adapters, with no other edit (as ``test_update.py``'s
``test_a_new_algorithm_is_one_registration`` does for methods). verifiers and OpenEnv, whose
libraries are not in this venv, take the same toy env in ``tests/integrations``."""

from __future__ import annotations

import pytest

from _rlvr_toys import TOY, registered

NAME, GYM_ID = TOY.name, TOY.id


@pytest.fixture(scope="module")
def toy():
    with registered(TOY):
        yield TOY


def test_training_and_evaluation(toy, tmp_path):
    from rlvr.eval.runner import EvalConfig, evaluate
    from rlvr.training.train_config import load_train_config
    from rlvr.training.trainer import Trainer

    cfg = load_train_config([f"env={NAME}", "algo=grpo_sg", "profile=micro", f"out={tmp_path}"])
    records = Trainer(cfg).train()
    assert len(records) == cfg.steps and records[-1]["grad_norm"] > 0  # rewards varied
    assert "reward/digits" in records[0]
    result = evaluate(EvalConfig(model=str(tmp_path / "final"), env=NAME, n_items=3, k=2))
    assert result.summary["all"]["n_items"] == 3 and "avg@2" in result.summary["all"]
    assert {r["mode"] for r in result.records} == {"greedy", "sample"}


def test_warm_start_builds_a_base_and_checks_it(toy, tmp_path):
    from rlvr.models.build import BuildConfig, TokenizerConfig, ensure_built
    from rlvr.models.evaluate import evaluate_base
    from rlvr.models.sft import SFTConfig
    from rlvr.models.tiny import ArchConfig

    cfg = BuildConfig(
        name="tiny-toy",
        task=NAME,
        tokenizer=TokenizerConfig(tasks=(NAME,), settings={NAME: {}}, texts_per_task=60),
        arch=ArchConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1),
        sft=SFTConfig(steps=2, batch_size=2, warmup_steps=0),
    )
    built = ensure_built(cfg, home=tmp_path, progress=False)
    from rlvr.models import load_model

    model, tokenizer = load_model(str(built))
    (row,) = evaluate_base(model, tokenizer, NAME, {}, n=2)
    assert row["group"] == NAME and row["items"] == 2


def test_a_reproduction_grid_plans_and_draws_it(toy, tmp_path):
    from rlvr.agents.algorithms import algorithm_names
    from rlvr.reproduce import fig4
    from rlvr.reproduce.common import Context
    from rlvr.reproduce.figures import plan_for
    from rlvr.reproduce.grid import Grid, Setting, validate

    setting = Setting(NAME, "micro", {"profile": "micro", "steps": 2})
    grid = Grid("toy-grid", {NAME: setting}, seeds=1)
    assert validate(grid) == len(algorithm_names())  # the setting's config for every method
    ctx = Context(grid, tmp_path / "out", tmp_path / "cache", [0], progress=False)
    ctx.plan = plan_for(ctx, ["fig4"])
    assert {(r.setting, r.algo) for r in ctx.plan.runs.values()} == {
        (NAME, "grpo"),
        (NAME, "grpo_sg"),
    }
    meta = fig4.run(ctx)
    assert [c["setting"] for c in meta["claims"]] == ["toy numbers"]
    assert (tmp_path / "out" / "fig4.png").exists()


def test_verl_export_and_reward(toy):
    from rlvr.integrations.verl.data import verl_rows
    from rlvr.integrations.verl.reward import compute_score, compute_score_batch, env_for

    rows = list(verl_rows(NAME, 3, env_kwargs={"strict": True}))
    assert [r["data_source"] for r in rows] == [f"rlvr/{NAME}"] * 3
    assert rows[1]["ability"] == "arithmetic" and rows[1]["reward_model"]["ground_truth"] == "10"
    assert rows[1]["extra_info"] == {"split": "train", "index": 1, "strict": True}
    assert env_for("toy_numbers") == env_for(GYM_ID) == NAME
    strict = rows[1]["extra_info"]
    assert compute_score(f"rlvr/{NAME}", "10", "10", strict)["acc"] == 1.0
    assert compute_score(f"rlvr/{NAME}", "it is 10", "10", strict)["acc"] == 0.0
    batch = compute_score_batch([f"rlvr/{NAME}", "rlvr/kk"], ["it is 10", ""], ["10", "x"])
    assert batch[0]["acc"] == 1.0 and batch[1]["score"] == -3.0


def test_trl_and_episode_adapters(toy):
    from rlvr.integrations import trl_rewards
    from rlvr.integrations.episodes import Episode, env_names
    from rlvr.integrations.trl_env import environment_factory, episode_reward

    rows = trl_rewards.trl_rows(NAME, 2, env_kwargs={"strict": True})
    assert rows[0]["ground_truth"] == "3" and rows[0]["strict"] is True
    reward = trl_rewards.toy_reward
    assert reward is trl_rewards.reward_func(NAME) and reward.__name__ == "toy_reward"
    assert reward(["p", "p"], ["3", "x3"], ground_truth=["3", "3"], strict=[True, False]) == [
        1.0,
        0.5,
    ]
    assert NAME in env_names()
    episode = Episode(NAME)
    episode.reset(index=2)
    assert not episode.multi_turn and episode.finish("17").reward == 1.0
    env = environment_factory(NAME)()
    env.reset(index=0)
    assert episode_reward(["p"], [[{"role": "assistant", "content": "3"}]], environments=[env]) == [
        1.0
    ]
