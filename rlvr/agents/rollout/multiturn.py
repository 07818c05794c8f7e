"""The episode driver: generate, ``env.step``, append the observation, repeat — for a batch.

Every episode in the batch starts from its env's prompt. Each turn, all live episodes generate
together (one backend call) until an end token, a stop string (``</search>``, ``</answer>``) or
their remaining token budget; each env scores its turn; episodes that are not done get the
observation appended as tokens with loss mask 0 (the policy did not write them,
docs/design.md §3) and go round again. An episode ends when its env terminates or truncates, or
when its response budget (generated plus observation tokens) is used up.

Single-turn envs are the one-turn case of the same loop. An exception from ``env.step`` (env,
tool or verifier) ends that episode with ``error_reward`` and the error text; the batch goes on.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from rlvr.agents.rollout.base import RolloutBackend, SamplingParams


@dataclass
class Episode:
    """One finished episode: token-level record plus what the env said."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    finish_reason: str = "length"
    turns: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    response_text: str = ""
    #: The policy's turns as generated, observations left out: what a tool-call count reads (an
    #: observation may quote the tools' tags: search QA's invalid-action message does).
    turn_texts: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def n_generated(self) -> int:
        return int(sum(self.loss_mask))


_TURN_STRIDE = 1_000_003
_SEED_SPACE = 2**63


def turn_seed(seed: int, turn: int) -> int:
    """A distinct, reproducible sampler seed per (batch seed, turn)."""
    return (int(seed) * _TURN_STRIDE + turn) % _SEED_SPACE


def episode_seed(first_turn_seed: int) -> int:
    """The ``run_episodes`` seed whose first turn samples with ``first_turn_seed``.

    ``turn_seed(episode_seed(s), 0) == s`` for ``0 <= s < 2**63``: the stride is odd, hence
    invertible modulo ``2**63``. Lets a caller that seeds each backend call itself (a
    single-turn evaluation) run through the driver unchanged.
    """
    return int(first_turn_seed) * pow(_TURN_STRIDE, -1, _SEED_SPACE) % _SEED_SPACE


def encode_prompt(tokenizer, prompt: str, max_tokens: int | None) -> tuple[list[int], bool]:
    """Prompt token ids, cut from the left to ``max_tokens`` (the end holds the question and the
    assistant marker); returns whether it was cut."""
    ids = tokenizer(prompt)["input_ids"]
    if max_tokens is not None and len(ids) > max_tokens:
        return ids[len(ids) - max_tokens :], True
    return ids, False


def run_episodes(
    backend: RolloutBackend,
    tokenizer,
    envs: list,
    prompts: list[str],
    params: SamplingParams,
    *,
    max_response_tokens: int,
    seed: int,
    error_reward: list[float] | float = 0.0,
    max_prompt_tokens: int | None = None,
) -> list[Episode]:
    """Play one episode per ``(env, prompt)`` pair; the envs must already be ``reset``.

    The backend's memory is released at the end (``offload``): what follows a batch of episodes
    is an update or scoring, which need the GPU memory of a colocated engine."""
    if len(envs) != len(prompts):
        raise ValueError(f"{len(envs)} envs but {len(prompts)} prompts")
    if max_response_tokens < 1:
        raise ValueError(f"max_response_tokens must be >= 1, got {max_response_tokens}")
    n = len(envs)
    err_r = list(error_reward) if isinstance(error_reward, (list, tuple)) else [error_reward] * n
    episodes = []
    encoded: dict[str, tuple[list[int], bool]] = {}  # a group's envs share one prompt
    for p in prompts:
        if p not in encoded:
            encoded[p] = encode_prompt(tokenizer, p, max_prompt_tokens)
        ids, cut = encoded[p]
        ep = Episode(prompt_ids=list(ids))
        ep.info["prompt_truncated"] = cut
        episodes.append(ep)
    live = list(range(n))
    turn = 0
    while live:
        budgets = [max_response_tokens - len(episodes[i].response_ids) for i in live]
        contexts = [episodes[i].prompt_ids + episodes[i].response_ids for i in live]
        gen = backend.generate(contexts, params, seed=turn_seed(seed, turn), max_new_tokens=budgets)
        still = []
        for j, i in enumerate(live):
            ep = episodes[i]
            ep.response_ids += gen.token_ids[j]
            ep.loss_mask += [1] * len(gen.token_ids[j])
            ep.logprobs += gen.logprobs[j]
            ep.response_text += gen.texts[j]
            ep.turn_texts.append(gen.texts[j])
            ep.finish_reason = gen.finish_reasons[j]
            ep.turns += 1
            try:
                obs, reward, terminated, truncated, info = envs[i].step(gen.texts[j])
            except Exception as e:  # an env/tool/verifier bug must not stop training
                ep.error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
                ep.reward = float(err_r[i])
                continue
            ep.reward += float(reward)
            ep.info.update(info)
            left = max_response_tokens - len(ep.response_ids)
            if terminated or truncated or left <= 0:
                continue
            obs_ids = tokenizer(obs, add_special_tokens=False)["input_ids"][:left]
            ep.response_ids += obs_ids
            ep.loss_mask += [0] * len(obs_ids)
            ep.logprobs += [0.0] * len(obs_ids)
            ep.response_text += obs
            if len(ep.response_ids) < max_response_tokens:
                still.append(i)
            else:
                ep.finish_reason = "length"
        live = still
        turn += 1
    backend.offload()
    return episodes
