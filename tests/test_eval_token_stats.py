"""Tests of rlvr.eval.token_stats: per-token probabilities and the merge into words."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlvr.eval import token_stats as T
from rlvr.models import build_micro


def test_word_merge_by_hand():
    pieces = ["Zo", "ey", " is", " a", " kn", "ight", "."]
    probs = [0.2, 0.4, 0.9, 1.0, 0.5, 0.7, 0.3]
    words = T.word_probabilities(pieces, probs)
    assert [w for w, _ in words] == ["zoey", "is", "a", "knight"]
    assert [p for _, p in words] == pytest.approx([0.3, 0.9, 1.0, 0.6])
    with pytest.raises(ValueError, match="pieces"):
        T.word_probabilities(["a"], [0.1, 0.2])


def test_extreme_words_split_and_min_count():
    stats = T.WordStats()
    stats.add([("knight", 0.9)] * 3 + [("knave", 0.1)] * 3 + [("is", 0.5)] * 3 + [("rare", 0.99)])
    high, low = T.extreme_words(stats, n=1, min_count=2)
    assert high[0][0] == "knight" and low[0][0] == "knave"
    high, low = T.extreme_words(stats, n=100, min_count=2)  # 3 qualify: 1 high, 1 low, no overlap
    assert {w for w, *_ in high}.isdisjoint({w for w, *_ in low})
    assert "rare" not in {w for w, *_ in high + low}


def test_token_probabilities_match_full_softmax():
    torch.manual_seed(0)
    model, tok = build_micro(seed=0)
    model.eval()
    prompt = tok("Is Zoey a knight?")["input_ids"]
    response = tok(" Zoey is a knave.")["input_ids"]
    probs = T.token_probabilities(model, prompt, response, chunk=4)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0]
    ref = torch.softmax(logits[len(prompt) - 1 : -1], -1)[
        torch.arange(len(response)), torch.tensor(response)
    ]
    assert probs.shape == (len(response),)
    assert np.allclose(probs, ref.numpy(), atol=1e-5)
    stats = T.collect_word_stats(model, tok, [(prompt, response)])
    assert set(stats.count) == {"zoey", "is", "a", "knave"}
