"""The rollout interface: token ids in, sampled continuations out.

A backend turns a batch of contexts (token-id lists, any lengths) into one continuation each and
reports, per continuation, the token ids, the log-probability of each sampled token under the
sampling distribution ``softmax(logits / temperature)``, and why it stopped. The multi-turn
driver (``rlvr.agents.rollout.multiturn``) builds whole episodes from these calls, and
``RolloutBatch`` holds the padded tensors the trainer consumes.

Finish reasons: ``"eos"`` (an end-of-sequence token), ``"stop"`` (a stop string such as
``</answer>``), ``"length"`` (the token budget ran out).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

FINISH_REASONS = ("eos", "stop", "length")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy; ``top_k == 0`` and ``top_p == 1`` mean
    no truncation. ``stop`` strings end a continuation right after they appear (the token that
    completes one is kept)."""

    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self):
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")

    def budgets(self, n: int, max_new_tokens: list[int] | None = None) -> list[int]:
        """The generation budget of each of ``n`` rows: ``max_new_tokens``, or each row's own bound
        (a ``generate`` call's ``max_new_tokens``), cut to [0, ``max_new_tokens``]."""
        if max_new_tokens is None:
            return [self.max_new_tokens] * n
        if len(max_new_tokens) != n:
            raise ValueError("max_new_tokens needs one entry per context")
        return [max(0, min(b, self.max_new_tokens)) for b in max_new_tokens]


@dataclass
class Generation:
    """One continuation per context (lists of equal length ``n``)."""

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    finish_reasons: list[str]
    texts: list[str]

    def __post_init__(self):
        n = len(self.token_ids)
        if not (len(self.logprobs) == len(self.finish_reasons) == len(self.texts) == n):
            raise ValueError("Generation fields must have one entry per context")


class RolloutBackend(abc.ABC):
    """Samples continuations; ``sync_weights`` pulls the trainer's latest weights."""

    #: Called after each decoding step, where the backend decodes step by step (``HFBackend``),
    #: with the rows that finished at that step and the rows still generating: what keeps a
    #: progress bar moving through a long generation (``rlvr eval``, the trainer's rollout).
    on_step: Callable[[int, int], None] | None = None

    @abc.abstractmethod
    def generate(
        self,
        contexts: list[list[int]],
        params: SamplingParams,
        *,
        seed: int,
        max_new_tokens: list[int] | None = None,
    ) -> Generation:
        """Sample one continuation per context.

        ``seed`` makes the call reproducible; ``max_new_tokens`` optionally bounds each row
        separately (never above ``params.max_new_tokens``).
        """

    def sync_weights(self, model) -> None:
        """Make the next ``generate`` use ``model``'s current weights (no-op when shared)."""

    def offload(self) -> None:
        """Release the sampler's accelerator memory until the next ``generate`` or
        ``sync_weights`` (no-op when it holds none of its own)."""

    def close(self) -> None:
        """Remove what the backend keeps on disk (vLLM's model copies; no-op otherwise)."""


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` cut right after the earliest stop string, and whether one was found."""
    best = -1
    for s in stop:
        i = text.find(s)
        if i >= 0 and (best < 0 or i + len(s) < best):
            best = i + len(s)
    return (text[:best], True) if best >= 0 else (text, False)


@dataclass
class RolloutBatch:
    """Padded tensors for a batch of episodes.

    ``input_ids``/``attention_mask`` are ``[B, P + R]``: the left-padded prompt, then the
    right-padded response (generated tokens and, in multi-turn episodes, observation tokens).
    ``response_mask`` ``[B, R]`` is the loss mask: 1 on generated tokens, 0 on observation tokens
    and padding. ``rollout_logprobs`` ``[B, R]`` are the sampler's log-probs (0 off the mask).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    prompt_len: int
    finish_reasons: list[str] = field(default_factory=list)

    @property
    def n_response(self) -> int:
        return self.input_ids.shape[1] - self.prompt_len

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: torch.Tensor | list[int]) -> RolloutBatch:
        """Rows ``index`` (a mini-batch), trimmed of all-padding columns on the response side."""
        idx = torch.as_tensor(index, dtype=torch.long)
        resp_attn = self.attention_mask[idx, self.prompt_len :]
        width = int(resp_attn.sum(-1).max().item()) if len(idx) else 0
        end = self.prompt_len + max(width, 1)
        return RolloutBatch(
            input_ids=self.input_ids[idx, :end],
            attention_mask=self.attention_mask[idx, :end],
            response_mask=self.response_mask[idx, : end - self.prompt_len],
            rollout_logprobs=self.rollout_logprobs[idx, : end - self.prompt_len],
            prompt_len=self.prompt_len,
            finish_reasons=[self.finish_reasons[i] for i in idx.tolist()],
        )

    def to(self, device) -> RolloutBatch:
        return RolloutBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.response_mask.to(device),
            self.rollout_logprobs.to(device),
            self.prompt_len,
            list(self.finish_reasons),
        )


def collate(
    prompts: list[list[int]],
    responses: list[list[int]],
    loss_masks: list[list[int]],
    logprobs: list[list[float]],
    finish_reasons: list[str],
    pad_id: int,
) -> RolloutBatch:
    """Pad prompts on the left and responses on the right into a ``RolloutBatch``."""
    b = len(prompts)
    p = max((len(x) for x in prompts), default=0)
    r = max(max((len(x) for x in responses), default=0), 1)
    input_ids = torch.full((b, p + r), pad_id, dtype=torch.long)
    attention = torch.zeros((b, p + r), dtype=torch.long)
    loss_mask = torch.zeros((b, r), dtype=torch.float32)
    lps = torch.zeros((b, r), dtype=torch.float32)
    for i, (pr, rs, lm, lp) in enumerate(zip(prompts, responses, loss_masks, logprobs)):
        if not (len(rs) == len(lm) == len(lp)):
            raise ValueError(f"episode {i}: response, loss mask and log-probs differ in length")
        input_ids[i, p - len(pr) : p] = torch.tensor(pr, dtype=torch.long)
        attention[i, p - len(pr) : p] = 1
        if rs:
            input_ids[i, p : p + len(rs)] = torch.tensor(rs, dtype=torch.long)
            attention[i, p : p + len(rs)] = 1
            loss_mask[i, : len(rs)] = torch.tensor(lm, dtype=torch.float32)
            lps[i, : len(rs)] = torch.tensor(lp, dtype=torch.float32)
    return RolloutBatch(input_ids, attention, loss_mask, lps, p, list(finish_reasons))
