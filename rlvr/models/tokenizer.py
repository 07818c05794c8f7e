"""A small BPE tokenizer trained locally on task text (no download).

Byte-level BPE (GPT-2 / Qwen2 style, so any string encodes) trained with the ``tokenizers``
library on prompts and responses drawn from the task generators. Two choices follow Qwen2's
tokenizer: digits are split one per token (arithmetic generalises across numbers instead of
memorising multi-digit tokens), and the special tokens are the chat markers of
``rlvr.models.micro.SPECIAL_TOKENS``. The task tags (``<think>``, ``<answer>``, ``<search>`` ...)
are added as single, non-special tokens: they decode as text, and a small model never has to
spell them out piece by piece.

Training is deterministic: the same texts in the same order give the same vocabulary and merges.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rlvr.models.micro import SPECIAL_TOKENS, wrap_tokenizer

#: Tags of the three tasks' response formats (docs/design.md §3-4), one token each.
TAG_TOKENS = (
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<search>",
    "</search>",
    "<information>",
    "</information>",
)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 1024, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer of ``vocab_size`` entries (specials and tags included)."""
    if vocab_size < 256 + len(SPECIAL_TOKENS) + len(TAG_TOKENS):
        raise ValueError(
            f"vocab_size={vocab_size} is below the 256 byte symbols plus "
            f"{len(SPECIAL_TOKENS) + len(TAG_TOKENS)} special/tag tokens"
        )
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Tags and chat markers are cut out before BPE training: no merge is spent on their pieces.
    tag_free = (_strip_tags(t) for t in texts)
    tok.train_from_iterator(tag_free, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return wrap_tokenizer(tok)


def _strip_tags(text: str) -> str:
    for tag in (*TAG_TOKENS, *SPECIAL_TOKENS):
        text = text.replace(tag, " ")
    return text
