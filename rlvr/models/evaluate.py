"""Accuracy of a base model on held-out items of its task (greedy, or avg@k when sampling).

A small check for building and tuning the tiny bases; the full evaluation runner is
``rlvr.eval``. Single-turn tasks (K&K, math) score each completion with the environment's pure
``score``; search QA runs the trainer's multi-turn driver against the environment and also
reports the share of episodes that called the search tool.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from rlvr.models import traces
from rlvr.models.generate import generate

#: Response budget per task (tokens; search QA: the whole episode, observations included).
#: K&K answers of 5 people are 42 tokens, worked math solutions up to ~70.
MAX_NEW_TOKENS = {"kk": 96, "math": 160, "searchqa": 512}
SEARCH_STOP = ("</search>", "</answer>")


def _search_episodes(model, tokenizer, settings, items, *, k, temperature, seed,
                     max_response_tokens, split):
    """Search QA episodes through the trainer's multi-turn driver (same tool loop as RL)."""
    from rlvr.agents.rollout.base import SamplingParams
    from rlvr.agents.rollout.hf import HFBackend
    from rlvr.agents.rollout.multiturn import run_episodes

    envs, prompts = [], []
    for item in items:
        for _ in range(k):
            env = traces.make_env("searchqa", settings, split)
            prompts.append(env.reset(seed=0, options={"index": item.info["index"]})[0])
            envs.append(env)
    params = SamplingParams(max_new_tokens=max_response_tokens, temperature=temperature,
                            stop=SEARCH_STOP)
    episodes = run_episodes(HFBackend(model, tokenizer), tokenizer, envs, prompts, params,
                            max_response_tokens=max_response_tokens, seed=seed)
    return [{"correct": bool(ep.info.get("correct")), "format": ep.info.get("format", 0.0),
             "reward": ep.reward, "length": ep.n_generated,
             "searches": ep.info.get("n_searches", 0)} for ep in episodes]


def _scorer(task: str, settings: dict[str, Any]):
    if task == "kk":
        from rlvr.envs.kk import score

        prefilled = bool(settings.get("prefill_think", True))
        return lambda response, gt: score(response, gt, prefilled_think=prefilled)
    if task == "math":
        from rlvr.envs.math import score

        return score
    from rlvr.envs.searchqa import score

    return score


def evaluate_base(model, tokenizer, task: str, settings: dict[str, Any], *, n: int = 100,
                  k: int = 1, temperature: float = 0.0, split: str = "test", seed: int = 0,
                  max_new_tokens: int | None = None, batch_size: int = 64) -> list[dict[str, Any]]:
    """One row per item group (K&K: per size): accuracy (avg@k), format rate, mean length."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > 1 and temperature == 0:
        raise ValueError("k > 1 samples need temperature > 0 (greedy samples are identical)")
    items = traces.eval_items(task, settings, n, split)
    budget = max_new_tokens or MAX_NEW_TOKENS[task]
    if task == "searchqa":
        results = _search_episodes(model, tokenizer, settings, items, k=k, temperature=temperature,
                                   seed=seed, max_response_tokens=budget, split=split)
    else:
        prompts = [it.prompt for it in items for _ in range(k)]
        responses = generate(model, tokenizer, prompts, max_new_tokens=budget,
                             temperature=temperature, seed=seed, batch_size=batch_size)
        score = _scorer(task, settings)
        results = []
        for j, response in enumerate(responses):
            s = score(response, items[j // k].ground_truth)
            results.append({"correct": bool(s.correct), "format": s.components.get("format", 0.0),
                            "reward": float(s.reward), "length": len(tokenizer.encode(response))})
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for j, r in enumerate(results):
        groups[items[j // k].group].append(r)
    rows = []
    for group, rs in groups.items():
        rows.append({
            "group": group, "items": len(rs) // k, "k": k, "temperature": temperature,
            "accuracy": round(sum(r["correct"] for r in rs) / len(rs), 4),
            "format_ok": round(sum(r["format"] > 0 for r in rs) / len(rs), 4),
            "reward": round(sum(r["reward"] for r in rs) / len(rs), 4),
            "length": round(sum(r["length"] for r in rs) / len(rs), 1),
            **({"tool_calls": round(sum(r["searches"] > 0 for r in rs) / len(rs), 4)}
               if rs and "searches" in rs[0] else {}),
        })
    return rows
