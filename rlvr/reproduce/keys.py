"""The keys of the run cache: what identifies a training run and an evaluation.

A key covers a configuration's effective fields (``rlvr.config.effective``: what differs from the
defaults, the fields declared ``unkeyed`` left out) and the key schema (``rlvr.config.KEY_SCHEMA``),
with the model named by what it stands for (``model_identity``); a training run's key also covers
the resolved parameters of its own method (``rlvr.agents.algorithms.resolved_fields``), not the
other methods' fields of its ``WeightConfig``. So registering a method, or adding a field whose
default computes what was computed before, moves no key. The run cache (``rlvr.reproduce.runs``)
keeps runs under ``<cache>/runs/<run_key>/`` and evaluations under ``<cache>/evals/<eval_key>/``.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from rlvr.agents.algorithms import resolved_fields
from rlvr.config import config_key
from rlvr.eval.runner import EvalConfig
from rlvr.integrations.verl.checkpoints import checkpoint_identity, is_verl_checkpoint


def model_identity(model: str) -> str:
    """What ``model`` names, as hashed into run and evaluation keys.

    A tiny preset (``tiny-kk``) stands for its build directory name, ``<preset>-<hash of its
    BuildConfig and training data>``: a changed preset then gives new keys instead of reusing
    runs and evaluations of the old base. A model inside a run cache stands for its place in the
    cache (``runs/<key>/final``, ``sft/<key>``), so evaluation keys do not depend on where the
    cache lives. A checkpoint verl saved (``.../checkpoints/global_step_<N>/actor/huggingface``
    of a generated run folder) stands for its weights' hash
    (``rlvr.integrations.verl.checkpoints.checkpoint_identity``). Any other name or path is used as
    given.
    """
    from rlvr.models.presets import parse_spec

    if parse_spec(model) is None:
        p = Path(model)
        if p.name == "final" and p.parent.parent.name == "runs":
            return f"runs/{p.parent.name}/final"
        if p.parent.name == "sft" and (p / "sft.json").exists():
            return f"sft/{p.name}"
        if p.name == "huggingface" and is_verl_checkpoint(p):
            return checkpoint_identity(p)
        return model
    return preset_build_key(model)


@functools.lru_cache(maxsize=None)
def preset_build_key(name: str) -> str:
    from rlvr.models.build import build_key
    from rlvr.models.presets import preset_config

    return build_key(preset_config(name))


def base_seed_of(model: str) -> int:
    """The base seed a model name carries (``tiny-kk@2`` -> 2; 0 for anything else)."""
    from rlvr.models.presets import parse_spec

    parsed = parse_spec(model)
    return parsed[1] if parsed else 0


def run_key(cfg) -> str:
    """The key of training run ``cfg`` (a ``TrainConfig``; module docstring)."""
    general = dataclasses.replace(cfg, model=model_identity(cfg.model), weights=type(cfg)().weights)
    return config_key(general, weights=resolved_fields(cfg.weights, cfg.algo))


def eval_key(ecfg: EvalConfig) -> str:
    """The key of evaluation ``ecfg`` (module docstring)."""
    return config_key(dataclasses.replace(ecfg, model=model_identity(ecfg.model)))
