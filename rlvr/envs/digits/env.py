"""``DigitsEnv`` (``rlvr/Digits-v0``): task ``i`` of a split is ``a + b`` with operands drawn
from a generator seeded with ``(seed, split, i)`` (``task_at``); the reward is
``rlvr.envs.digits.reward``'s (the package docstring says what the env is for)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rlvr.envs.base import Score, SingleTurnEnv, int_sizes
from rlvr.envs.digits.reward import score
from rlvr.envs.prompts import TEMPLATES, chat_messages, render_prompt

SYSTEM_PROMPT = "Answer with the number only, in digits."
SPLITS = ("train", "test")
MAX_DIGITS = 4
#: The index space of each split's stream.
NUM_TASKS = 2**31
_SPLIT_SEED = {"train": 0, "test": 1}


def task_at(index: int, split: str, sizes: list[int], seed: int = 0) -> tuple[int, int, int]:
    """``(a, b, n_digits)`` of task ``index`` of ``split``."""
    n = sizes[index % len(sizes)]
    rng = np.random.default_rng([seed, _SPLIT_SEED[split], index])
    low = 0 if n == 1 else 10 ** (n - 1)
    a, b = (int(x) for x in rng.integers(low, 10**n, size=2))
    return a, b, n


class DigitsEnv(SingleTurnEnv):
    """Write ``a + b`` in digits (``rlvr.envs.digits``)."""

    def __init__(
        self,
        n_digits: int | Sequence[int] = 1,
        split: str = "train",
        template: str = "qwen",
        seed: int = 0,
        system_prompt: str | None = SYSTEM_PROMPT,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode=render_mode)
        if template not in TEMPLATES:
            raise ValueError(f"template must be one of {TEMPLATES}, got {template!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.sizes = int_sizes(n_digits, "n_digits", 1, MAX_DIGITS)
        self.split, self.template, self.seed = split, template, int(seed)
        self.system_prompt = system_prompt

    @property
    def num_tasks(self) -> int:
        """Tasks in the split (an unbounded stream: its index space)."""
        return NUM_TASKS

    def _sample_task(self, rng, options: dict[str, Any]):
        index = options.get("index")
        if index is None:
            index = int(rng.integers(NUM_TASKS))
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            raise ValueError(f"options['index'] must be an int, got {index!r}")
        if not 0 <= int(index) < NUM_TASKS:
            raise ValueError(f"options['index'] must be in [0, {NUM_TASKS}), got {index}")
        a, b, n = task_at(int(index), self.split, self.sizes, self.seed)
        question = f"What is {a} + {b}?"
        prompt = render_prompt(self.system_prompt, question, self.template)
        extra = {
            "messages": chat_messages(self.system_prompt, question),
            "index": int(index),
            "n_digits": n,
        }
        return prompt, str(a + b), extra

    def _score(self, response: str, ground_truth: Any) -> Score:
        return score(response, ground_truth)
