"""A task of your own: a file of prompts and reward functions in TRL's signature.

``rlvr train env=custom dataset=tasks.jsonl reward=my_lab.rewards:exact_match`` trains on it;
``rlvr eval``, ``rlvr sample`` / ``score``, the verl export and the TRL adapters take it through
the environment registry like any other env. ``CustomTaskEnv`` (``rlvr/Custom-v0``) reads the
rows; ``rewards`` loads and calls the functions. See ``docs/custom_tasks.md``.
"""

from rlvr.envs.custom.env import CustomTaskEnv, read_rows
from rlvr.envs.custom.rewards import exact_match, score, score_batch

__all__ = ["CustomTaskEnv", "exact_match", "read_rows", "score", "score_batch"]
