"""Supervised warm start: next-token cross-entropy on the response tokens only.

An example is a sequence of text segments, each marked trainable or not: ``[(prompt, False),
(response, True)]`` for single-turn tasks; multi-turn traces interleave the model's turns
(trainable) with tool observations (not trainable), exactly as the RL trainer masks them.
Segments are tokenised one by one and concatenated, which is how a policy sees them at rollout
time (prompt ids, then generated ids, then observation ids); the last segment is followed by eos.

Loss: the mean over trainable tokens of the batch (token-mean). With ``context_loss_weight > 0``
the other real tokens (prompt, tool observations) also get a language-modelling loss of that
weight: a model trained from scratch must first learn to read and copy from its context (K&K
answers copy the names from the prompt), and the prompt tokens cost the forward/backward pass
anyway, so their loss is free signal. The logged ``loss_ema`` is always the response-only loss.
fp32, AdamW, linear warm-up then
cosine decay to ``min_lr_ratio * lr``. A fixed step budget keeps a build deterministic (dropout
is 0 in Qwen2, data order comes from the seeded example stream); ``max_seconds`` is a safety cap
only.

Micro-batches (``micro_batches > 1``): each step's batch is cut into that many slices of rows,
each slice's gradient is computed on its own thread (``torch.autograd.grad``, so no thread
writes ``.grad``) with the whole batch's loss denominator, and the slices' gradients are summed
in slice order. The reproducible kernel mode runs one torch thread per process, so a CPU build
otherwise uses one core whatever the machine has; the threads give a build a core each while
every slice's arithmetic, and the order of the sum, stay fixed: the same bits on one core or
two (measured: docs/tiny_models.md). The split is part of the recipe: 2 slices give other bits
than 1 (a sum of two half-batch products is rounded differently from one product), and 1 gives
the bits of a plain ``loss.backward()``.
"""

from __future__ import annotations

import contextlib
import math
import queue
import random
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from rlvr.agents.checkpoint import latest_valid_checkpoint, load_payload, save_checkpoint
from rlvr.envs.warmstart import Segment

