"""Gymnasium environments with verifiable rewards.

``import rlvr`` registers them; ``gymnasium.make("rlvr/KnightsKnaves-v0", n_people=3)`` etc.
Entry points are strings, so importing one environment never imports another.
"""
from __future__ import annotations

import gymnasium as gym

from rlvr.envs.base import AnyText, Score, SingleTurnEnv, coerce_text

ENV_IDS = {
    "rlvr/KnightsKnaves-v0": "rlvr.envs.kk.env:KnightsKnavesEnv",
    "rlvr/Math-v0": "rlvr.envs.math.env:MathEnv",
    "rlvr/SearchQA-v0": "rlvr.envs.searchqa.env:SearchQAEnv",
}


def register_all() -> None:
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=True)


__all__ = ["AnyText", "Score", "SingleTurnEnv", "coerce_text", "ENV_IDS", "register_all"]
