"""A small BPE tokenizer trained locally on task text (no download).

Byte-level BPE (so any string encodes) trained with the ``tokenizers`` library on prompts and
responses drawn from the task generators, with Qwen2's text pipeline: its NFC normalizer and its
pre-tokenizer split (one digit per piece, so arithmetic generalises across numbers instead of
memorising multi-digit tokens; newline runs kept whole). The pipeline is Qwen2's because a base is
a ``Qwen2ForCausalLM``, and ``transformers`` (>= 5) loads the tokenizer of a ``qwen2`` model folder
as ``Qwen2Tokenizer``, which rebuilds that pipeline around the saved vocabulary and merges
whatever ``tokenizer.json`` says (``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS`` in
``transformers/models/auto/tokenization_auto.py``). So vLLM, verl and ``load_model``, which all
load through ``AutoTokenizer``, split text exactly as the base was trained on (``load_tokenizer``,
``reload_mismatch``). The special tokens are the chat markers of
``rlvr.models.micro.SPECIAL_TOKENS``. The task tags (``<think>``, ``<answer>``, ``<search>`` ...)
are added as single, non-special tokens: they decode as text, and a small model never has to
spell them out piece by piece.

Training is deterministic: the same texts in the same order give the same vocabulary and merges.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

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
    # Qwen2Tokenizer.__init__'s pipeline, which is what a loaded base runs (module docstring).
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
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


def load_tokenizer(src: str | Path, **kwargs) -> PreTrainedTokenizerFast:
    """The tokenizer of model folder (or hub name) ``src`` as every consumer loads it
    (``AutoTokenizer``), with a pad token (eos if none) and left padding."""
    tokenizer = AutoTokenizer.from_pretrained(str(src), **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


#: Text on which a pipeline that differs from the trained one shows (newline runs before a word,
#: digits, a decomposed accent, tags, double spaces).
PROBE_TEXT = (
    "User: Who? 1943\n\nAssistant: <search> Ve Nimbro </search>\n\n<information>Doc 1(Title: "
    '"Cafe\u0301")  x\n  y</information>\n\n<answer> 12 </answer>'
)


def reload_mismatch(trained: Tokenizer, loaded, texts) -> str | None:
    """The first of ``texts`` that ``loaded`` (a ``transformers`` tokenizer) encodes to other ids
    than ``trained`` (the ``tokenizers`` object a base was trained with), or ``None``."""
    for text in texts:
        if trained.encode(text, add_special_tokens=False).ids != loaded.encode(
            text, add_special_tokens=False
        ):
            return text
    return None
