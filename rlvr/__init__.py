"""rlvr: a reproducibility harness for RL with verifiable rewards (GRPO-SG, arXiv 2511.00066)."""

from rlvr.envs import register_all as _register_all

__version__ = "0.1.0"

_register_all()
