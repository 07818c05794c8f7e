"""Devices by name: what a configuration may say (``check_device``), what this machine has
(``check_device_present``) and the torch device a name stands for (``resolve_device``).

Shared by training and evaluation, so neither imports the other for it.
"""

from __future__ import annotations

import re

from rlvr.config import ConfigError


def resolve_device(name: str):
    """``auto``: CUDA when torch sees a GPU, else the CPU; any other name as torch reads it."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def check_device(device: str) -> None:
    """``auto``, ``cpu``, ``mps`` or ``cuda[:N]`` (a configuration may be validated on a machine
    other than the one it runs on: ``check_device_present`` checks this one)."""
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", str(device)):
        raise ConfigError(f"device: must be auto, cpu, mps or cuda[:N], got {device!r}")


def check_device_present(device: str) -> None:
    """``ConfigError`` when ``device`` names CUDA and torch sees no GPU here."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"device: {device!r} but torch sees no CUDA GPU (use cpu or auto)")
