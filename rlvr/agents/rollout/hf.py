"""Batched sampling with a KV cache for any Hugging Face causal LM (CPU or GPU).

A plain decoding loop over ``model.forward`` rather than ``model.generate``: it samples with our
own seeded ``torch.Generator`` (reproducible rollouts), returns the log-prob of every sampled
token, checks stop strings only when a token that can complete one appears, prefills each
distinct context once (the G rollouts of a group share their prompt) and drops finished rows from
the cache, so a batch slows down as it empties instead of padding to the longest row.
"""

from __future__ import annotations

import torch

from rlvr.agents.policy import cache_kwarg, output_cache, position_ids_from_mask
from rlvr.agents.rollout.base import Generation, RolloutBackend, SamplingParams, truncate_at_stop


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Logits with everything outside the top-k / nucleus (top-p) set to -inf.

    Nucleus: keep the smallest set of tokens, by descending probability, whose mass reaches
    ``top_p`` (Holtzman et al. 2020); the most likely token is always kept.
    """
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(-1) - probs
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens ``[N]`` and their log-probs under ``softmax(logits / temperature)``.

    Greedy (temperature 0) reports log-probs at temperature 1.
    """
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(-1)
        logp = torch.log_softmax(logits, -1)
    else:
        scaled = logits / params.temperature
        logp = torch.log_softmax(scaled, -1)
        filtered = filter_logits(scaled, params.top_k, params.top_p)
        probs = torch.softmax(filtered, -1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _growable_cache(model, reserve: int):
    """A ``DynamicCache`` whose layers write into preallocated buffers.

    ``DynamicLayer.update`` concatenates the new keys/values onto the old ones, copying the whole
    cache every step (quadratic in length; it dominated decoding with a few-hundred-token prompt).
    These layers reserve room for ``reserve`` more tokens at prefill and write in place, growing
    by doubling if ever needed. Used only for models whose layers all use full attention (a
    sliding-window layer needs its own cache type); otherwise None (the model's default cache).
    """
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:
        return None
    text_cfg = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    )
    layer_types = getattr(text_cfg, "layer_types", None) or ["full_attention"]
    sliding = getattr(text_cfg, "sliding_window", None) and getattr(
        text_cfg, "use_sliding_window", False
    )
    if any(t != "full_attention" for t in layer_types) or sliding:
        return None

    class PreallocatedLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self._len = 0
                self._kbuf = self._vbuf = None
            n = key_states.shape[-2]
            need = self._len + n
            if self._kbuf is None or need > self._kbuf.shape[-2]:
                cap = need + reserve if self._kbuf is None else max(need, 2 * self._kbuf.shape[-2])
                shape = (*key_states.shape[:-2], cap, key_states.shape[-1])
                kbuf = key_states.new_empty(shape)
                vbuf = value_states.new_empty(
                    (*value_states.shape[:-2], cap, value_states.shape[-1])
                )
                if self._len:
                    kbuf[..., : self._len, :] = self._kbuf[..., : self._len, :]
                    vbuf[..., : self._len, :] = self._vbuf[..., : self._len, :]
                self._kbuf, self._vbuf = kbuf, vbuf
            self._kbuf[..., self._len : need, :] = key_states
            self._vbuf[..., self._len : need, :] = value_states
            self._len = need
            self.keys = self._kbuf[..., :need, :]
            self.values = self._vbuf[..., :need, :]
            return self.keys, self.values

        def batch_select_indices(self, indices):
            if self.is_initialized and self._kbuf is not None:
                self._kbuf = self._kbuf[indices]
                self._vbuf = self._vbuf[indices]
                self.keys = self._kbuf[..., : self._len, :]
                self.values = self._vbuf[..., : self._len, :]

    cache = DynamicCache()
    if not hasattr(cache, "layer_class_to_replicate") or cache.layers:
        return None
    cache.layer_class_to_replicate = PreallocatedLayer
    return cache


def eos_token_ids(model, tokenizer) -> set[int]:
    """End-of-sequence ids from the tokenizer and the model's generation config."""
    ids: set[int] = set()
    for source in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if source is None:
            continue
        ids.update(source if isinstance(source, (list, tuple)) else [source])
    return ids


