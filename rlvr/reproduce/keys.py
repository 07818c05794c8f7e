"""The keys of the run cache: what identifies a training run, an evaluation and a base model.

A training run is identified by the hash of its ``TrainConfig`` (``run_key``), an evaluation by
that of its ``EvalConfig`` (``eval_key``), each with the model named by what it stands for
(``model_identity``): the run cache (``rlvr.reproduce.runs``) keeps them under
``<cache>/runs/<key>/`` and ``<cache>/evals/<key>/``.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from rlvr.config import config_hash
from rlvr.eval.runner import EvalConfig
from rlvr.integrations.verl.checkpoints import checkpoint_identity, is_verl_checkpoint

#: Fields that do not change what a run computes (blanked before hashing).
_NEUTRAL = {"out": "", "resume": False, "progress": True, "tensorboard": False}
#: Fields that change nothing a run computes, added after runs were cached: left out of the key,
#: so that cached runs keep theirs.
_UNKEYED = ("max_tool_failure_rate",)


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
    return config_hash(
        dataclasses.replace(cfg, **_NEUTRAL, model=model_identity(cfg.model)), leave_out=_UNKEYED
    )


def eval_key(ecfg: EvalConfig) -> str:
    return config_hash(dataclasses.replace(ecfg, out="", model=model_identity(ecfg.model)))
