"""The evaluation loop shared by ``rlvr eval``, the trainer's periodic evaluation and the checks of
the tiny base models: jobs (a greedy response and ``k`` samples per task) played in chunks
through the episode driver (``rlvr.agents.rollout.multiturn.run_episodes``).

A job is one response to one task. ``plan`` lists the greedy jobs of every task first, then the
samples task by task. ``play`` cuts that list into chunks of ``batch_size`` jobs (0: one chunk);
within a chunk the greedy jobs, then the sampled ones, are one driver call each, seeded with
``seed_of(chunk)``, so the same jobs, chunking and seeds give the same responses. The caller says
how envs are made and reset for a part (``envs_for``), so a loop over the trainer's env pool and
one over fresh envs per response share this code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.agents.rollout.base import RolloutBackend, SamplingParams
from rlvr.agents.rollout.multiturn import Episode, run_episodes

MODES = ("greedy", "sample")


@dataclass(frozen=True)
class Job:
    """One response to generate: task ``task`` (an index into the caller's tasks), ``mode``
    ``greedy`` or ``sample``, and which sample (0 for greedy)."""

    task: int
    mode: str
    sample: int = 0


def plan(n_tasks: int, *, greedy: bool = True, k: int = 0) -> list[Job]:
    """Greedy jobs of every task first (when ``greedy``), then ``k`` samples per task."""
    jobs = [Job(t, "greedy", 0) for t in range(n_tasks)] if greedy else []
    return jobs + [Job(t, "sample", j) for t in range(n_tasks) for j in range(k)]


def parts(jobs: Sequence[Job], batch_size: int = 0) -> Iterator[tuple[int, list[Job]]]:
    """``(chunk, jobs)``: each chunk of ``batch_size`` jobs (0: all) split by mode, greedy first."""
    size = batch_size or max(len(jobs), 1)
    for chunk, start in enumerate(range(0, len(jobs), size)):
        batch = jobs[start : start + size]
        for mode in MODES:
            part = [j for j in batch if j.mode == mode]
            if part:
                yield chunk, part


def task_runs(part: Sequence[Job]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of consecutive jobs of one task in ``part``."""
    runs, start = [], 0
    for i in range(1, len(part) + 1):
        if i == len(part) or part[i].task != part[start].task:
            runs.append((start, i))
            start = i
    return runs


def play(
    backend: RolloutBackend,
    tokenizer,
    jobs: Sequence[Job],
    *,
    envs_for: Callable[[list[Job]], tuple[list[Any], list[str]]],
    params: Mapping[str, SamplingParams],
    seed_of: Callable[[int], int],
    max_response_tokens: int,
    batch_size: int = 0,
    error_reward: float = 0.0,
    max_prompt_tokens: int | None = None,
    release: Callable[[list[Any]], None] | None = None,
    on_part: Callable[[int], None] | None = None,
) -> list[tuple[Job, Episode]]:
    """``(job, finished episode)`` for every job, in the order played (see ``parts``).

    ``envs_for(part)`` returns an env per job, already reset to its task, and the prompts;
    ``params[mode]`` is how that mode samples; ``release(envs)`` (if given) runs after a part is
    played, ``on_part(n)`` after each part of ``n`` jobs (a progress bar).
    """
    played: list[tuple[Job, Episode]] = []
    for chunk, part in parts(jobs, batch_size):
        envs, prompts = envs_for(part)
        episodes = run_episodes(
            backend,
            tokenizer,
            envs,
            prompts,
            params[part[0].mode],
            max_response_tokens=max_response_tokens,
            seed=seed_of(chunk),
            error_reward=error_reward,
            max_prompt_tokens=max_prompt_tokens,
        )
        if release is not None:
            release(envs)
        played += zip(part, episodes)
        if on_part is not None:
            on_part(len(part))
    return played


__all__ = ["Job", "MODES", "parts", "plan", "play", "task_runs"]
