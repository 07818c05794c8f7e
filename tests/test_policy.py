"""Policy wrapper: chunked per-token statistics equal the unchunked ones, gradients included."""

from __future__ import annotations

import pytest
import torch

from rlvr.agents.policy import Policy, reference_copy, response_token_stats
from rlvr.models import load_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def micro():
    return load_model("micro", seed=3)


def _batch(tokenizer):
    prompts = [tokenizer("hi there")["input_ids"], tokenizer("a much longer prompt")["input_ids"]]
    responses = [[40, 41, 42, 43, 44, 45, 46], [50, 51, 52]]
    p = max(map(len, prompts))
    r = max(map(len, responses))
    ids = torch.full((2, p + r), tokenizer.pad_token_id)
    mask = torch.zeros((2, p + r), dtype=torch.long)
    for i, (pr, rs) in enumerate(zip(prompts, responses)):
        ids[i, p - len(pr) : p] = torch.tensor(pr)
        mask[i, p - len(pr) : p] = 1
        ids[i, p : p + len(rs)] = torch.tensor(rs)
        mask[i, p : p + len(rs)] = 1
    return ids, mask, r, torch.tensor([[1.0] * 7, [1.0] * 3 + [0.0] * 4])


def _reference_stats(model, ids, mask, r, temperature=1.0):
    """Unchunked: full logits from the model's own forward."""
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
    logits = logits[:, -r - 1 : -1]
    targets = ids[:, -r:]
    logp = torch.log_softmax(logits / temperature, -1)
    lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    raw = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return lp, raw, ent


@pytest.mark.parametrize("chunk", [1, 2, 5, 256])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_stats_equal_unchunked(micro, chunk, temperature):
    model, tok = micro
    ids, mask, r, resp_mask = _batch(tok)
    lp, raw, ent = _reference_stats(model, ids, mask, r, temperature)
    stats = response_token_stats(model, ids, mask, r, temperature=temperature, chunk_size=chunk)
    m = resp_mask.bool()
    torch.testing.assert_close(stats.logprobs[m], lp[m], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats.logits[m], raw[m], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats.entropy[m], ent[m], rtol=1e-5, atol=1e-5)
    assert not stats.logits.requires_grad and not stats.entropy.requires_grad


def test_chunked_gradients_equal_unchunked(micro):
    model, tok = micro
    ids, mask, r, resp_mask = _batch(tok)
    model.zero_grad()
    lp, _, _ = _reference_stats(model, ids, mask, r)
    (lp * resp_mask).sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    stats = response_token_stats(model, ids, mask, r, chunk_size=2)
    (stats.logprobs * resp_mask).sum().backward()
    for g_ref, p in zip(ref_grads, model.parameters()):
        torch.testing.assert_close(p.grad, g_ref, rtol=1e-4, atol=1e-6)
    model.zero_grad()


def test_reference_is_frozen_copy(micro):
    model, tok = micro
    policy = Policy(model, tok, with_reference=True)
    ids, mask, r, _ = _batch(tok)
    ref = policy.reference_logprobs(ids, mask, r)
    with torch.no_grad():
        cur = policy.token_stats(ids, mask, r).logprobs
    torch.testing.assert_close(ref, cur)
    assert all(not p.requires_grad for p in policy.reference.parameters())
    with torch.no_grad():
        next(model.parameters()).add_(0.5)
    assert not torch.allclose(
        policy.reference_logprobs(ids, mask, r), policy.token_stats(ids, mask, r).logprobs.detach()
    )
    with torch.no_grad():
        next(model.parameters()).sub_(0.5)
    assert reference_copy(model) is not model


def test_bad_arguments(micro):
    model, tok = micro
    ids, mask, r, _ = _batch(tok)
    with pytest.raises(ValueError, match="chunk_size"):
        response_token_stats(model, ids, mask, r, chunk_size=0)
    with pytest.raises(ValueError, match="temperature"):
        response_token_stats(model, ids, mask, r, temperature=0.0)
    with pytest.raises(RuntimeError, match="reference"):
        Policy(model, tok).reference_logprobs(ids, mask, r)


def test_shared_prompt_forward_equals_row_by_row(micro):
    """G rows with one prompt: the prompt runs once, values and gradients are unchanged."""
    model, tok = micro
    p1, p2 = tok("first prompt")["input_ids"], tok("second, longer prompt")["input_ids"]
    prompts = [p1, p1, p1, p2, p2]
    responses = [[40, 41, 42], [43, 44], [45, 46, 47, 48], [50], [51, 52, 53]]
    from rlvr.agents.rollout.base import collate

    batch = collate(
        prompts,
        responses,
        [[1] * len(r) for r in responses],
        [[0.0] * len(r) for r in responses],
        ["length"] * 5,
        tok.pad_token_id,
    )
    results = []
    for share in (False, True):
        model.zero_grad()
        stats = response_token_stats(
            model,
            batch.input_ids,
            batch.attention_mask,
            batch.n_response,
            chunk_size=2,
            share_prompts=share,
        )
        (stats.logprobs * batch.response_mask).sum().backward()
        results.append((stats, [p.grad.clone() for p in model.parameters()]))
    model.zero_grad()
    (a, ga), (b, gb) = results
    m = batch.response_mask.bool()
    torch.testing.assert_close(a.logprobs[m], b.logprobs[m], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.entropy[m], b.entropy[m], rtol=1e-5, atol=1e-5)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
