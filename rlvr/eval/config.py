"""``EvalConfig``: the one description of an evaluation (``rlvr eval key=value ...``), apart from
the runner (``rlvr.eval.runner``) so that a configuration is read and checked without loading
torch: ``rlvr eval`` and ``rlvr train`` (its periodic evaluation) answer a bad value at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlvr.config import unkeyed
from rlvr.device import check_device


@dataclass
class EvalConfig:
    """What to evaluate and how (``rlvr eval key=value ...``).

    ``group_by``/``group_values`` evaluate one group per value of an env keyword argument (e.g.
    ``group_by=n_people group_values=3,4,5`` for K&K accuracy by puzzle size); without them the
    env is evaluated once as group ``all``. ``k = 0`` skips sampling; ``greedy = false`` skips the
    greedy pass. ``pass_ks`` are the k of pass@k (each at most ``k``).
    """

    model: str = "micro"
    env: str = "kk"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    split: str = "test"
    group_by: str = ""
    group_values: list[int] = field(default_factory=list)
    n_items: int = 100
    greedy: bool = True
    k: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    batch_size: int = 64
    pass_ks: list[int] = field(default_factory=lambda: [1])
    seed: int = 0
    backend: Literal["auto", "rollout", "generate"] = "auto"
    device: str = "cpu"
    out: str = unkeyed("")

    def __post_init__(self):
        for name in ("n_items", "batch_size", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.k < 0:
            raise ValueError(f"EvalConfig.k must be >= 0, got {self.k}")
        if not self.greedy and self.k == 0:
            raise ValueError("EvalConfig: greedy=false and k=0 leaves nothing to evaluate")
        if self.k and self.temperature <= 0:
            raise ValueError(
                f"EvalConfig.temperature must be > 0 to sample k={self.k}, got {self.temperature}"
            )
        if bool(self.group_by) != bool(self.group_values):
            raise ValueError("EvalConfig: group_by and group_values go together")
        bad = [k for k in self.pass_ks if k < 1 or (self.k and k > self.k)]
        if bad:
            raise ValueError(f"EvalConfig.pass_ks {bad} must lie in 1..k={self.k}")
        check_device(self.device)
