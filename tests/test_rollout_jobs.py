"""The shared evaluation loop, the env factory and the generation backends (micro model)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rlvr.agents.rollout import BACKENDS, SamplingParams, make_backend
from rlvr.agents.rollout.jobs import Job, parts, plan, play, task_runs
from rlvr.agents.rollout.multiturn import episode_seed, turn_seed
from rlvr.envs import env_accepts, make_env
from rlvr.models import build_micro

from _rlvr_toys import LetterEnv, ScriptedBackend, ToolEnv


@pytest.fixture(scope="module")
def micro():
    torch.set_num_threads(1)
    return build_micro(seed=0)


def test_plan_lists_greedy_jobs_then_samples_task_by_task():
    assert plan(2, k=2) == [
        Job(0, "greedy"),
        Job(1, "greedy"),
        Job(0, "sample", 0),
        Job(0, "sample", 1),
        Job(1, "sample", 0),
        Job(1, "sample", 1),
    ]
    assert plan(2, greedy=False, k=1) == [Job(0, "sample"), Job(1, "sample")]


def test_parts_split_each_chunk_by_mode():
    jobs = plan(3, k=1)  # g0 g1 g2 s0 s1 s2
    got = [(c, [(j.task, j.mode[0]) for j in p]) for c, p in parts(jobs, 4)]
    assert got == [(0, [(0, "g"), (1, "g"), (2, "g")]), (0, [(0, "s")]), (1, [(1, "s"), (2, "s")])]
    assert [c for c, _ in parts(jobs)] == [0, 0]  # batch_size 0: one chunk


def test_task_runs():
    part = [Job(0, "sample", 0), Job(0, "sample", 1), Job(2, "sample", 0), Job(0, "sample", 2)]
    assert task_runs(part) == [(0, 2), (2, 3), (3, 4)]
    assert task_runs([]) == []


def test_episode_seed_inverts_the_first_turn_seed():
    for s in (0, 1, 100_003 * 7 + 3, 2**63 - 1):
        assert turn_seed(episode_seed(s), 0) == s


def test_play_seeds_each_chunk_and_plays_every_job(micro):
    _, tok = micro
    seen = []

    class Recording(ScriptedBackend):
        def generate(self, contexts, params, *, seed, max_new_tokens=None):
            seen.append((len(contexts), params.temperature, seed))
            return super().generate(contexts, params, seed=seed, max_new_tokens=max_new_tokens)

    released = []

    def envs_for(part):
        envs = [ToolEnv(turns=2) for _ in part]
        return envs, [e.reset(seed=0)[0] for e in envs]

    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    params = {"greedy": greedy, "sample": SamplingParams(max_new_tokens=4, temperature=0.5)}
    played = play(
        Recording(tok, ["ab"]),
        tok,
        plan(3, k=1),
        envs_for=envs_for,
        params=params,
        seed_of=lambda c: 10 + c,
        max_response_tokens=64,
        batch_size=4,
        release=released.append,
    )
    assert [j for j, _ in played] == [j for _, p in parts(plan(3, k=1), 4) for j in p]
    assert all(ep.turns == 2 for _, ep in played)  # both turns of every episode
    # Per part: two driver turns, seeded from the chunk's seed.
    assert seen == [
        (3, 0.0, turn_seed(10, 0)),
        (3, 0.0, turn_seed(10, 1)),
        (1, 0.5, turn_seed(10, 0)),
        (1, 0.5, turn_seed(10, 1)),
        (2, 0.5, turn_seed(11, 0)),
        (2, 0.5, turn_seed(11, 1)),
    ]
    assert [len(r) for r in released] == [3, 1, 2]


def test_make_env_passes_split_only_to_envs_that_take_one():
    gym.register(
        id="test_loop/Letter-v0", entry_point="_rlvr_toys:LetterEnv", disable_env_checker=True
    )
    try:
        assert not env_accepts("test_loop/Letter-v0", "split")
        assert isinstance(make_env("test_loop/Letter-v0", "test").unwrapped, LetterEnv)
    finally:
        gym.registry.pop("test_loop/Letter-v0")
    assert env_accepts("kk", "split") and env_accepts("rlvr/KnightsKnaves-v0", "n_people")
    env = make_env("kk", "test", template="plain", n_people=2)
    assert env.unwrapped.split == "test"
    assert make_env("kk", n_people=2).unwrapped.split == "train"  # the env's default
    with pytest.raises(ValueError, match="unknown env"):
        make_env("chess")


def test_backends_agree_greedy_and_report_the_same_logprobs(micro):
    model, tok = micro
    ctx = [
        tok.encode("Hello there", add_special_tokens=False),
        tok.encode("Question: 2 + 2?", add_special_tokens=False),
    ]
    params = SamplingParams(max_new_tokens=10, temperature=0.0)
    hf = make_backend("hf", model, tok).generate(ctx, params, seed=0)
    ref = make_backend("generate", model, tok).generate(ctx, params, seed=0, max_new_tokens=[10, 4])
    assert ref.token_ids[0] == hf.token_ids[0] and ref.token_ids[1] == hf.token_ids[1][:4]
    assert ref.finish_reasons[1] == "length"
    for a, b in zip(hf.logprobs[0], ref.logprobs[0]):
        assert a == pytest.approx(b, abs=1e-4)
    assert set(BACKENDS) == {"hf", "vllm", "generate"}
    with pytest.raises(ValueError, match="unknown rollout backend"):
        make_backend("tpu", model, tok)


def test_generate_backend_cuts_at_the_earliest_stop_string(micro):
    model, tok = micro
    ctx = [tok.encode("Hello there", add_special_tokens=False)]
    free = make_backend("generate", model, tok).generate(
        ctx, SamplingParams(max_new_tokens=12, temperature=1.0), seed=3
    )
    text = free.texts[0]
    stop = text[3:5] if len(text) >= 5 else text[:1]
    cut = make_backend("generate", model, tok).generate(
        ctx, SamplingParams(max_new_tokens=12, temperature=1.0, stop=(stop,)), seed=3
    )
    assert cut.finish_reasons[0] == "stop" and cut.texts[0].endswith(stop)
    assert text.startswith(cut.texts[0])


def test_evaluate_base_rows_from_the_shared_loop(micro):
    from rlvr.envs.warmstart import tiny_settings
    from rlvr.models.evaluate import evaluate_base

    model, tok = micro
    rows = evaluate_base(
        model, tok, "kk", {**tiny_settings("kk"), "n_people": [2, 3]}, n=2, max_new_tokens=8
    )
    assert [(r["group"], r["items"], r["k"]) for r in rows] == [("kk2", 2, 1), ("kk3", 2, 1)]
    assert all(r["reward"] == -3.0 and r["accuracy"] == 0.0 for r in rows)  # a random model
    sampling = dict(n=2, k=2, temperature=1.0, max_new_tokens=12, seed=1)
    sampled = evaluate_base(model, tok, "searchqa", tiny_settings("searchqa"), **sampling)
    assert sampled == evaluate_base(model, tok, "searchqa", tiny_settings("searchqa"), **sampling)
    assert sampled[0]["items"] == 2 and "tool_calls" in sampled[0]
    with pytest.raises(ValueError, match="temperature"):
        evaluate_base(model, tok, "kk", tiny_settings("kk"), n=1, k=2)
