"""The ``micro`` model: a randomly initialised Qwen2-architecture causal LM of ~0.3M parameters
with a byte-level tokenizer, built in about a second with no download. For tests and smoke runs;
the trained tiny base models live beside it in ``rlvr.models``.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from rlvr.repro import install_kernels

# The models rlvr builds or loads are made through this module (tiny.py and loader.py import it;
# pretrained.py installs them too): the reproducible mode's threads and GEMMs come first.
install_kernels()

#: Special tokens shared by every locally built tokenizer (the Qwen chat-template markers).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A tokenizer over the 256 byte symbols plus ``SPECIAL_TOKENS``: covers any text, no
    training."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for sym in alphabet:
        vocab[sym] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return wrap_tokenizer(tok)


def wrap_tokenizer(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """A ``transformers`` tokenizer around ``tok`` with the project's eos/pad and left padding."""
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.padding_side = "left"
    return fast


def micro_config(
    vocab_size: int,
    hidden_size: int = 96,
    num_layers: int = 3,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 192,
    max_position_embeddings: int = 2048,
) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        use_cache=True,
    )


def build_micro(
    seed: int = 0, **config_overrides
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """A fresh random micro model and its tokenizer; the same ``seed`` gives the same weights."""
    tokenizer = byte_level_tokenizer()
    config = micro_config(len(tokenizer), **config_overrides)
    config.pad_token_id = tokenizer.pad_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.bos_token_id = None
    devnull = torch.random.fork_rng(devices=[])
    with devnull:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer
