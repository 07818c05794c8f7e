"""Experiment trackers beside ``metrics.jsonl``: ``report_to=[tensorboard, wandb]``.

Every tracker gets each step's record exactly as ``metrics.jsonl`` holds it (the same keys and
values; non-finite numbers left out, as JSON nulls them) at the record's ``step``, so a run
tracked elsewhere shows what the log file holds. As TRL's ``report_to`` does
(``transformers.integrations.WandbCallback``), Weights & Biases reads its project and mode from
its own variables: ``WANDB_PROJECT`` (default ``rlvr``), ``WANDB_MODE=offline`` (no network: the
run is kept under ``<out>/wandb`` for a later ``wandb sync``), ``WANDB_DIR``. The run's name is
its output folder's, its configuration the whole ``TrainConfig``, and a resumed run continues
the same W&B run (its id is kept in ``<out>/wandb_run_id``). TensorBoard writes
``<out>/tensorboard``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rlvr.config import ConfigError

#: What ``report_to`` accepts, and the extra that installs each.
TRACKERS = {
    "tensorboard": "pip install tensorboard",
    "wandb": "pip install 'rlvr[wandb]'",
}
WANDB_ID_FILE = "wandb_run_id"


class Tracker(Protocol):
    def log(self, record: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's finite numbers, ``step`` left out (it is the x axis)."""
    return {
        k: float(v)
        for k, v in record.items()
        if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)
    }


def tracker_names(cfg) -> list[str]:
    """A ``TrainConfig``'s ``report_to``, with ``tensorboard=true`` as ``tensorboard``."""
    return list(dict.fromkeys([*(["tensorboard"] if cfg.tensorboard else []), *cfg.report_to]))


def check_trackers(names: Sequence[str]) -> None:
    """``ConfigError`` for a tracker whose package is missing (asked before the model loads)."""
    import importlib.util
    import sys

    for name in names:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            raise ConfigError(f"report_to: {name} is not installed: {TRACKERS[name]}")


class TensorBoardTracker:
    def __init__(self, folder: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder))

    def log(self, record: Mapping[str, Any]) -> None:
        for k, v in scalars(record).items():
            self.writer.add_scalar(k, v, record["step"])

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, out: Path, config: Mapping[str, Any], resume: bool):
        import wandb

        id_file = out / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if resume and id_file.is_file() else None
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "rlvr",
            name=out.resolve().name,
            dir=os.environ.get("WANDB_DIR") or str(out),
            config=dict(config),
            id=run_id,
            resume="allow" if run_id else None,
            reinit="create_new",
        )
        id_file.write_text(self.run.id + "\n")

    def log(self, record: Mapping[str, Any]) -> None:
        self.run.log(scalars(record), step=int(record["step"]))

    def close(self) -> None:
        self.run.finish()


def make_trackers(
    names: Sequence[str], out: Path, config: Mapping[str, Any], resume: bool = False
) -> list[Tracker]:
    """One tracker per name of ``report_to`` (module docstring)."""
    trackers: list[Tracker] = []
    for name in dict.fromkeys(names):
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(out / "tensorboard"))
        elif name == "wandb":
            trackers.append(WandbTracker(out, config, resume))
    return trackers


__all__ = ["TRACKERS", "Tracker", "check_trackers", "make_trackers", "scalars", "tracker_names"]
