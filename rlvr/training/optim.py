"""The optimizer side of an update: the learning-rate schedule, optimizer steps per batch, and
mixed precision (autocast and float16 gradient scaling)."""

from __future__ import annotations

import contextlib
import math

import torch

from rlvr.agents.algorithms import Algorithm


def lr_factor(step: int, *, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """Multiplier of the base learning rate at optimizer-schedule step ``step`` (0-based).

    Linear warm-up over ``warmup`` steps, then ``constant``, ``linear`` decay or ``cosine``
    (Loshchilov & Hutter 2017) down to ``min_ratio`` at ``total``.
    """
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    span = max(1, total - warmup)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    if schedule == "linear":
        return min_ratio + (1.0 - min_ratio) * (1.0 - progress)
    if schedule == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"optim.schedule: unknown schedule {schedule!r}")


def optimizer_steps_per_batch(cfg, algorithm: Algorithm) -> int:
    """Optimizer steps of one batch: stages x epochs x mini-batches."""
    batch = cfg.prompts_per_step * cfg.group_size
    return cfg.ppo_epochs * (batch // (cfg.mini_batch_size or batch)) * algorithm.n_stages


class Precision:
    """Autocast context and (float16) gradient scaling for ``dtype`` on ``device``."""

    def __init__(self, dtype: str, device: torch.device):
        self.dtype = getattr(torch, dtype)
        self.device = device
        self.enabled = self.dtype != torch.float32
        self.scaler = torch.amp.GradScaler(device.type) if self.dtype == torch.float16 else None

    def autocast(self):
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer) -> None:
        if self.scaler is not None:
            self.scaler.step(optimizer)
        else:
            optimizer.step()

    def after_step(self) -> None:
        """Adjust the loss scale (also after a skipped step, which lowers it)."""
        if self.scaler is not None:
            self.scaler.update()
