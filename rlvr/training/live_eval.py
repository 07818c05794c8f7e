"""The trainer's periodic evaluation: greedy and sampled accuracy on the first ``eval.n_prompts``
held-out tasks, the ``rlvr.eval.runner.EvalConfig`` of ``periodic_eval_config``, played by the
shared job loop (``rlvr.agents.rollout.jobs``) on the live policy, as one chunk over a reused env
pool, the tasks reset and seeded as training tasks are.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from rlvr.agents.metrics import check_tool_failures
from rlvr.agents.rollout.base import SamplingParams
from rlvr.agents.rollout.jobs import plan, play, task_runs


def evaluate_live(
    cfg,
    ecfg,
    step: int,
    *,
    backend,
    tokenizer,
    precision,
    sampling: SamplingParams,
    envs: list,
    reset_group: Callable[[list, int], list[str]],
    error_reward: float,
) -> dict[str, float]:
    """``eval/{greedy,sampled}_{accuracy,reward}`` and ``time/eval_s`` of ``ecfg`` after step
    ``step`` of the run ``cfg``: ``envs`` is the pool (one env per job of a chunk),
    ``reset_group(envs, task)`` resets a task's envs and returns their prompts."""

    def envs_for(part):
        prompts = []
        for start, end in task_runs(part):  # a task's jobs reset as one group
            prompts += reset_group(envs[start:end], part[start].task)
        return envs[: len(part)], prompts

    t0 = time.perf_counter()
    sample = dataclasses.replace(
        sampling, temperature=ecfg.temperature, top_p=ecfg.top_p, stop=tuple(ecfg.stop)
    )
    greedy = dataclasses.replace(sample, temperature=0.0)
    with precision.autocast():
        played = play(
            backend,
            tokenizer,
            plan(ecfg.n_items, greedy=ecfg.greedy, k=ecfg.k),
            envs_for=envs_for,
            params={"greedy": greedy, "sample": sample},
            seed_of=lambda chunk: cfg.seed * 15_485_863 + step,
            max_response_tokens=ecfg.max_new_tokens,
            batch_size=ecfg.batch_size,
            error_reward=error_reward,
            max_prompt_tokens=cfg.rollout.max_prompt_tokens,
        )
    check_tool_failures(
        [e.info for _, e in played], cfg.max_tool_failure_rate, f"evaluation after step {step}"
    )
    out: dict[str, float] = {}
    for mode, name in (("greedy", "greedy"), ("sample", "sampled")):
        eps = [e for job, e in played if job.mode == mode]
        out[f"eval/{name}_accuracy"] = float(
            np.mean([bool(e.info.get("correct")) and e.error is None for e in eps])
        )
        out[f"eval/{name}_reward"] = float(np.mean([e.reward for e in eps]))
    out["time/eval_s"] = time.perf_counter() - t0
    return out
