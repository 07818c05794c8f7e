"""Math's warm start (``EnvSpec.traces``, ``rlvr.envs.warmstart``): the synthetic generator's
worked solution, ending in ``\\boxed{answer}``. With ``slip_frac`` a share of the solutions box a
near miss instead (``slipped_solution``): noisy supervision, like the imperfect text a pretrained
model imitates.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

from rlvr.envs.warmstart import (
    EvalItem,
    Segment,
    TraceBuilder,
    grouped_eval_items,
    make_env,
    share,
)

_MATH_INDEX_SPACE = 2**31


_BOXED_END = re.compile(r"\\boxed\{(-?)(\d+)(/\d+)?\}\.$")


#: The steps a slip draws from by default: off by 1-3 either way.
SLIP_STEPS = (-3, -2, -1, 1, 2, 3)


def slipped_solution(solution: str, rng: random.Random, steps: tuple[int, ...] = SLIP_STEPS) -> str:
    """``solution`` with its boxed answer off by a small step: ``= 36. ... \\boxed{36}.`` ->
    ``\\boxed{38}.`` (a fraction's numerator moves: ``82/63`` -> ``81/63``).

    The worked steps stay right; only the copy into the box slips, by a step drawn from
    ``steps`` (default 1-3 either way) and never to zero, so the slipped answer is always wrong.
    The answer text is the generator's own (``_num``), parsed with a regular expression, never
    evaluated.
    """
    m = _BOXED_END.search(solution)
    if m is None:
        raise ValueError(f"no integer or fraction boxed at the end of {solution!r}")
    value = int(m.group(1) + m.group(2))
    step = rng.choice(steps)
    if value + step == 0:
        step = -step
    return f"{solution[: m.start()]}\\boxed{{{value + step}{m.group(3) or ''}}}."


def _math_examples(settings: dict[str, Any], seed: int, split: str) -> Iterator[list[Segment]]:
    """Worked solutions; with ``slip_frac=p`` a share ``p`` box a near miss (``slipped_solution``).

    Why slips: at this scale the base's math errors are missing arithmetic, which RL cannot teach
    in minutes (measured: GRPO gained +1.9 points of avg@4 on the clean base, whatever the
    learning rate, batch shape or base strength; docs/tiny_models.md). A base that also slips, as
    a pretrained model imitating imperfect text does, has a behaviour the reward can remove.
    """
    env = make_env("math", settings, split)
    if not env.synthetic:
        raise ValueError("math warm-start traces need dataset='synthetic' (worked solutions)")
    slip_frac = share(settings, "slip_frac")
    steps = tuple(settings.get("slip_steps", SLIP_STEPS))
    if not steps or not all(isinstance(k, int) and not isinstance(k, bool) and k for k in steps):
        raise ValueError(f"slip_steps must be non-zero integers, got {list(steps)}")
    rng = random.Random(seed)
    while True:
        index = rng.randrange(_MATH_INDEX_SPACE)
        prompt, _ = env.reset(seed=0, options={"index": index})
        solution = env.record(index)["solution"]
        if slip_frac and rng.random() < slip_frac:
            solution = slipped_solution(solution, rng, steps)
        yield [(prompt, False), (solution, True)]


def _math_eval_items(settings: dict[str, Any], n: int, split: str) -> list[EvalItem]:
    levels = settings.get("difficulty") or [1, 2, 3, 4, 5]
    return grouped_eval_items("math", "difficulty", levels, settings, n, split)


#: Worked solutions are up to ~70 tokens.
MATH = TraceBuilder(
    _math_examples,
    _math_eval_items,
    ("slip_frac", "slip_steps"),
    max_new_tokens=160,
    tiny={
        "dataset": "synthetic",
        "difficulty": [1, 2, 3, 4, 5],
        "template": "plain",
        "system_prompt": "",
    },
)
