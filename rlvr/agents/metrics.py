"""Training metrics: what one step logs (``rollout_metrics``, ``token_prob_metrics``), how the
micro-batch parts of an update combine, and the ``metrics.jsonl`` log a run writes and reads.

The per-step record holds reward (mean and per component), accuracy, response length, gradient
norm before clipping, KL, entropy, clip fraction, token-weight and token-probability summaries
(``docs/design.md``, "Metrics"), one JSON line per step so figures are redrawn without retraining.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlvr.agents.losses import masked_mean
from rlvr.envs.base import (  # noqa: F401  (MAX_TOOL_FAILURE_RATE, check_failure_rate: API here)
    MAX_TOOL_FAILURE_RATE,
    TOOL_CALLS,
    TOOL_FAILURES,
    check_failure_rate,
)
from rlvr.files import write_text_atomic

if TYPE_CHECKING:
    from rlvr.agents.rollout.multiturn import Episode

#: Metric keys that measure wall time; they differ between otherwise identical runs.
TIME_KEYS_PREFIXES = ("time/", "tokens/s", "perf/")


def is_time_key(key: str) -> bool:
    return key.startswith(TIME_KEYS_PREFIXES)


def combine_metrics(parts: list[dict[str, float]]) -> dict[str, float]:
    """Merge per-micro-batch loss metrics: ``/min`` by min, ``/max`` by max, the rest averaged
    with each part weighted by its token count."""
    if not parts:
        return {}
    weights = [max(p.get("n_tokens", 1.0), 0.0) for p in parts]
    total = sum(weights) or float(len(parts))
    weights = weights if sum(weights) else [1.0] * len(parts)
    out = {}
    for key in parts[0]:
        vals = [p[key] for p in parts if key in p]
        if key.endswith("/min"):
            out[key] = min(vals)
        elif key.endswith("/max"):
            out[key] = max(vals)
        elif key == "n_tokens":
            out[key] = sum(vals)
        else:
            out[key] = sum(w * p[key] for w, p in zip(weights, parts) if key in p) / total
    return out


def rollout_metrics(episodes: list[Episode], group_size: int) -> dict[str, float]:
    """Reward, accuracy, length and finish statistics of a batch of episodes
    (``docs/design.md``, Metrics)."""
    n = len(episodes)
    rewards = np.array([e.reward for e in episodes], dtype=np.float64)
    out: dict[str, float] = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()),
        "reward/min": float(rewards.min()),
        "reward/max": float(rewards.max()),
        "accuracy": float(
            np.mean([bool(e.info.get("correct", False)) and e.error is None for e in episodes])
        ),
        "response_length": float(np.mean([len(e.response_ids) for e in episodes])),
        "response_length/max": float(max(len(e.response_ids) for e in episodes)),
        "response_length/generated": float(np.mean([e.n_generated for e in episodes])),
        "turns/mean": float(np.mean([e.turns for e in episodes])),
        "episodes/errors": float(sum(e.error is not None for e in episodes)),
        "prompt/truncated": float(sum(bool(e.info.get("prompt_truncated")) for e in episodes)),
        "prompt_length": float(np.mean([len(e.prompt_ids) for e in episodes])),
    }
    for reason in ("eos", "stop", "length"):
        out[f"finish/{reason}"] = sum(e.finish_reason == reason for e in episodes) / n
    components: dict[str, list[float]] = {}
    for e in episodes:
        for k, v in (e.info.get("reward_components") or {}).items():
            if isinstance(v, (int, float)):
                components.setdefault(k, []).append(float(v))
    for k, vals in sorted(components.items()):
        out[f"reward/{k}"] = float(np.mean(vals))
    groups = rewards.reshape(-1, group_size)
    out["groups/zero_std"] = float(np.mean(groups.std(axis=1) == 0))
    return out


def no_variance_line(flat_steps: int, steps: int, engine: str = "rlvr train") -> str | None:
    """The one line a run prints when some of its ``steps`` had no reward variance in any group
    (``flat_steps`` of them: every advantage 0, so no policy-gradient update; only a KL or
    entropy term could move the weights). ``None`` when every step had some."""
    if flat_steps <= 0:
        return None
    return (
        f"[{engine}] {flat_steps} of {steps} steps had no reward variance in any group "
        "(every advantage 0): no policy-gradient update on them"
    )


def say_no_variance(records: list[dict[str, float]]) -> None:
    """Print a native run's ``no_variance_line`` (stderr) from its step records: a step had no
    reward variance when every group's rewards were equal (``groups/zero_std`` 1)."""
    flat = sum(r["groups/zero_std"] >= 1.0 for r in records)
    line = no_variance_line(flat, len(records))
    if line:
        print(line, file=sys.stderr)