#: Consecutive too-long examples after which ``sft`` gives up with a clear error.
MAX_SKIPS_IN_A_ROW = 1000


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 3000
    batch_size: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    max_length: int = 768
    seed: int = 0
    max_seconds: float = 0.0
    context_loss_weight: float = 0.0
    #: Batches drawn together and cut by length (1: off); see ``length_grouped_batches``.
    length_groups: int = 8
    #: Slices of each batch computed on as many threads (module docstring); part of the recipe.
    micro_batches: int = 1

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError(f"SFTConfig.steps must be >= 0, got {self.steps}")
        if self.batch_size < 1:
            raise ValueError(f"SFTConfig.batch_size must be >= 1, got {self.batch_size}")
        if not self.lr > 0:
            raise ValueError(f"SFTConfig.lr must be > 0, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"SFTConfig.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.context_loss_weight < 0:
            raise ValueError(
                f"SFTConfig.context_loss_weight must be >= 0, got {self.context_loss_weight}"
            )
        if self.length_groups < 1:
            raise ValueError(f"SFTConfig.length_groups must be >= 1, got {self.length_groups}")
        if self.max_length < 2:
            raise ValueError(f"SFTConfig.max_length must be >= 2, got {self.max_length}")
        if not 1 <= self.micro_batches <= self.batch_size:
            raise ValueError(
                f"SFTConfig.micro_batches must be in [1, batch_size={self.batch_size}], "
                f"got {self.micro_batches}"
            )


def encode_example(tokenizer, segments: Sequence[Segment]) -> tuple[list[int], list[int]]:
    """Token ids and a 0/1 loss mask for one example; eos closes the last segment."""
    ids: list[int] = []
    mask: list[int] = []
    for text, trainable in segments:
        piece = tokenizer.encode(text, add_special_tokens=False)
        ids += piece
        mask += [int(trainable)] * len(piece)
    ids.append(tokenizer.eos_token_id)
    mask.append(int(segments[-1][1]) if segments else 0)
    return ids, mask


def collate(encoded: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask``, ``labels`` (-100 where not trainable) and
    ``context`` (real tokens that are not trainable: prompt and observations)."""
    width = max(len(ids) for ids, _ in encoded)
    input_ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    labels = torch.full((len(encoded), width), -100, dtype=torch.long)
    context = torch.zeros((len(encoded), width), dtype=torch.bool)
    for row, (ids, mask) in enumerate(encoded):
        n = len(ids)
        input_ids[row, :n] = torch.tensor(ids)
        attention[row, :n] = 1
        trainable = torch.tensor(mask, dtype=torch.bool)
        labels[row, :n] = torch.where(trainable, torch.tensor(ids), torch.tensor(-100))
        context[row, :n] = ~trainable
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "labels": labels,
        "context": context,
    }


def length_grouped_batches(pool: list, batch_size: int, rng: random.Random) -> list[list]:
    """Sort ``pool`` by length, cut it into batches, shuffle the batches (seeded).

    Batches are padded to their longest example, so mixing a 40-token and a 250-token example
    spends most of a step on padding; grouping similar lengths (Hugging Face's
    ``group_by_length``) keeps the compute on real tokens. Returned in pop() order.
    """
    ordered = sorted(pool, key=lambda e: len(e[0]))
    batches = [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]
    rng.shuffle(batches)
    return batches


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``min_lr_ratio * lr``."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def loss_weights(batch: dict[str, torch.Tensor], context_weight: float) -> torch.Tensor:
    """Per-target weights, shape (rows, width - 1): 1 on trainable targets, ``context_weight``
    on the other real tokens, 0 on padding."""
    response = (batch["labels"][:, 1:] != -100).float()
    return response + context_weight * batch["context"][:, 1:].float()


def response_loss(
    model,
    batch: dict[str, torch.Tensor],
    context_weight: float = 0.0,
    denominator: torch.Tensor | None = None,
) -> tuple[torch.Tensor, int, float]:
    """Next-token cross-entropy: weight 1 on trainable targets, ``context_weight`` on the other
    real tokens; returns (weighted loss, trainable tokens, response-only loss summed over them).

    The weighted loss is divided by ``denominator`` (default: this batch's total weight, so a
    token mean); a micro-batch passes its whole batch's, so that the slices' losses add up to
    the batch's."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)),
        batch["input_ids"][:, 1:].reshape(-1),
        reduction="none",
    ).view(logits.size(0), -1)
    response = (batch["labels"][:, 1:] != -100).to(ce.dtype)
    weight = loss_weights(batch, context_weight)
    if denominator is None:
        denominator = weight.sum().clamp_min(1.0)
    loss = (ce * weight).sum() / denominator
    return loss, int(response.sum()), float((ce.detach() * response).sum())


def slices(batch: dict[str, torch.Tensor], n: int) -> list[dict[str, torch.Tensor]]:
    """``batch`` cut into ``n`` slices of consecutive rows, each cut to its own longest row."""
    rows = batch["input_ids"].size(0)
    bounds = [round(i * rows / n) for i in range(n + 1)]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        width = int(batch["attention_mask"][lo:hi].sum(1).max())
        out.append({k: v[lo:hi, :width] for k, v in batch.items()})
    return out


def batch_gradients(
    model,
    batch: dict[str, torch.Tensor],
    context_weight: float,
    workers: ThreadPoolExecutor | None = None,
    n: int = 1,
) -> tuple[int, float]:
    """Set every parameter's ``.grad`` to the gradient of ``batch``'s loss, computed as ``n``
    slices on ``workers``' threads and summed in slice order; returns (trainable tokens,
    response-only token-mean loss)."""
    params = [p for p in model.parameters() if p.requires_grad]
    denominator = loss_weights(batch, context_weight).sum().clamp_min(1.0)

    def part(piece):
        loss, n_tokens, ce_sum = response_loss(model, piece, context_weight, denominator)
        return torch.autograd.grad(loss, params), n_tokens, ce_sum

    pieces = slices(batch, n)
    parts = list(workers.map(part, pieces)) if workers else [part(piece) for piece in pieces]
    for i, p in enumerate(params):
        grad = parts[0][0][i]
        for other in parts[1:]:
            grad = grad + other[0][i]
        p.grad = grad
    n_tokens = sum(t for _, t, _ in parts)
    return n_tokens, sum(c for _, _, c in parts) / max(1, n_tokens)


@contextlib.contextmanager
def _shutdown(workers: ThreadPoolExecutor | None):
    try:
        yield
    finally:
        if workers is not None:
            workers.shutdown()


def sft(
    model,
    tokenizer,
    examples: Iterator[Sequence[Segment]],
    cfg: SFTConfig,
    progress: bool = True,
    desc: str = "sft",
    checkpoints: Path | None = None,
    every: int = 0,
) -> dict[str, float]:
    """Train ``model`` in place on ``examples`` for ``cfg.steps`` steps; returns run statistics.

    Examples longer than ``cfg.max_length`` tokens are skipped (and counted), never cut: a cut
    response would teach the model to stop mid-answer. ``MAX_SKIPS_IN_A_ROW`` skipped examples
    in a row raise a ValueError instead of searching forever.

    With a ``checkpoints`` folder the state is saved there (``save_progress``) once at least
    ``every`` steps have passed and the drawn examples are used up, and after the last step; a
    call that finds a valid one resumes from it: the examples drawn before it are drawn again
    and dropped, so the stream goes on where it was, and the model ends in the bits of a run
    never stopped (``tests/test_models.py``).
    """
    model.train()
    device = next(model.parameters()).device
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optim = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=cfg.betas,
    )
    start = time.perf_counter()
    seen_tokens = trained_tokens = skipped = run_of_skips = 0
    ema_loss = float("nan")
    done = 0
    pending: list[list[tuple[list[int], list[int]]]] = []
    order_rng = random.Random(cfg.seed)
    bar = tqdm(total=cfg.steps, desc=desc, disable=not progress, dynamic_ncols=True, leave=False)
    workers = ThreadPoolExecutor(cfg.micro_batches) if cfg.micro_batches > 1 else None
    first = drawn = 0
    before = 0.0  # seconds of the steps done before a resume
    with torch.random.fork_rng(devices=[]), _shutdown(workers):
        torch.manual_seed(cfg.seed)
        resumed = load_progress(checkpoints, model, optim, order_rng) if checkpoints else None
        if resumed:
            first, drawn, before = resumed["step"], resumed["drawn"], resumed["seconds"]
            seen_tokens, trained_tokens = resumed["seen_tokens"], resumed["trained_tokens"]
            skipped, ema_loss = resumed["skipped"], resumed["ema_loss"]
            done = first
            for _ in range(drawn if first < cfg.steps else 0):
                next(examples)
            bar.update(first)
        saved = first
        for step in range(first, cfg.steps):
            if cfg.max_seconds and time.perf_counter() - start > cfg.max_seconds:
                break
            if not pending:
                pool = []
                while len(pool) < cfg.batch_size * cfg.length_groups:
                    ids, mask = encode_example(tokenizer, next(examples))
                    drawn += 1
                    if len(ids) > cfg.max_length:
                        skipped += 1
                        run_of_skips += 1
                        if run_of_skips >= MAX_SKIPS_IN_A_ROW:
                            raise ValueError(
                                f"{run_of_skips} examples in a row are longer than max_length="
                                f"{cfg.max_length} tokens (the last: {len(ids)}): raise "
                                "SFTConfig.max_length or shorten the examples"
                            )
                        continue
                    run_of_skips = 0
                    pool.append((ids, mask))
                pending = length_grouped_batches(pool, cfg.batch_size, order_rng)
            batch = collate(pending.pop(), tokenizer.pad_token_id)
            batch = {k: v.to(device) for k, v in batch.items()}  # the model's device (CPU or GPU)
            for group in optim.param_groups:
                group["lr"] = lr_at(step, cfg)
            optim.zero_grad(set_to_none=True)
            n_tokens, value = batch_gradients(
                model, batch, cfg.context_loss_weight, workers, cfg.micro_batches
            )
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optim.step()
            ema_loss = value if math.isnan(ema_loss) else 0.98 * ema_loss + 0.02 * value
            seen_tokens += int(batch["attention_mask"].sum())
            trained_tokens += n_tokens
            done += 1
            bar.update(1)
            if step % 10 == 0:
                elapsed = before + time.perf_counter() - start
                bar.set_postfix(
                    loss=f"{ema_loss:.3f}", tok_s=f"{seen_tokens / max(elapsed, 1e-9):.0f}"
                )
            if checkpoints and (done == cfg.steps or (not pending and done - saved >= every)):
                seconds = before + time.perf_counter() - start
                state = dict(step=done, drawn=drawn, seconds=seconds, seen_tokens=seen_tokens)
                state.update(trained_tokens=trained_tokens, skipped=skipped, ema_loss=ema_loss)
                save_progress(checkpoints, model, optim, order_rng, state)
                saved = done
    bar.close()
    model.eval()
    elapsed = before + time.perf_counter() - start
    stats = {
        "steps": done,
        "seconds": round(elapsed, 2),
        "tokens": seen_tokens,
        "trained_tokens": trained_tokens,
        "tokens_per_s": round(seen_tokens / max(elapsed, 1e-9), 1),
        "loss_ema": round(ema_loss, 4),
        "skipped_too_long": skipped,
    }
    if first:
        stats.update(resumed_at=first, seconds_before_resume=round(before, 2))
    return stats


