"""``rlvr/KnightsKnaves-v0``: one K&K puzzle per episode, scored by Logic-RL's reward.

Task sources: the procedural generator (``dataset=None``; splits keep test puzzles out of train)
or published data (``dataset=`` a Logic-RL parquet / K&K JSONL path or directory, or the hub name
``K-and-K/knights-and-knaves``). ``reset(seed=s, options={"index": i})`` gives task ``i`` of the
split: with several sizes ``n_people=[3, 5]``, task ``i`` has size ``sizes[i % len(sizes)]``.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from rlvr.envs.base import Score, SingleTurnEnv, drop_oversized, int_sizes
from rlvr.envs.kk.cot import solver_cot
from rlvr.envs.kk.data import load_dataset
from rlvr.envs.kk.generator import DEFAULT_TEST_SIZE, SPLITS, check_params, puzzle_at
from rlvr.envs.kk.logic import MAX_PEOPLE
from rlvr.envs.kk.prompts import assistant_prefill, kk_prompt
from rlvr.envs.kk.reward import answer_status, score
from rlvr.envs.prompts import TEMPLATES

DEFAULT_N_PEOPLE = 3
_TRAIN_INDEX_SPACE = 1 << 62


def _sizes(n_people: int | Sequence[int] | None, default: int | None) -> list[int] | None:
    if n_people is None:
        return None if default is None else [default]
    return int_sizes(n_people, "n_people", 2, MAX_PEOPLE)


class KnightsKnavesEnv(SingleTurnEnv):
    """Knights & Knaves with Logic-RL's prompt and reward (format +-1, answer +2/-1.5/-2).

    ``n_people=None`` means 3 for the generator and every size for a dataset. ``test_size``: how
    many procedural test puzzles each size has (train excludes their canonical keys).
    """

    def __init__(
        self,
        n_people: int | Sequence[int] | None = None,
        depth: int = 2,
        width: int = 2,
        dataset: str | None = None,
        split: str = "train",
        template: str = "qwen",
        prefill_think: bool = True,
        system_prompt: str | None = None,
        answer_prefill: str = "",
        base_seed: int = 0,
        test_size: int = DEFAULT_TEST_SIZE,
        max_prompt_chars: int = 20_000,
        render_mode: str | None = None,
    ):
        super().__init__(max_prompt_chars=max_prompt_chars, render_mode=render_mode)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if template not in TEMPLATES:
            raise ValueError(f"template must be one of {TEMPLATES}, got {template!r}")
        if not isinstance(test_size, int) or test_size < 1:
            raise ValueError(f"test_size must be a positive int, got {test_size!r}")
        self.depth, self.width, self.split, self.template = depth, width, split, template
        self.prefill_think, self.system_prompt = bool(prefill_think), system_prompt
        if not isinstance(answer_prefill, str):
            raise ValueError(f"answer_prefill must be a string, got {answer_prefill!r}")
        #: Text after ``<think>`` that starts the assistant turn (``assistant_prefill``); the
        #: response is scored with it in front.
        self.answer_prefill = answer_prefill
        self.base_seed, self.test_size, self.dataset = base_seed, test_size, dataset
        if dataset is None:
            self.sizes = _sizes(n_people, DEFAULT_N_PEOPLE)
            for n in self.sizes:
                check_params(n, depth, width)
            self.records: list[dict[str, Any]] | None = None
        else:
            self.sizes = _sizes(n_people, None)
            self.records = list(load_dataset(dataset, split=split, n_people=self.sizes))
            if not self.records:
                raise ValueError(
                    f"dataset {dataset!r} has no puzzles with n_people in {self.sizes}"
                )
            self.records = drop_oversized(
                self.records, lambda r: self._render(r["quiz"])[0], max_prompt_chars, repr(dataset)
            )

    @property
    def num_tasks(self) -> int | None:
        """Tasks in the split (None: the procedural train stream is unbounded)."""
        if self.records is not None:
            return len(self.records)
        return self.test_size * len(self.sizes) if self.split == "test" else None

    def _task(self, index: int) -> dict[str, Any]:
        if self.records is not None:
            return self.records[index]
        n = self.sizes[index % len(self.sizes)]
        puzzle = puzzle_at(
            self.split,
            index // len(self.sizes),
            n,
            self.depth,
            self.width,
            self.base_seed,
            self.test_size,
        )
        return {
            "quiz": puzzle.quiz,
            "names": list(puzzle.names),
            "n_people": n,
            "ground_truth": puzzle.ground_truth,
            "solution_text_format": puzzle.solution_text_format,
            "statements": puzzle.statements,
            "cot": solver_cot(puzzle.statements, puzzle.names),
            "seed": puzzle.seed,
        }

    def _render(self, quiz: str):
        return kk_prompt(
            quiz,
            template=self.template,
            prefill_think=self.prefill_think,
            system_prompt=self.system_prompt,
            answer_prefill=self.answer_prefill,
        )

    def _sample_task(self, rng, options: dict[str, Any]):
        index = options.get("index")
        bound = self.num_tasks
        if index is None:
            index = int(rng.integers(0, bound if bound is not None else _TRAIN_INDEX_SPACE))
        elif not isinstance(index, int) or index < 0 or (bound is not None and index >= bound):
            raise ValueError(f"options['index'] must be an int in [0, {bound}), got {index!r}")
        task = self._task(index)
        prompt, messages = self._render(task["quiz"])
        info = {
            "names": list(task["names"]),
            "n_people": task["n_people"],
            "messages": messages,
            "prefill": assistant_prefill(self.prefill_think, self.answer_prefill),
            "quiz": task["quiz"],
            "cot": task["cot"],
            "solution_text_format": task["solution_text_format"],
            "index": index,
            "split": self.split,
        }
        return prompt, dict(task["ground_truth"]), info

    def _score(self, response: str, ground_truth: Any) -> Score:
        return score(
            response,
            ground_truth,
            prefilled_think=self.prefill_think,
            answer_prefill=self.answer_prefill,
        )

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info = copy.deepcopy(
            info
        )  # reset and step infos must not share the ground-truth dict/lists
        components = info["reward_components"]
        info["format_error"] = components["format"] < 0
        # Disjoint flags: an answer error is a well-formatted response with a wrong/unparseable
        # answer.
        info["answer_error"] = not info["format_error"] and components["answer"] < 0
        info["answer_status"] = answer_status(Score(reward, info["correct"], components))
        return obs, reward, terminated, truncated, info