class ToolFailureError(RuntimeError):
    """Too many tool calls of a step failed: the run stops (one line, exit 2)."""


def tool_metrics(infos) -> dict[str, float]:
    """``<tool>/calls`` and ``<tool>/failed`` summed over episodes' final ``info``
    (``envs.base.TOOL_CALLS`` / ``TOOL_FAILURES``); ``{}`` for envs without tools."""
    calls: dict[str, int] = {}
    failed: dict[str, int] = {}
    for info in infos:
        info = info if isinstance(info, dict) else {}
        for name, n in (info.get(TOOL_CALLS) or {}).items():
            calls[name] = calls.get(name, 0) + int(n)
        for name, errors in (info.get(TOOL_FAILURES) or {}).items():
            failed[name] = failed.get(name, 0) + len(errors)
    out: dict[str, float] = {}
    for name in sorted(calls):
        out[f"{name}/calls"] = float(calls[name])
        out[f"{name}/failed"] = float(failed.get(name, 0))
    return out


def check_tool_failures(infos, max_rate: float, where: str) -> None:
    """``ToolFailureError`` (one line: counts, rate, the first failure) when the share of
    failed calls of any tool over ``infos`` exceeds ``max_rate``."""
    infos = [i if isinstance(i, dict) else {} for i in infos]
    counts = tool_metrics(infos)
    for key, calls in counts.items():
        if not key.endswith("/calls") or not calls:
            continue
        name = key[: -len("/calls")]
        failed = counts[f"{name}/failed"]
        if failed / calls > max_rate:
            first = next(e for i in infos for e in (i.get(TOOL_FAILURES) or {}).get(name, []))
            raise ToolFailureError(
                f"{where}: {failed:.0f} of {calls:.0f} {name} calls failed "
                f"({failed / calls:.0%} > max_tool_failure_rate={max_rate:g}), a fault of the "
                f"service, not of the policy; first: {first[:200]}; fix it and resume"
            )


