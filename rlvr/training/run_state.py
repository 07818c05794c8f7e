"""What a checkpoint of a training run holds, and how a trainer resumes from one: the weights, the
optimizer and scheduler, the RNG states and the reference model, with the step, the data position
and the configuration in the manifest (``rlvr.agents.checkpoint``: atomic, checksummed files), so
a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rlvr.agents.checkpoint import (
    CheckpointError,
    check_resume_config,
    find_resume_checkpoint,
    load_payload,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def save_state(trainer) -> Path:
    """Checkpoint ``trainer`` at its step: weights, optimizer, scheduler, RNG states, reference,
    and the step, data position and configuration in the manifest."""
    payload = {
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "rng": rng_state(),
    }
    if trainer.policy.reference is not None:
        payload["reference"] = trainer.policy.reference.state_dict()
    meta = {
        "step": trainer.step,
        "data_position": trainer.data_position,
        "config": dataclasses.asdict(trainer.cfg),
    }
    return save_checkpoint(
        trainer.checkpoint_root, trainer.step, payload, meta, keep=trainer.cfg.keep_checkpoints
    )


def restore_state(trainer) -> bool:
    """Load the newest valid checkpoint; False when there is none. Refuses (``CheckpointError``)
    a changed configuration, checkpoints that are all corrupt, and unsafe file content."""
    found = find_resume_checkpoint(trainer.checkpoint_root)
    if found is None:
        return False
    path, manifest = found
    meta = manifest["meta"]
    if not isinstance(meta.get("config"), dict) or not all(
        type(meta.get(k)) is int and meta[k] >= 0 for k in ("step", "data_position")
    ):
        raise CheckpointError(
            f"checkpoint {path}: its manifest has no configuration, step or data position"
        )
    check_resume_config(
        meta["config"],
        dataclasses.asdict(trainer.cfg),
        allow=trainer.allow_config_change,
        defaults=dataclasses.asdict(type(trainer.cfg)()),
    )
    state = load_payload(path, manifest, map_location=trainer.device)
    try:
        trainer.model.load_state_dict(state["model"])
        if "reference" in state and trainer.policy.reference is not None:
            trainer.policy.reference.load_state_dict(state["reference"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:  # another model's state
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(
            f"checkpoint {path} does not fit this run ({type(e).__name__}: {first})"
        ) from None
    trainer.step, trainer.data_position = meta["step"], meta["data_position"]
    trainer.backend.sync_weights(trainer.model)
    return True
