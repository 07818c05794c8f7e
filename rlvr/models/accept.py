"""An acceptance check on a base draw: for recipes whose outcome is itself a draw.

Whether a ~1M-parameter K&K warm start learns to copy the inhabitants' names by content (and so
can answer 4- and 5-person puzzles at all) depends on its seed: every recipe measured put one
draw in three out of the 0.05-0.8 band on some size, and which draw failed moved with any change
to the arithmetic (docs/tiny_models.md, "K&K by puzzle size"). A base that cannot copy five
names is not a weaker base but a broken one, the way a pretrained model that cannot follow the
answer format would be: RL from it measures nothing. So a recipe can ask that a draw be checked
and, when it fails, drawn again.

The check reads the *train* split (items ``0..items-1`` of each group, greedy), never the
held-out test items that evaluation reports, so selecting a draw does not select its test score.
Draw ``d`` of a build with seed ``s`` is the same recipe with seed ``s + DRAW_STRIDE * d``; the
draws are tried in order, so the kept draw is a function of the recipe alone, and the same bits
everywhere the kernel mode gives them. ``AcceptConfig.draws = 1`` (the default) is no check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.envs import env_spec
from rlvr.envs.warmstart import builder
from rlvr.files import RecordError, read_json, write_json_atomic
from rlvr.models.evaluate import evaluate_base

#: Seed distance between draws of one base: far above any base seed (``tiny-kk@B`` is seed +B).
DRAW_STRIDE = 10_000


@dataclass(frozen=True)
class AcceptConfig:
    #: Draws tried at most (1: no check; the build is kept whatever it scores).
    draws: int = 1
    #: Values of the task's group key that must each land in the band (K&K: puzzle sizes).
    groups: tuple[int, ...] = ()
    #: The band, greedy accuracy: issue 28's 0.05-0.8 ("weak but not helpless").
    low: float = 0.05
    high: float = 0.8
    #: Train-split items per group.
    items: int = 100

    def __post_init__(self):
        if self.draws < 1:
            raise ValueError(f"AcceptConfig.draws must be >= 1, got {self.draws}")
        if self.draws > 1 and not self.groups:
            raise ValueError("AcceptConfig.groups must name the groups to check when draws > 1")
        if not 0.0 <= self.low <= self.high <= 1.0:
            raise ValueError(
                f"AcceptConfig needs 0 <= low <= high <= 1, got low={self.low}, high={self.high}"
            )
        if self.items < 1:
            raise ValueError(f"AcceptConfig.items must be >= 1, got {self.items}")


def check(model, tokenizer, task: str, data: dict[str, Any], accept: AcceptConfig) -> dict:
    """Greedy accuracy per group on the train split, and whether every one is in the band."""
    key = env_spec(task).group_key
    if not key:
        raise ValueError(f"task {task!r} has no item groups to check a base draw on")
    rows = evaluate_base(
        model,
        tokenizer,
        task,
        {**data, key: list(accept.groups)},
        n=accept.items,
        split="train",
        read=builder(task).unslip,
    )
    accuracy = {row["group"]: row["accuracy"] for row in rows}
    passed = all(accept.low <= a <= accept.high for a in accuracy.values())
    return {"accuracy": accuracy, "passed": passed}


def rejected(log: Path) -> list[dict]:
    """The draws a build has already tried and rejected (``log``: written by ``save_rejected``),
    so a killed build resumes at the next draw instead of rebuilding the rejected ones; a log
    that is not a list of draws is ignored (the draws are then tried again)."""
    try:
        tried = read_json(log)
    except RecordError:
        return []
    return tried if isinstance(tried, list) and all(isinstance(t, dict) for t in tried) else []


def save_rejected(log: Path, tried: list[dict]) -> None:
    """Write the rejected draws to ``log`` (whole, then renamed into place)."""
    write_json_atomic(log, tried, indent=2)
