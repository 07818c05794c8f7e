"""Knights & Knaves: seeded generator, solver chain of thought, Logic-RL prompt and reward.

``score(response, ground_truth, prefilled_think=False)`` is the pure reward; ``KnightsKnavesEnv``
(``gymnasium.make("rlvr/KnightsKnaves-v0")``) wraps it. See ``docs/envs_kk.md``.
"""

from rlvr.envs.kk.cot import solver_cot
from rlvr.envs.kk.data import load_dataset
from rlvr.envs.kk.env import KnightsKnavesEnv
from rlvr.envs.kk.generator import (
    NAME_POOL,
    Puzzle,
    canonical_key,
    generate_puzzle,
    make_split,
    puzzle_at,
)
from rlvr.envs.kk.logic import solutions
from rlvr.envs.kk.prompts import LOGIC_RL_SYSTEM_PROMPT, SHORT_SYSTEM_PROMPT, kk_prompt
from rlvr.envs.kk.render import parse_quiz, parse_statement, render_statement
from rlvr.envs.kk.reward import compute_score, score

__all__ = [
    "KnightsKnavesEnv",
    "LOGIC_RL_SYSTEM_PROMPT",
    "NAME_POOL",
    "Puzzle",
    "SHORT_SYSTEM_PROMPT",
    "canonical_key",
    "compute_score",
    "generate_puzzle",
    "kk_prompt",
    "load_dataset",
    "make_split",
    "parse_quiz",
    "parse_statement",
    "puzzle_at",
    "render_statement",
    "score",
    "solutions",
    "solver_cot",
]
