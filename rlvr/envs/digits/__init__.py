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

from rlvr.envs.digits.env import MAX_DIGITS, SYSTEM_PROMPT, DigitsEnv, task_at
from rlvr.envs.digits.reward import score

__all__ = ["DigitsEnv", "MAX_DIGITS", "SYSTEM_PROMPT", "score", "task_at"]
