"""Accuracy of a base model on held-out items of its task (greedy, or avg@k when sampling).

A small check for building and tuning the tiny bases; the full evaluation runner is
``rlvr.eval``. Responses come from the shared job loop (``rlvr.agents.rollout.jobs``: the
trainer's rollout backend and episode driver) and are scored by the environment's own
``step``; search QA also reports the share of episodes that called the search tool.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rlvr.agents.rollout import SamplingParams, make_backend
from rlvr.agents.rollout.jobs import plan, play, task_runs
from rlvr.envs import env_spec, warmstart


class _Read:
    """A single-turn env that scores ``read(response, ground_truth, settings)`` in place of each
    response (``TraceBuilder.unslip``)."""

    def __init__(self, env, read, ground_truth, settings: dict[str, Any]):
        self.env, self.read, self.ground_truth, self.settings = env, read, ground_truth, settings

    def step(self, response: str):
        return self.env.step(self.read(response, self.ground_truth, self.settings))


def _item_envs(task: str, settings: dict[str, Any], items: list, split: str, read=None):
    """``envs_for`` over ``items``: an env reset to each job's item (``warmstart.eval_items`` draws
    item ``i`` of a group with ``reset(seed=0, options={"index": i})``). Single-turn jobs of one
    item share an env, which scores any number of responses after one ``reset``; a multi-turn
    episode needs an env of its own. Items are told apart by the env's ``group_key``. ``read``:
    what each env scores in place of a response (single-turn tasks)."""
    spec = env_spec(task)
    key = spec.group_key or None
    index: list[int] = []
    seen: dict[str, int] = defaultdict(int)
    for item in items:
        index.append(item.info["index"] if key is None else seen[item.group])
        seen[item.group] += 1

    def envs_for(part):
        envs, prompts = [], []
        for start, end in task_runs(part):
            j = part[start].task
            kwargs = {**settings, key: items[j].info[key]} if key else settings
            for n in range(end - start):
                if n == 0 or spec.multi_turn:
                    env = warmstart.make_env(task, kwargs, split)
                    env.reset(seed=0, options={"index": index[j]})
                    if read is not None:
                        env = _Read(env, read, items[j].ground_truth, kwargs)
                envs.append(env)
                prompts.append(items[j].prompt)
        return envs, prompts

    return envs_for


def _format(info: dict[str, Any]) -> float:
    """The format reward: in ``info`` (search QA) or among the reward components."""
    if "format" in info:
        return info["format"]
    return (info.get("reward_components") or {}).get("format", 0.0)


def evaluate_base(
    model,
    tokenizer,
    task: str,
    settings: dict[str, Any],
    *,
    n: int = 100,
    k: int = 1,
    temperature: float = 0.0,
    split: str = "test",
    seed: int = 0,
    max_new_tokens: int | None = None,
    batch_size: int = 64,
    read=None,
) -> list[dict[str, Any]]:
    """One row per item group (K&K: per size): accuracy (avg@k), format rate, mean length.
    ``read(response, ground_truth, settings)``: what the env scores in place of each response
    (the acceptance check's ``TraceBuilder.unslip``; single-turn tasks only)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > 1 and temperature == 0:
        raise ValueError("k > 1 samples need temperature > 0 (greedy samples are identical)")
    spec = env_spec(task)
    if read is not None and spec.multi_turn:
        raise ValueError(f"read: {task} is multi-turn; only a single-turn response can be read")
    items = warmstart.eval_items(task, settings, n, split)
    budget = max_new_tokens or warmstart.builder(task).max_new_tokens
    params = SamplingParams(max_new_tokens=budget, temperature=temperature, stop=spec.stop)
    mode = "greedy" if temperature == 0 else "sample"
    jobs = plan(len(items), greedy=mode == "greedy", k=0 if mode == "greedy" else k)
    # A multi-turn task plays every episode in one driver call seeded with ``seed``; the
    # single-turn tasks go ``batch_size`` responses at a time, seeded ``seed + chunk``.
    chunk = 0 if spec.multi_turn else batch_size
    played = play(
        make_backend("hf", model, tokenizer),
        tokenizer,
        jobs,
        envs_for=_item_envs(task, settings, items, split, read),
        params={mode: params},
        seed_of=lambda c: seed + c,
        max_response_tokens=budget,
        batch_size=chunk,
    )
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for job, ep in played:
        r = {
            "correct": bool(ep.info.get("correct")),
            "format": _format(ep.info),
            "reward": ep.reward,
        }
        if spec.multi_turn:
            r.update(length=ep.n_generated, searches=sum(map(spec.tool_calls, ep.turn_texts)))
        else:  # the response text's tokens (an end token is not text)
            r["length"] = len(tokenizer.encode(ep.response_text))
        groups[items[job.task].group].append(r)
    rows = []
    for group, rs in groups.items():
        rows.append(
            {
                "group": group,
                "items": len(rs) // k,
                "k": k,
                "temperature": temperature,
                "accuracy": round(sum(r["correct"] for r in rs) / len(rs), 4),
                "format_ok": round(sum(r["format"] > 0 for r in rs) / len(rs), 4),
                "reward": round(sum(r["reward"] for r in rs) / len(rs), 4),
                "length": round(sum(r["length"] for r in rs) / len(rs), 1),
                **(
                    {"tool_calls": round(sum(r["searches"] > 0 for r in rs) / len(rs), 4)}
                    if rs and "searches" in rs[0]
                    else {}
                ),
            }
        )
    return rows
