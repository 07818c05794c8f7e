"""Group-relative advantages (outcome rewards, one scalar per response).

Rewards are laid out group by group: ``rewards[g * G + j]`` is response j to prompt g, G the
group size. An estimator is one registered ``AdvantageEstimator`` (like verl's
``register_adv_est``): its function and the verl settings that compute the same advantage, which
a verl launch reads (``rlvr.integrations.verl.config``) and refuses, in one line, when there are
none. ``loss.advantage`` names any registered one; ``compute_advantages`` calls it.

- ``grpo`` (Shao et al. 2024): ``A_i = (r_i - mean(r)) / (std(r) + eps)``.
- ``drgrpo`` (Liu et al. 2025, "Understanding R1-Zero-Like Training"): ``A_i = r_i - mean(r)``,
  no std division (removes the question-difficulty bias).

``std`` is the unbiased (Bessel-corrected) sample std, as ``torch.std`` in verl's
``compute_grpo_outcome_advantage``. A group of one response has no baseline, so its advantage is
0 (verl instead returns ``r / (1 + eps)`` for singleton groups; we choose 0 so a lone sample never
pushes the policy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlvr import registries

if TYPE_CHECKING:  # the registry itself needs no torch: a configuration is checked without it
    import torch

#: ``fn(rewards [B], group_size, *, eps) -> advantages [B]``.
AdvantageFn = Callable[..., "torch.Tensor"]


@dataclass(frozen=True)
class AdvantageEstimator:
    """An advantage estimator: its function and how verl computes the same advantage."""

    name: str
    fn: AdvantageFn
    #: verl 0.9.1's ``algorithm.*`` overrides that compute the same advantage (``None``: verl has
    #: no such estimator, and a verl launch refuses this one).
    verl: Mapping[str, Any] | None = None
    #: Where the estimator comes from.
    source: str = ""


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_advantage_estimator(estimator: AdvantageEstimator) -> AdvantageEstimator:
    """Add ``estimator`` to the registry (a different one under a known name raises)."""
    return registries.add(ADVANTAGE_ESTIMATORS, estimator.name, estimator, "estimator")


def get_estimator(name: str) -> AdvantageEstimator:
    """The registered estimator ``name`` (``ValueError`` naming the known ones otherwise)."""
    estimator = ADVANTAGE_ESTIMATORS.get(name)
    if estimator is None:
        raise ValueError(
            f"estimator: unknown advantage estimator {name!r}; "
            f"known: {sorted(ADVANTAGE_ESTIMATORS)}"
        )
    return estimator


def _grouped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size: must be a positive integer, got {group_size!r}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards: expected shape [B], got {tuple(rewards.shape)}")
    if rewards.numel() % group_size:
        raise ValueError(f"group_size: {group_size} does not divide the {rewards.numel()} rewards")
    return rewards.detach().reshape(-1, group_size)


def group_advantages(
    rewards: torch.Tensor, group_size: int, *, scale: str = "std", eps: float = 1e-6
) -> torch.Tensor:
    """Per-sequence advantages ``[B]``: ``r - mean_group(r)``, divided by ``std_group(r) + eps``
    when ``scale="std"`` (GRPO), not when ``scale="none"`` (Dr.GRPO). Groups of one give 0.
    Floating-point rewards keep their dtype; integer/bool rewards become float32.
    """
    import torch

    if scale not in ("std", "none"):
        raise ValueError(f"scale: {scale!r} is not one of ['std', 'none']")
    if not (eps >= 0.0 and math.isfinite(eps)):
        raise ValueError(f"eps: must be >= 0, got {eps!r}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.float32)
    r = _grouped(rewards, group_size)
    if group_size == 1:
        return torch.zeros_like(rewards)
    centred = r - r.mean(dim=1, keepdim=True)
    if scale == "std":
        centred = centred / (r.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)


def grpo_advantages(rewards: torch.Tensor, group_size: int, *, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: ``A_i = (r_i - mean(r)) / (std(r) + eps)`` within each group."""
    return group_advantages(rewards, group_size, scale="std", eps=eps)


def drgrpo_advantages(rewards: torch.Tensor, group_size: int, *, eps: float = 1e-6) -> torch.Tensor:
    """Dr.GRPO: ``A_i = r_i - mean(r)`` within each group (``eps`` unused, kept for one
    signature)."""
    return group_advantages(rewards, group_size, scale="none", eps=eps)


#: verl's GRPO advantage (``core_algos.compute_grpo_outcome_advantage``) with and without the std
#: division (``algorithm.norm_adv_by_std_in_grpo``).
register_advantage_estimator(
    AdvantageEstimator(
        "grpo",
        grpo_advantages,
        verl={"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": True},
        source="Shao et al. 2024 (DeepSeekMath)",
    )
)
register_advantage_estimator(
    AdvantageEstimator(
        "drgrpo",
        drgrpo_advantages,
        verl={"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": False},
        source="Liu et al. 2025, Understanding R1-Zero-Like Training",
    )
)


def compute_advantages(name: str, rewards: torch.Tensor, group_size: int, **kwargs) -> torch.Tensor:
    """Advantages from the registered estimator ``name`` (``grpo``, ``drgrpo``, ...)."""
    return get_estimator(name).fn(rewards, group_size, **kwargs)