class HFBackend(RolloutBackend):
    """Samples from the trainer's own model object, so weights never need copying."""

    def __init__(self, model, tokenizer, *, stop_check_tokens: int | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.eos = eos_token_ids(model, tokenizer)
        self._cache_arg = cache_kwarg(model)
        self._stop_filters: dict[tuple[str, ...], torch.Tensor] = {}
        self.stop_check_tokens = stop_check_tokens

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _can_end_stop(self, stop: tuple[str, ...]) -> torch.Tensor:
        """Bool ``[V]``: tokens whose text contains the last character of some stop string.

        A stop string can only be completed by such a token, so the (costly) decode of the tail
        happens on those steps only.
        """
        if stop not in self._stop_filters:
            last = {s[-1] for s in stop}
            vocab = len(self.tokenizer)
            texts = self.tokenizer.batch_decode([[i] for i in range(vocab)])
            mask = torch.tensor([any(c in t for c in last) for t in texts], dtype=torch.bool)
            size = self.model.get_output_embeddings().weight.shape[0]
            if size > vocab:
                mask = torch.cat([mask, torch.zeros(size - vocab, dtype=torch.bool)])
            self._stop_filters[stop] = mask
        return self._stop_filters[stop]

    def _forward(self, input_ids, attention_mask, position_ids, cache):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_arg: cache},
        )
        return out.logits[:, -1], output_cache(out)

    @torch.no_grad()
    def generate(
        self,
        contexts: list[list[int]],
        params: SamplingParams,
        *,
        seed: int,
        max_new_tokens: list[int] | None = None,
    ) -> Generation:
        n = len(contexts)
        budgets = params.budgets(n, max_new_tokens)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        reasons = ["length"] * n
        active = [i for i in range(n) if budgets[i] > 0]
        if active and any(len(contexts[i]) == 0 for i in active):
            raise ValueError("every context needs at least one token")
        if active:
            self._decode(contexts, params, seed, budgets, active, tokens, logps, reasons)
        texts = []
        for i in range(n):
            text = self.tokenizer.decode(tokens[i], skip_special_tokens=True)
            text, found = truncate_at_stop(text, params.stop)
            if found and reasons[i] != "stop":
                reasons[i] = "stop"
            texts.append(text)
        return Generation(tokens, logps, reasons, texts)

    def _decode(self, contexts, params, seed, budgets, active, tokens, logps, reasons):
        device = self.device
        generator = torch.Generator(device=device).manual_seed(int(seed))
        # Prefill each distinct context once; rows of a group then share its cache entries.
        unique: dict[tuple[int, ...], int] = {}
        row_of = [unique.setdefault(tuple(contexts[i]), len(unique)) for i in active]
        keys = list(unique)
        width = max(len(k) for k in keys)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(keys), width), pad, dtype=torch.long)
        mask = torch.zeros((len(keys), width), dtype=torch.long)
        for j, k in enumerate(keys):
            ids[j, width - len(k) :] = torch.tensor(k, dtype=torch.long)
            mask[j, width - len(k) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = position_ids_from_mask(mask)
        reserve = max(budgets[i] for i in active)
        logits, cache = self._forward(ids, mask, positions, _growable_cache(self.model, reserve))
        select = torch.tensor(row_of, dtype=torch.long, device=device)
        if len(keys) != len(active) or row_of != list(range(len(active))):
            cache.batch_select_indices(select)
        logits, mask = logits[select], mask[select]
        next_pos = positions[select, -1] + 1
        eos = torch.tensor(sorted(self.eos), dtype=torch.long, device=device)
        stop_filter = self._can_end_stop(params.stop).to(device) if params.stop else None
        tail = self.stop_check_tokens or (max((len(s) for s in params.stop), default=0) + 1)
        rows = list(active)  # rows[j] = original index of the j-th live row
        while rows:
            new, new_lp = sample_next(logits, params, generator)
            is_eos = torch.isin(new, eos) if len(eos) else torch.zeros_like(new, dtype=torch.bool)
            may_stop = stop_filter[new] if stop_filter is not None else None
            new_l, lp_l, eos_l = new.tolist(), new_lp.tolist(), is_eos.tolist()
            may_l = may_stop.tolist() if may_stop is not None else None
            keep = []
            for j, i in enumerate(rows):
                tokens[i].append(new_l[j])
                logps[i].append(lp_l[j])
                if eos_l[j]:
                    reasons[i] = "eos"
                elif (
                    may_l is not None and may_l[j] and self._stopped(tokens[i][-tail:], params.stop)
                ):
                    reasons[i] = "stop"
                elif len(tokens[i]) >= budgets[i]:
                    reasons[i] = "length"
                else:
                    keep.append(j)
            if self.on_step is not None:
                self.on_step(len(rows) - len(keep), len(keep))
            if not keep:
                break
            if len(keep) != len(rows):
                sel = torch.tensor(keep, dtype=torch.long, device=device)
                cache.batch_select_indices(sel)
                new, mask, next_pos = new[sel], mask[sel], next_pos[sel]
                rows = [rows[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
            logits, cache = self._forward(new.unsqueeze(-1), mask, next_pos.unsqueeze(-1), cache)
            next_pos = next_pos + 1

    def _stopped(self, tail_ids: list[int], stop: tuple[str, ...]) -> bool:
        text = self.tokenizer.decode(tail_ids, skip_special_tokens=True)
        return any(s in text for s in stop)


class GenerateBackend(RolloutBackend):
    """``transformers``' own ``model.generate`` behind the rollout interface.

    The cross-check for ``HFBackend`` (``rlvr eval backend=generate``): left-padded contexts,
    sampling from the global torch RNG seeded with ``seed`` inside a forked RNG state, stop
    strings handed to ``generate``. Log-probs are read from the raw logits under
    ``softmax(logits / temperature)`` (temperature 1 when greedy), as ``HFBackend`` reports them.
    Per-row budgets cut each row after one call at the largest budget.
    """

    def __init__(self, model, tokenizer):
        self.model = model
        self.tokenizer = tokenizer

    @torch.no_grad()
    def generate(
        self,
        contexts: list[list[int]],
        params: SamplingParams,
        *,
        seed: int,
        max_new_tokens: list[int] | None = None,
    ) -> Generation:
        n = len(contexts)
        budgets = params.budgets(n, max_new_tokens)
        if not n or max(budgets) == 0:
            return Generation(
                [[] for _ in range(n)], [[] for _ in range(n)], ["length"] * n, [""] * n
            )
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        width = max(len(c) for c in contexts)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, c in enumerate(contexts):
            ids[i, width - len(c) :] = torch.tensor(c)
            mask[i, width - len(c) :] = 1
        kwargs = dict(
            max_new_tokens=max(budgets),
            pad_token_id=pad,
            eos_token_id=tok.eos_token_id,
            return_dict_in_generate=True,
            output_logits=True,
        )
        if params.temperature > 0:
            kwargs.update(
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
            )
        else:
            kwargs.update(do_sample=False)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tok)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = self.model.generate(
                input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs
            )
        scale = params.temperature if params.temperature > 0 else 1.0
        steps = torch.stack(out.logits, dim=1).float() / scale  # [n, steps, V]
        logp_all = torch.log_softmax(steps, dim=-1)
        token_ids, logprobs, reasons, texts = [], [], [], []
        for i, row in enumerate(out.sequences[:, width:].tolist()):
            kept = [(s, t) for s, t in enumerate(row) if t != pad]
            toks = [t for _, t in kept]
            reason = "length"
            if tok.eos_token_id in toks:
                kept = kept[: toks.index(tok.eos_token_id) + 1]
                reason = "eos"
            if len(kept) > budgets[i]:
                kept, reason = kept[: budgets[i]], "length"
            toks = [t for _, t in kept]
            text, found = truncate_at_stop(tok.decode(toks, skip_special_tokens=True), params.stop)
            token_ids.append(toks)
            logprobs.append([float(logp_all[i, s, t]) for s, t in kept])
            reasons.append("stop" if found else reason)
            texts.append(text)
        return Generation(token_ids, logprobs, reasons, texts)
