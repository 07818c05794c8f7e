"""What a run checks before its model loads (or downloads, or de-quantizes for minutes), besides
its rollout backend (``rlvr.agents.rollout.check_backend_present``): the trackers it reports to
are installed, and the environment takes its settings and finds its dataset, each refused in
one line (issue 52). And one line, not a refusal, when the process runs other kernels than the
mode asked for (``rlvr.repro.kernel_mode_note``): a script that trains without
``apply_kernel_mode`` gets native kernels, whose bits another processor does not give."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rlvr.agents.checkpoint import rng_state, set_rng_state
from rlvr.repro import kernel_mode_note
from rlvr.training.trackers import check_trackers, tracker_names


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
    """The checks above; the env's only for a run that loads its model (a test hands one in)."""
    if note := kernel_mode_note():
        print(note, file=sys.stderr)
    check_trackers(tracker_names(cfg))
    if loads_model:
        check_envs(cfg, make_env)


__all__ = ["check_envs", "preflight"]
