"""Math with verifiable rewards: last ``\\boxed{}`` answer checked by math-verify
(docs/design.md §4).

- ``score(response, ground_truth)`` / ``score_batch(responses, golds, workers=2)``: reward 1/0,
  hard per-item deadline on worker processes.
- ``load_dataset(name_or_path)``: MATH-500, AIME24, AMC23, Minerva, OlympiadBench, GSM8K (from the
  shared data folder, the Hugging Face hub, or a local JSONL/Parquet), plus ``"synthetic"``.
- ``MathEnv``: the Gymnasium environment ``rlvr/Math-v0``.
"""

from rlvr.envs.math.data import DATASETS, load_dataset
from rlvr.envs.math.env import MathEnv
from rlvr.envs.math.pool import VerifierPool, close_shared_pools
from rlvr.envs.math.reward import DEFAULT_TIMEOUT_S, compute_score, gold_to_text, score, score_batch
from rlvr.envs.math.synthetic import generate_problem

__all__ = [
    "DATASETS",
    "DEFAULT_TIMEOUT_S",
    "MathEnv",
    "VerifierPool",
    "close_shared_pools",
    "compute_score",
    "generate_problem",
    "gold_to_text",
    "load_dataset",
    "score",
    "score_batch",
]