# -- checkpoints of a long warm start ----------------------------------------------------------
def save_progress(folder: Path, model, optim, order_rng: random.Random, state: dict) -> None:
    """The warm start's state as a checkpoint of ``rlvr.agents.checkpoint`` (tensors and plain
    data, verified on load): weights, optimizer, the batch order's and torch's RNG, and
    ``state`` (step, examples drawn, counters); only the newest is kept."""
    version, words, gauss = order_rng.getstate()
    payload = {
        "model": model.state_dict(),
        "optim": optim.state_dict(),
        "rng": {"order": torch.tensor(words, dtype=torch.int64), "torch": torch.get_rng_state()},
    }
    meta = {**state, "order_version": version, "order_gauss": gauss}
    save_checkpoint(folder, state["step"], payload, meta, keep=1)


def load_progress(folder: Path, model, optim, order_rng: random.Random) -> dict[str, Any] | None:
    """Restore the newest valid checkpoint of ``save_progress`` in ``folder`` into ``model``,
    ``optim``, ``order_rng`` and torch's RNG and return its state; None when there is none (a
    corrupt one is warned about and skipped: the warm start is deterministic, so starting over
    costs time only)."""
    found = latest_valid_checkpoint(folder)
    if found is None:
        return None
    path, manifest = found
    payload = load_payload(path, manifest)
    meta = manifest["meta"]
    model.load_state_dict(payload["model"])
    optim.load_state_dict(payload["optim"])
    words = tuple(int(w) for w in payload["rng"]["order"].tolist())
    order_rng.setstate((meta["order_version"], words, meta["order_gauss"]))
    torch.set_rng_state(payload["rng"]["torch"])
    return meta


# -- feeding examples ------------------------------------------------------------------------
def epochs(examples: list, seed: int = 0) -> Iterator:
    """Endless passes over ``examples``, each in a fresh seeded order."""
    if not examples:
        raise ValueError("epochs() needs at least one example")
    rng = random.Random(seed)
    while True:
        order = list(range(len(examples)))
        rng.shuffle(order)
        for i in order:
            yield examples[i]


def prefetch(it: Iterator, size: int = 256) -> Iterator:
    """Yield ``it``'s items in order, produced ahead by one background thread.

    Generating examples is pure Python (sympy for math) while a training step is mostly torch
    kernels that release the GIL, so the two overlap. One producer keeps the order (and so the
    build) deterministic.
    """
    buf: queue.Queue = queue.Queue(maxsize=size)
    done = object()
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                buf.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for item in it:
                if not put(item):
                    return
        except Exception as e:  # handed to the consumer, which re-raises it
            put(e)
            return
        put(done)

    thread = threading.Thread(target=produce, daemon=True, name="rlvr-prefetch")
    thread.start()
    try:
        while True:
            item = buf.get()
            if item is done:
                return
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        stop.set()
