"""Token statistics for Figure 1: the policy's probability of its own generated tokens, per word.

For each response, ``token_probabilities`` scores every generated token under the policy
(teacher forcing on prompt + response). ``word_probabilities`` merges sub-word tokens into words:
the response text is rebuilt from the per-token pieces, words are maximal runs of word characters
(regex ``\\w+``, lower-cased), and a word's probability is the mean probability of the tokens
that overlap it. ``WordStats`` accumulates occurrences; ``extreme_words`` returns the frequent
words (seen at least ``min_count`` times) with the highest and the lowest mean probability.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

_WORD = re.compile(r"\w+")


@torch.no_grad()
def token_probabilities(
    model, prompt_ids: Sequence[int], response_ids: Sequence[int], chunk: int = 1024
) -> np.ndarray:
    """Probability under ``model`` of each token of ``response_ids`` given the prompt and the
    response prefix; computed over ``chunk`` positions at a time so that at most a
    ``[chunk, vocab]`` slice of logits is normalised at once."""
    if len(response_ids) == 0:
        return np.zeros(0)
    if len(prompt_ids) == 0:
        raise ValueError("token_probabilities: prompt_ids must hold at least one token")
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(response_ids)], device=device)
    start = len(prompt_ids) - 1  # position whose logits predict the first response token
    targets = ids[0, len(prompt_ids) :]
    split_head = hasattr(model, "model") and hasattr(model, "lm_head")
    if split_head:  # run the body once, the vocabulary projection chunk by chunk
        hidden = model.model(input_ids=ids).last_hidden_state[0]
    else:
        full_logits = model(input_ids=ids).logits[0]
    out = []
    for s in range(0, len(response_ids), chunk):
        e = min(s + chunk, len(response_ids))
        if split_head:
            logits = model.lm_head(hidden[start + s : start + e]).float()
        else:
            logits = full_logits[start + s : start + e].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[s:e, None])[:, 0]
        out.append(logp.exp().cpu())
    return torch.cat(out).numpy()


def token_pieces(tokenizer, ids: Sequence[int]) -> list[str]:
    """The text of each token on its own (byte-level pieces of a multi-byte character decode to
    replacement characters, which ``\\w`` does not match, so such characters drop out of words)."""
    return [tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]


def word_probabilities(pieces: Sequence[str], probs: Sequence[float]) -> list[tuple[str, float]]:
    """Merge sub-word token pieces into words: ``[(word, mean probability of its tokens), ...]``."""
    if len(pieces) != len(probs):
        raise ValueError(f"word_probabilities: {len(pieces)} pieces but {len(probs)} probabilities")
    starts = np.cumsum([0] + [len(p) for p in pieces])  # token j spans [starts[j], starts[j+1])
    text = "".join(pieces)
    out = []
    for m in _WORD.finditer(text):
        a, b = m.span()
        first = int(np.searchsorted(starts, a, side="right") - 1)
        last = int(np.searchsorted(starts, b - 1, side="right") - 1)
        tok_probs = [probs[j] for j in range(first, last + 1) if starts[j] < starts[j + 1]]
        out.append((m.group().lower(), float(np.mean(tok_probs))))
    return out


@dataclass
class WordStats:
    """Occurrence counts and summed probabilities of words across responses."""

    count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    prob_sum: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, words: Iterable[tuple[str, float]]) -> None:
        for w, p in words:
            self.count[w] += 1
            self.prob_sum[w] += p

    def mean(self, word: str) -> float:
        return self.prob_sum[word] / self.count[word]

    def rows(self) -> list[tuple[str, int, float]]:
        """``(word, count, mean probability)`` sorted by count, then word."""
        return sorted(
            ((w, c, self.mean(w)) for w, c in self.count.items()), key=lambda r: (-r[1], r[0])
        )


def extreme_words(
    stats: WordStats, n: int = 100, min_count: int = 3
) -> tuple[list[tuple[str, int, float]], list[tuple[str, int, float]]]:
    """The ``n`` words seen at least ``min_count`` times with the highest and the lowest mean
    probability (ties broken by frequency, then alphabetically). When fewer than ``2n`` words
    qualify, the two lists split them (the top half high, the bottom half low) so no word is in
    both."""
    rows = [r for r in stats.rows() if r[1] >= min_count]
    rows.sort(key=lambda r: (-r[2], -r[1], r[0]))
    k = min(n, len(rows) // 2) if len(rows) < 2 * n else n
    high = rows[:k]
    low = sorted(rows[len(rows) - k :], key=lambda r: (r[2], -r[1], r[0])) if k else []
    return high, low


def collect_word_stats(
    model, tokenizer, episodes: Iterable[tuple[Sequence[int], Sequence[int]]]
) -> WordStats:
    """``WordStats`` over ``(prompt_ids, response_ids)`` pairs scored by ``model``."""
    stats = WordStats()
    for prompt_ids, response_ids in episodes:
        probs = token_probabilities(model, prompt_ids, response_ids)
        stats.add(word_probabilities(token_pieces(tokenizer, response_ids), probs))
    return stats


__all__ = [
    "WordStats",
    "collect_word_stats",
    "extreme_words",
    "token_pieces",
    "token_probabilities",
    "word_probabilities",
]
