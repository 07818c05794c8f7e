"""What a run checks before its model loads (or downloads, or de-quantizes for minutes): the
trackers it reports to are installed, vLLM is there for ``rollout.backend=vllm``, and the
environment takes its settings and finds its dataset, each refused in one line (issue 52)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.agents.checkpoint import rng_state, set_rng_state
from rlvr.training.trackers import check_trackers, tracker_names
from rlvr.training.train_config import check_vllm_installed


def check_envs(cfg, make_env: Callable[[str], Any]) -> None:
    """Make (and close) one env of each split the run will use, leaving every RNG as it was."""
    state = rng_state()
    splits = ["train"] + ([cfg.eval.split] if cfg.eval.every or cfg.eval.at_end else [])
    try:
        for split in splits:
            make_env(split).close()
    finally:
        set_rng_state(state)


def preflight(cfg, make_env: Callable[[str], Any], *, loads_model: bool) -> None:
    """The checks above; the vLLM and env checks only for a run that loads its model."""
    check_trackers(tracker_names(cfg))
    if not loads_model:
        return
    if cfg.rollout.backend == "vllm":
        check_vllm_installed()  # before a hub name starts a download
    check_envs(cfg, make_env)


__all__ = ["check_envs", "preflight"]
