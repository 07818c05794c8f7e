"""Batched text generation for evaluating base models (``transformers`` ``generate``, KV cache).

Kept small on purpose: the trainer's rollout backend is the fast path; this is what
``rlvr build-model --eval`` and the base-model checks use. Greedy when ``temperature == 0``.
Each returned text is cut after the first stop string it contains (the stop string is kept),
which is how a tool loop sees a turn that ends at ``</search>``.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to and including the earliest stop string it contains."""
    best = None
    for s in stop:
        i = text.find(s)
        if i >= 0 and (best is None or i + len(s) < best):
            best = i + len(s)
    return text if best is None else text[:best]


@torch.no_grad()
def generate(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int = 64,
             temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
             batch_size: int = 64, stop: Sequence[str] = ()) -> list[str]:
    """One completion per prompt (repeat a prompt k times for k samples)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    model.eval()
    stop_ids = [tokenizer.eos_token_id]
    for s in stop:
        ids = tokenizer.encode(s, add_special_tokens=False)
        if len(ids) == 1:  # single-token stops end generation early; others are cut afterwards
            stop_ids.append(ids[0])
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    out: list[str] = []
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                chunk = list(prompts[start:start + batch_size])
                enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
                kwargs = dict(max_new_tokens=max_new_tokens, eos_token_id=stop_ids,
                              pad_token_id=tokenizer.pad_token_id)
                if temperature > 0:
                    kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
                else:
                    kwargs.update(do_sample=False)
                ids = model.generate(**enc, **kwargs)
                new = ids[:, enc["input_ids"].shape[1]:]
                texts = tokenizer.batch_decode(new, skip_special_tokens=True)
                out += [cut_at_stop(t, stop) for t in texts]
    finally:
        tokenizer.padding_side = padding_side
    return out