def token_prob_summary(
    logprobs: torch.Tensor, entropy: torch.Tensor, valid: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``token_prob_metrics`` as 0-d tensors on the inputs' device (``valid`` must be non-empty).

    Every tensor made here is made on ``logprobs.device``: the metrics run on whatever device
    the policy is on (tested on the meta device, which stands in for CUDA)."""
    p = logprobs[valid].exp().double()
    q = torch.quantile(p, torch.tensor([0.1, 0.5], dtype=torch.float64, device=p.device))
    return {
        "entropy": masked_mean(entropy, valid),
        "prob/mean": p.mean(),
        "prob/low_frac": (p < 0.5).double().mean(),
        "prob/p10": q[0],
        "prob/median": q[1],
        "logprob/mean": masked_mean(logprobs, valid),
    }


def token_prob_metrics(
    logprobs: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Summaries of the sampled tokens' probabilities and the policy entropy on the loss mask."""
    valid = mask.bool()
    if not bool(valid.any()):
        return {
            "entropy": 0.0,
            "prob/mean": 0.0,
            "prob/low_frac": 0.0,
            "prob/p10": 0.0,
            "prob/median": 0.0,
            "logprob/mean": 0.0,
        }
    return {k: float(v) for k, v in token_prob_summary(logprobs, entropy, valid).items()}


#: The quantiles of the token weights every step records (``weight_diagnostics``).
WEIGHT_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def weight_diagnostics(
    weights: torch.Tensor,
    probs: torch.Tensor,
    lower: float | None = None,
    upper: float | None = None,
) -> dict[str, float]:
    """What the token weights do to a batch: ``weight/qNN`` (``WEIGHT_QUANTILES``), the shares at
    the floor L and the cap U (``weight/at_lower``, ``weight/at_upper``; 0 without bounds), and
    ``weight/kept_grad_mass = sum w (1 - p) / sum (1 - p)``: the gradient of ``-log p`` with
    respect to the logits has a norm proportional to ``1 - p`` (``docs/design.md`` §5), so this is
    the share of the per-token gradient mass the weights keep (1 for GRPO).

    ``weights`` and ``probs`` are the valid tokens' (1-D), ``probs`` the current probability of
    the sampled token; an empty batch gives ``{}``."""
    own = weights.detach().reshape(-1).cpu()  # the bounds compare in the weights' own dtype
    if own.numel() == 0:
        return {}
    w = own.to(torch.float64)
    slack = 1.0 - probs.detach().reshape(-1).to(torch.float64).cpu()
    q = np.quantile(w.numpy(), WEIGHT_QUANTILES)
    out = {f"weight/q{round(level * 100):02d}": float(v) for level, v in zip(WEIGHT_QUANTILES, q)}
    for key, bound, side in (("at_lower", lower, -1.0), ("at_upper", upper, 1.0)):
        at = 0.0
        if bound is not None:
            edge = torch.tensor(bound, dtype=own.dtype)
            at = float(((own - edge) * side >= 0).double().mean())
        out[f"weight/{key}"] = at
    mass = float(slack.sum())
    out["weight/kept_grad_mass"] = float((w * slack).sum()) / mass if mass > 0 else 1.0
    return out


def preserve_metrics(path: str | Path, keep_through_step: int | None) -> Path | None:
    """Prepare ``metrics.jsonl`` for a run that continues after step ``keep_through_step`` (None:
    a run that starts from step 0). Lines of later steps, and any line after a torn one (a line
    that is not a JSON object with an integer ``step``), are moved (never deleted) to
    ``metrics.replaced-<time>.jsonl`` beside it; returns that file, or None when nothing was
    moved. Written through a temporary file and an atomic rename."""
    path = Path(path)
    if not path.exists():
        path.write_text("")
        return None
    keep, moved, torn = [], [], False
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError, RecursionError):
            step = None
        if type(step) is not int:  # a line cut by a kill, or not one this trainer wrote
            torn = True  # it and everything after it are moved aside
        if not torn and keep_through_step is not None and step <= keep_through_step:
            keep.append(line)
        else:
            moved.append(line)
    side = None
    if moved:
        side = path.with_name(
            f"metrics.replaced-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.jsonl"
        )
        side.write_text("".join(line + "\n" for line in moved))
    write_text_atomic(path, "".join(line + "\n" for line in keep))
    return side


class MetricsLog:
    """``metrics.jsonl`` of a run, and the trackers that get every record too
    (``rlvr.training.trackers``: TensorBoard, Weights & Biases): append, truncate on resume."""

    def __init__(self, path: Path, trackers: list | tuple = ()):
        self.path = Path(path)
        self.trackers = list(trackers)

    def prepare(self, keep_through_step: int | None) -> Path | None:
        """Ready the log for a run continuing after ``keep_through_step`` (None: from step 0);
        lines it will replace are moved aside, never deleted (``preserve_metrics``)."""
        return preserve_metrics(self.path, keep_through_step)

    def append(self, record: dict[str, Any]) -> None:
        # Non-finite floats become null: NaN/Infinity are not JSON.
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(clean, sort_keys=False) + "\n")
            f.flush()
        for tracker in self.trackers:
            tracker.log(record)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def strip_time(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records without wall-time fields (for comparing runs)."""
    return [{k: v for k, v in r.items() if not is_time_key(k)} for r in records]
