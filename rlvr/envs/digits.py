"""``rlvr/Digits-v0``: write the sum of two numbers in digits. The task the quick paths train on.

A randomly initialised model (the ``micro`` model of the smoke runs) scores the floor on K&K,
math and search QA on every response, so each group's rewards are equal and every GRPO-family
advantage is 0: nothing trains. This task's reward is graded where a uniform policy already
varies, so its groups have reward variance from the first step, while full reward still needs
the right answer:

- ``format``: the share of the response's characters that are ASCII digits (0..1). A uniform
  policy over the micro model's 260 byte-level tokens writes a digit ~4% of the time, so the
  share differs between the responses of a group; the gradient moves probability to the ten
  digit tokens (the answer's alphabet), which is what shows up as a rising reward.
- ``answer``: 1 when the response, stripped of surrounding whitespace, is exactly the sum;
  else 0 (``correct``).

``reward = format + answer``, in [0, 2]; only the bare right number scores 2. The structure is
K&K's (Logic-RL: a format term plus an answer term), with the format term graded.

Tasks: ``n_digits`` (1..4, or a list: task ``i`` has ``n_digits[i % len]``) digits per operand;
task ``i`` of ``split`` is drawn from a generator seeded with ``(seed, split, i)``, so train and
test are separate streams of the same distribution (with one-digit operands there are only 100
sums: a check of training, not of generalisation).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rlvr.envs.base import Score, SingleTurnEnv, coerce_text, int_sizes
from rlvr.envs.prompts import TEMPLATES, chat_messages, render_prompt

SYSTEM_PROMPT = "Answer with the number only, in digits."
SPLITS = ("train", "test")
MAX_DIGITS = 4
#: The index space of each split's stream.
NUM_TASKS = 2**31
_SPLIT_SEED = {"train": 0, "test": 1}


def score(response: Any, ground_truth: Any) -> Score:
    """``format`` (share of digit characters) + ``answer`` (1 for exactly the sum); never
    raises."""
    text = coerce_text(response)
    share = sum(c in "0123456789" for c in text) / len(text) if text else 0.0
    parsed = text.strip()
    correct = parsed == str(ground_truth).strip()
    answer = 1.0 if correct else 0.0
    if correct:
        reason = ""
    elif not parsed:
        reason = "empty response"
    elif parsed.isdigit():
        reason = "wrong sum"
    else:
        reason = "not a number alone"
    return Score(share + answer, correct, {"format": share, "answer": answer}, reason, parsed)


def task_at(index: int, split: str, sizes: list[int], seed: int = 0) -> tuple[int, int, int]:
    """``(a, b, n_digits)`` of task ``index`` of ``split``."""
    n = sizes[index % len(sizes)]
    rng = np.random.default_rng([seed, _SPLIT_SEED[split], index])
    low = 0 if n == 1 else 10 ** (n - 1)
    a, b = (int(x) for x in rng.integers(low, 10**n, size=2))
    return a, b, n


class DigitsEnv(SingleTurnEnv):
    """Write ``a + b`` in digits (module docstring)."""

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
