"""Tiny base models: tokenizer, SFT warm start, build cache, presets and profiles.

Everything here uses a micro-sized ``BuildConfig`` (a few thousand parameters, a few SFT steps),
so the whole file runs in seconds; the real presets are only hashed and validated, not built.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from rlvr.config import ConfigError
from rlvr.envs import warmstart
from rlvr.envs.kk import reward as kk_reward
from rlvr.envs.kk import traces as kk_traces
from rlvr.envs.kk.render import join_names
from rlvr.envs.math.traces import slipped_solution
from rlvr.envs.searchqa import traces as sq_traces
from rlvr.models import accept, evaluate, load_model
from rlvr.models import build as build_module
from rlvr.models import sft as sft_module
from rlvr.models.accept import DRAW_STRIDE, AcceptConfig
from rlvr.models.build import (
    BuildConfig,
    TokenizerConfig,
    build,
    build_key,
    draw_config,
    ensure_built,
    with_overrides,
)
from rlvr.models.micro import SPECIAL_TOKENS
from rlvr.models.presets import PRESETS
from rlvr.models.sft import (
    SFTConfig,
    batch_gradients,
    collate,
    encode_example,
    lr_at,
    response_loss,
    sft,
    slices,
)
from rlvr.models.tiny import ArchConfig, build_tiny
from rlvr.models.tokenizer import TAG_TOKENS, train_tokenizer

KK = dict(warmstart.tiny_settings("kk"), n_people=[2, 3])
MICRO_ARCH = ArchConfig(
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=64,
    max_position_embeddings=512,
)


def micro_build_config(**changes) -> BuildConfig:
    cfg = BuildConfig(
        name="test-kk",
        task="kk",
        data=KK,
        tokenizer=TokenizerConfig(
            vocab_size=320, tasks=("kk",), texts_per_task=40, settings={"kk": KK}
        ),
        arch=MICRO_ARCH,
        sft=SFTConfig(steps=3, batch_size=4, warmup_steps=1, max_length=512),
    )
    return dataclasses.replace(cfg, **changes)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Micro models gain nothing from threads, and a busy 2-core machine loses a lot to them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def kk_texts():
    return warmstart.tokenizer_texts("kk", KK, 40, seed=0)


# -- tokenizer -----------------------------------------------------------------------------------
def test_tokenizer_is_deterministic_and_keeps_tags_whole(kk_texts):
    a = train_tokenizer(kk_texts, vocab_size=320)
    b = train_tokenizer(kk_texts, vocab_size=320)
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()
    assert [a.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert a.eos_token == "<|endoftext|>" and a.pad_token == "<|pad|>"
    assert a.padding_side == "left"
    for tag in TAG_TOKENS:
        assert len(a.encode(tag, add_special_tokens=False)) == 1, tag
    # Digits are one token each, so numbers are spelled out digit by digit.
    assert a.tokenize("2048") == ["2", "0", "4", "8"]
    # Byte-level: any text round-trips, including text never seen in training.
    odd = "Zoë ∑ 日本 \x00 <answer>(1) X is a knave</answer>"
    assert a.decode(a.encode(odd, add_special_tokens=False)) == odd


def test_a_saved_tokenizer_loads_with_the_text_split_it_was_trained_with(kk_texts, tmp_path):
    """transformers loads the tokenizer of a ``qwen2`` folder as ``Qwen2Tokenizer``, which
    rebuilds its own normalizer and pre-tokenizer around the saved merges. A base trained with
    another split runs on text it never saw: the search-QA base, trained on ``"?", "\\n", "\\n",
    "Assistant"``, ran on ``"?", "\\n\\n", "Assistant"`` and opened every episode with
    ``</answer>`` (issue 28)."""
    from transformers import AutoTokenizer

    # Episodes whose observations put "\n\n" between tags, as search QA's do: it becomes a merge.
    episode = "Who?\n\nAssistant: <search> Bo </search>\n\n<information>Bo</information>\n\n"
    texts = kk_texts + [episode] * 40
    tok = train_tokenizer(texts, vocab_size=320)
    build_tiny(MICRO_ARCH, tok, seed=0).config.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    probes = [
        *texts[:5],
        "Who?\n\nAssistant: <answer> 1943 </answer>",
        "Cafe\u0301  x\n  y\n\n\tz",
    ]
    for text in probes:
        assert loaded.encode(text, add_special_tokens=False) == tok.encode(
            text, add_special_tokens=False
        ), text


def test_a_base_whose_tokenizer_loads_otherwise_is_refused(tmp_path):
    from transformers import AutoTokenizer

    path = ensure_built(micro_build_config(), home=tmp_path, progress=False)
    assert type(AutoTokenizer.from_pretrained(path)).__name__ == "Qwen2Tokenizer"
    load_model(str(path))  # as built: loads
    spec = json.loads((path / "tokenizer.json").read_text())
    spec["normalizer"] = None  # the split of bases built before the fix
    spec["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": True,
                "use_regex": True,
            },
        ],
    }
    (path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match="rebuild it"):
        load_model(str(path))


def test_tokenizer_rejects_a_vocabulary_below_the_byte_alphabet(kk_texts):
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(kk_texts, vocab_size=100)


# -- SFT -----------------------------------------------------------------------------------------
def test_loss_mask_covers_the_response_and_eos_only(kk_texts):
    tok = train_tokenizer(kk_texts, vocab_size=320)
    ids, mask = encode_example(
        tok, [("User: hi\nAssistant: <think>", False), ("</think><answer>ok</answer>", True)]
    )
    n_prompt = len(tok.encode("User: hi\nAssistant: <think>", add_special_tokens=False))
    assert mask[:n_prompt] == [0] * n_prompt
    assert mask[n_prompt:] == [1] * (len(ids) - n_prompt)
    assert ids[-1] == tok.eos_token_id
    batch = collate([(ids, mask), (ids[:3], mask[:3])], tok.pad_token_id)
    assert batch["input_ids"].shape == (2, len(ids))
    assert batch["attention_mask"][1].tolist() == [1, 1, 1] + [0] * (len(ids) - 3)
    assert (batch["labels"][0] != -100).sum() == sum(mask)
    assert (batch["labels"][1] == -100).all()
    assert batch["context"][0].sum() == n_prompt and not batch["context"][0, len(mask) :].any()


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    cfg = SFTConfig(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(55, cfg) < 1e-3
    assert lr_at(100, cfg) == pytest.approx(1e-4)


def test_sft_stops_with_a_clear_error_when_every_example_is_too_long(kk_texts, monkeypatch):
    from rlvr.models import sft as sft_mod

    monkeypatch.setattr(sft_mod, "MAX_SKIPS_IN_A_ROW", 20)
    tok = train_tokenizer(kk_texts, vocab_size=320)
    model = build_tiny(MICRO_ARCH, tok, seed=0)
    cfg = SFTConfig(steps=2, batch_size=2, warmup_steps=0, max_length=8)
    with pytest.raises(ValueError, match="20 examples in a row are longer than max_length=8"):
        sft(model, tok, warmstart.example_stream("kk", KK, seed=1), cfg, progress=False)


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_sft_lowers_the_loss_and_is_deterministic(kk_texts, micro_batches):
    tok = train_tokenizer(kk_texts, vocab_size=320)
    cfg = SFTConfig(steps=6, batch_size=4, lr=3e-3, warmup_steps=1, micro_batches=micro_batches)

    def run():
        model = build_tiny(MICRO_ARCH, tok, seed=0)
        stats = sft(model, tok, warmstart.example_stream("kk", KK, seed=1), cfg, progress=False)
        return model, stats

    (m1, s1), (m2, s2) = run(), run()
    assert s1["steps"] == 6 and s1["trained_tokens"] > 0
    assert s1["loss_ema"] == s2["loss_ema"]
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p, q)
    first = [(warmstart.take(warmstart.example_stream("kk", KK, seed=1), 4))]
    batch = collate([encode_example(tok, ex) for ex in first[0]], tok.pad_token_id)
    fresh = build_tiny(MICRO_ARCH, tok, seed=0)
    with torch.no_grad():
        assert response_loss(m1, batch)[0] < response_loss(fresh, batch)[0]
        # The context weight adds the prompt tokens' loss; the response-only value is unchanged.
        plain, with_ctx = response_loss(m1, batch), response_loss(m1, batch, context_weight=0.5)
        assert plain[2] == pytest.approx(with_ctx[2]) and plain[1] == with_ctx[1]
        assert plain[0] != with_ctx[0]


def test_micro_batches_add_up_to_the_batch_gradient_in_fixed_bits(kk_texts):
    """Slices carry the whole batch's denominator, so their gradients add up to the batch's; one
    slice is a plain ``backward()`` bit for bit (builds without slices keep their weights); two
    slices give the same bits on two threads as one after the other (so on any core count)."""
    tok = train_tokenizer(kk_texts, vocab_size=320)
    model = build_tiny(MICRO_ARCH, tok, seed=0)
    examples = warmstart.take(
        warmstart.example_stream("kk", KK, seed=1), 5
    )  # 5 rows: uneven slices
    batch = collate([encode_example(tok, ex) for ex in examples], tok.pad_token_id)

    def grads():
        out = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        return out

    loss, n_tokens, _ = response_loss(model, batch, context_weight=0.5)
    loss.backward()
    plain = grads()
    one = batch_gradients(model, batch, 0.5)
    assert all(torch.equal(g, h) for g, h in zip(grads(), plain))
    serial = batch_gradients(model, batch, 0.5, None, 2)
    two_serial = grads()
    with ThreadPoolExecutor(2) as workers:
        threaded = batch_gradients(model, batch, 0.5, workers, 2)
    two_threads = grads()
    assert all(torch.equal(g, h) for g, h in zip(two_threads, two_serial))
    assert any(not torch.equal(g, h) for g, h in zip(two_serial, plain))  # other rounding
    for g, h in zip(two_serial, plain):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)
    assert one[0] == serial[0] == threaded[0] == n_tokens
    assert serial[1] == pytest.approx(one[1])


def test_slices_cover_the_rows_each_cut_to_its_longest(kk_texts):
    tok = train_tokenizer(kk_texts, vocab_size=320)
    examples = warmstart.take(warmstart.example_stream("kk", KK, seed=2), 5)
    encoded = sorted((encode_example(tok, ex) for ex in examples), key=lambda e: len(e[0]))
    batch = collate(encoded, tok.pad_token_id)
    pieces = slices(batch, 2)
    assert [p["input_ids"].shape for p in pieces] == [
        (2, len(encoded[1][0])),
        (3, len(encoded[4][0])),
    ]
    assert torch.equal(pieces[1]["labels"], batch["labels"][2:])


def test_sft_config_rejects_bad_values():
    with pytest.raises(ValueError, match="batch_size"):
        SFTConfig(batch_size=0)
    with pytest.raises(ValueError, match="lr"):
        SFTConfig(lr=0)
    with pytest.raises(ValueError, match="micro_batches"):
        SFTConfig(batch_size=4, micro_batches=5)
    with pytest.raises(ValueError, match="micro_batches"):
        SFTConfig(micro_batches=0)


# -- build and cache -----------------------------------------------------------------------------
def test_build_saves_a_from_pretrained_model_and_reuses_the_cache(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = micro_build_config()
    path = ensure_built(cfg, home=tmp_path, progress=False)
    assert path.parent == tmp_path and path.name == build_key(cfg)
    record = json.loads((path / "build.json").read_text())
    assert record["sft"]["steps"] == 3 and record["parameters"] > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dir left

    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert tok.convert_tokens_to_ids("<answer>") != tok.unk_token_id
    m2, t2 = load_model(str(path))
    assert t2.padding_side == "left" and t2.pad_token == "<|pad|>"
    ids = t2("User: hi", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, m2(ids).logits)

    mtime = (path / "build.json").stat().st_mtime_ns
    assert ensure_built(cfg, home=tmp_path, progress=False) == path
    assert (path / "build.json").stat().st_mtime_ns == mtime  # not rebuilt


def test_a_torn_build_record_is_rebuilt_and_a_killed_builds_folder_removed(tmp_path):
    """A build killed mid-way left ``.<key>.tmp-<pid>`` for good, and a torn ``build.json``
    (a full disk) passed for a finished build."""
    import subprocess

    cfg = micro_build_config()
    path = ensure_built(cfg, home=tmp_path, progress=False)
    weights = json.loads((path / "build.json").read_text())["weights_sha256"]
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f".{path.name}.tmp-{dead.pid}"
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"\0" * 1024)
    (path / "build.json").write_text('{"name": "test-kk", "weights_sha2')
    assert ensure_built(cfg, home=tmp_path, progress=False) == path
    assert json.loads((path / "build.json").read_text())["weights_sha256"] == weights
    assert not left.exists()


def test_build_is_deterministic(tmp_path):
    cfg = micro_build_config()
    a = ensure_built(cfg, home=tmp_path / "a", progress=False)
    b = ensure_built(cfg, home=tmp_path / "b", progress=False)
    ma, _ = load_model(str(a))
    mb, _ = load_model(str(b))
    for p, q in zip(ma.parameters(), mb.parameters()):
        assert torch.equal(p, q)


def test_cache_key_changes_with_any_setting():
    cfg = micro_build_config()
    key = build_key(cfg)
    assert build_key(micro_build_config()) == key
    changed = [
        with_overrides(cfg, ["sft.steps=4"]),
        with_overrides(cfg, ["arch.hidden_size=64"]),
        with_overrides(cfg, ["tokenizer.vocab_size=330"]),
        with_overrides(cfg, ["seed=1"]),
        with_overrides(cfg, {"data": {"n_people": [2, 4]}}),
    ]
    keys = {build_key(c) for c in changed}
    assert key not in keys and len(keys) == len(changed)


def test_an_acceptance_check_draws_again_until_a_draw_passes_and_resumes_after_a_kill(
    tmp_path, monkeypatch
):
    """Draw 0 fails the check, the process dies checking draw 1; the next call resumes at draw
    1 (draw 0 is not built again) and keeps it: the bits of the recipe at seed +DRAW_STRIDE."""
    cfg = micro_build_config(accept=AcceptConfig(draws=3, groups=(2, 3), items=2))
    scores = iter([0.0, "kill", 0.5])
    calls = []

    def scripted(model, tokenizer, task, settings, *, n, split, read):
        assert split == "train" and settings["n_people"] == [2, 3] and n == 2
        assert read is kk_traces.unslipped
        calls.append(next(scores))
        if calls[-1] == "kill":
            raise KeyboardInterrupt
        return [{"group": f"kk{s}", "accuracy": calls[-1]} for s in (2, 3)]

    monkeypatch.setattr(accept, "evaluate_base", scripted)
    with pytest.raises(KeyboardInterrupt):
        ensure_built(cfg, home=tmp_path, progress=False)
    log = tmp_path / f"{build_key(cfg)}.draws.json"
    assert [t["seed"] for t in json.loads(log.read_text())] == [0]
    path = ensure_built(cfg, home=tmp_path, progress=False)
    assert calls == [0.0, "kill", 0.5] and not log.exists()
    record = json.loads((path / "build.json").read_text())
    assert record["config"]["seed"] == DRAW_STRIDE and record["accept"]["passed"]
    assert [(t["draw"], t["accuracy"]) for t in record["rejected"]] == [
        (0, {"kk2": 0.0, "kk3": 0.0})
    ]
    plain = dataclasses.replace(draw_config(cfg, 1), accept=AcceptConfig())
    again = json.loads(
        (ensure_built(plain, home=tmp_path / "plain", progress=False) / "build.json").read_text()
    )
    assert again["weights_sha256"] == record["weights_sha256"]


def test_a_build_killed_in_its_warm_start_resumes_from_a_checkpoint_to_the_same_bits(
    tmp_path, monkeypatch
):
    """A session that ended inside a build (tiny-searchqa: an hour of one core) lost the whole
    draw. The warm start now saves checkpoints beside the folder; a build killed at step 5
    resumes from step 4, draws its examples on from where they were, and ends in the bits of a
    build never stopped, which are the bits of a build without checkpoints."""
    monkeypatch.setattr(build_module, "CHECKPOINT_STEPS", 2)
    sft_cfg = SFTConfig(steps=7, batch_size=4, warmup_steps=1, max_length=512, length_groups=2)
    cfg = micro_build_config(sft=sft_cfg)
    plain = build(cfg, tmp_path / "plain", progress=False)
    whole = json.loads((ensure_built(cfg, tmp_path / "whole", False) / "build.json").read_text())
    assert whole["weights_sha256"] == plain["weights_sha256"] and "resumed_at" not in whole["sft"]
    assert not list((tmp_path / "whole").glob("*.checkpoints"))  # removed once the draw is kept

    steps = []  # the steps trained, in order (lr_at is asked once per parameter group)
    lr_at = sft_module.lr_at

    def killed_at_step_5(step, c):
        if not steps or steps[-1] != step:
            steps.append(step)
        if steps == [0, 1, 2, 3, 4, 5]:
            raise KeyboardInterrupt
        return lr_at(step, c)

    monkeypatch.setattr(sft_module, "lr_at", killed_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        ensure_built(cfg, home=tmp_path / "killed", progress=False)
    saved = tmp_path / "killed" / f"{build_key(cfg)}.draw0.checkpoints"
    assert [p.name for p in saved.iterdir()] == ["step_00000004"]  # the newest only
    path = ensure_built(cfg, home=tmp_path / "killed", progress=False)
    assert steps == [0, 1, 2, 3, 4, 5, 4, 5, 6]
    record = json.loads((path / "build.json").read_text())
    assert record["sft"]["resumed_at"] == 4 and record["sft"]["steps"] == 7
    assert record["sft"]["tokens"] == whole["sft"]["tokens"]
    assert record["weights_sha256"] == whole["weights_sha256"]
    assert not saved.exists()


def test_a_build_whose_draws_all_fail_stops_with_their_scores_and_keeps_them(tmp_path):
    """The real check on micro models: an untrained model scores 0, under any positive band."""
    cfg = micro_build_config(accept=AcceptConfig(draws=2, groups=(2,), items=3, low=0.5))
    with pytest.raises(RuntimeError, match=rf"no draw of 2 .*seed 0 .*seed {DRAW_STRIDE} "):
        ensure_built(cfg, home=tmp_path, progress=False)
    log = tmp_path / f"{build_key(cfg)}.draws.json"
    tried = json.loads(log.read_text())
    assert [t["accuracy"] for t in tried] == [{"kk2": 0.0}, {"kk2": 0.0}]
    assert tried[0]["weights_sha256"] != tried[1]["weights_sha256"]
    with pytest.raises(RuntimeError, match="no draw of 2"):  # nothing built again
        ensure_built(cfg, home=tmp_path, progress=False)
    assert json.loads(log.read_text()) == tried
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    passing = dataclasses.replace(cfg, accept=AcceptConfig(draws=2, groups=(2,), items=3, low=0))
    record = json.loads(
        (ensure_built(passing, home=tmp_path, progress=False) / "build.json").read_text()
    )
    assert record["accept"] == {
        "accuracy": {"kk2": 0.0},
        "passed": True,
        "seconds": record["accept"]["seconds"],
    }
    assert "rejected" not in record and record["weights_sha256"] == tried[0]["weights_sha256"]


def test_the_acceptance_check_is_out_of_the_key_until_set_and_refuses_bad_values():
    cfg = micro_build_config()
    assert build_key(dataclasses.replace(cfg, accept=AcceptConfig())) == build_key(cfg)
    checked = with_overrides(cfg, ["accept.draws=3", "accept.groups=[3,4,5]"])
    assert checked.accept.groups == (3, 4, 5) and build_key(checked) != build_key(cfg)
    for bad, match in [
        (dict(draws=0), "draws"),
        (dict(draws=2), "groups"),
        (dict(low=0.5, high=0.4), "low"),
        (dict(items=0), "items"),
    ]:
        with pytest.raises(ValueError, match=match):
            AcceptConfig(**bad)


def test_overrides_name_the_bad_key():
    with pytest.raises(ConfigError, match="sft.stepz"):
        with_overrides(micro_build_config(), ["sft.stepz=3"])
    with pytest.raises(ConfigError, match="task"):
        micro_build_config(task="chess")


def test_build_model_cli_builds_and_evaluates(tmp_path, capsys):
    from rlvr.cli import main

    rc = main(
        [
            "build-model",
            "tiny-kk",
            "sft.steps=2",
            "sft.batch_size=2",
            "tokenizer.vocab_size=320",
            "tokenizer.tasks=kk",
            "tokenizer.texts_per_task=40",
            "arch.hidden_size=32",
            "arch.num_layers=1",
            "arch.num_heads=2",
            "arch.num_kv_heads=1",
            "arch.intermediate_size=64",
            "data.n_people=[2]",
            "accept.draws=2",
            "accept.groups=[3,4,5]",
            "accept.low=0",  # an untrained model passes its check (0 is in the band)...
            "accept.items=2",
            "--home",
            str(tmp_path),
            "--quiet",
            "--eval",
            "--eval-n",
            "2",
        ]
    )
    assert rc == 0
    captured = capsys.readouterr()
    assert "it/s" not in captured.err  # --quiet: no bar, transformers' "Writing model shards" too
    lines = captured.out.strip().splitlines()
    assert lines[0].startswith(str(tmp_path / "tiny-kk-"))
    checked = json.loads(lines[1])["accept"]  # ...on those sizes, read on the train split
    assert checked["passed"] and sorted(checked["accuracy"]) == ["kk3", "kk4", "kk5"]
    rows = [json.loads(line) for line in lines[2:]]
    assert [r["group"] for r in rows] == ["kk2"]
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["items"] == 2 for r in rows)


def test_build_model_cli_says_in_one_line_that_no_draw_passed(tmp_path):
    from rlvr.cli import main

    micro = ["sft.steps=1", "sft.batch_size=2", "tokenizer.vocab_size=320"]
    micro += ["tokenizer.tasks=kk", "tokenizer.texts_per_task=40", "arch.hidden_size=32"]
    micro += ["arch.num_layers=1", "arch.num_heads=2", "arch.num_kv_heads=1"]
    micro += ["arch.intermediate_size=64", "data.n_people=[2]"]
    checked = ["accept.draws=2", "accept.groups=[2]", "accept.items=2", "accept.low=0.5"]
    with pytest.raises(SystemExit, match=r"^rlvr build-model: model tiny-kk: no draw of 2 "):
        main(["build-model", "tiny-kk", *micro, *checked, "--home", str(tmp_path), "--quiet"])


# -- presets and the tiny profile ----------------------------------------------------------------
def test_presets_are_consistent():
    for name, cfg in PRESETS.items():
        assert cfg.name == name and name == f"tiny-{cfg.task}"
        assert set(cfg.tokenizer.tasks) == set(warmstart.tasks())
        # One tokenizer for all presets: identical tokenizer settings.
        assert cfg.tokenizer == next(iter(PRESETS.values())).tokenizer


@pytest.mark.parametrize("env", ["kk", "math", "searchqa"])
def test_tiny_profile_validates_and_matches_its_base(env, tmp_path):
    from rlvr.training.train_config import load_train_config

    cfg = load_train_config([f"env={env}", "profile=tiny", f"out={tmp_path}"])
    assert cfg.model == f"tiny-{env}" and cfg.model in PRESETS
    assert cfg.group_size >= 16 and cfg.optim.lr <= 2e-4 and cfg.loss.kl_coef > 0
    preset = warmstart.env_kwargs(env, PRESETS[cfg.model].data)
    # The RL prompts must be the warm-start prompts: same env settings, sizes/levels a subset.
    varying = {"kk": "n_people", "math": "difficulty"}.get(env)
    if varying:
        assert set(cfg.env_kwargs[varying]) <= set(preset[varying])
    assert {k: v for k, v in cfg.env_kwargs.items() if k != varying} == {
        k: v for k, v in preset.items() if k != varying
    }
    pick = {varying: cfg.env_kwargs[varying][0]} if varying else {}
    a = warmstart.make_env(env, {**preset, **pick}, "test")
    b = warmstart.make_env(env, {**cfg.env_kwargs, **pick}, "test")
    for i in range(3):
        assert a.reset(seed=0, options={"index": i})[0] == b.reset(seed=0, options={"index": i})[0]


def test_a_run_on_a_built_folder_inherits_its_env_settings(tmp_path):
    """A base named by its folder trains on the prompts it was built for, as a preset name does
    (issue 28: a folder run got the searchqa defaults, the qwen template and 3 passages)."""
    from rlvr.training.train_config import load_train_config

    folder = tmp_path / "tiny-searchqa-0123456789ab"
    folder.mkdir()
    build = PRESETS["tiny-searchqa"]
    (folder / "build.json").write_text(
        json.dumps({"config": {"task": "searchqa", "data": build.data}})
    )
    common = ["env=searchqa", "profile=tiny", f"out={tmp_path / 'run'}"]
    cfg = load_train_config([*common, f"model={folder}"])
    assert cfg.env_kwargs == warmstart.env_kwargs("searchqa", build.data)
    assert cfg.env_kwargs == load_train_config(common).env_kwargs
    assert (
        load_train_config([*common, f"model={folder}", "env_kwargs.topk=3"]).env_kwargs["topk"] == 3
    )
    # A base built for another task passes nothing on.
    other = load_train_config(
        ["env=kk", "profile=tiny", f"model={folder}", f"out={tmp_path / 'r'}"]
    )
    assert "template" not in other.env_kwargs


def test_search_traces_from_other_worlds_never_use_the_rl_world():
    settings = {**warmstart.tiny_settings("searchqa"), "trace_worlds": 3}
    examples = warmstart.take(
        warmstart.example_stream("searchqa", settings, seed=0), 2 * sq_traces.TRACES_PER_WORLD
    )
    searched = {ex[1][0].removeprefix("<search> ").removesuffix(" </search>") for ex in examples}
    home_titles = set(sq_traces._search_passages(warmstart.tiny_settings("searchqa")))
    other_titles = set().union(
        *(sq_traces._search_passages({**settings, "seed": s}) for s in (1, 2, 3))
    )
    assert searched <= other_titles
    assert (
        len(searched & home_titles) <= 1
    )  # random syllable names: a collision is rare, not impossible
    # The evaluation items (and so the RL world) ignore the trace option.
    assert warmstart.eval_items("searchqa", settings, 5) == warmstart.eval_items(
        "searchqa", warmstart.tiny_settings("searchqa"), 5
    )
    with pytest.raises(ValueError, match="trace_worlds"):
        next(warmstart.example_stream("searchqa", {**settings, "trace_worlds": -1}))


def _share_zero_leaves_the_stream(settings, key):
    """A search-QA share option at 0 gives the stream of the settings without it."""
    zero = {**settings, key: 0.0}
    without = {k: v for k, v in settings.items() if k != key}
    assert warmstart.take(warmstart.example_stream("searchqa", zero, seed=0), 40) == warmstart.take(
        warmstart.example_stream("searchqa", without, seed=0), 40
    )


def test_direct_answer_share_of_search_traces():
    settings = {**warmstart.tiny_settings("searchqa"), "trace_worlds": 3, "direct_frac": 0.5}
    examples = warmstart.take(warmstart.example_stream("searchqa", settings, seed=0), 200)
    direct = [ex for ex in examples if len(ex) == 2]
    assert 60 <= len(direct) <= 140  # Binomial(200, 0.5), well inside
    for (prompt, p_train), (answer, a_train) in direct:
        assert (p_train, a_train) == (False, True)
        assert answer.startswith("<answer> ") and answer.endswith(" </answer>")
    assert all(ex[1][0].startswith("<search>") for ex in examples if len(ex) > 2)
    _share_zero_leaves_the_stream(settings, "direct_frac")
    with pytest.raises(ValueError, match="direct_frac"):
        next(warmstart.example_stream("searchqa", {**settings, "direct_frac": 1.0}))
    with pytest.raises(ValueError, match="trace_worlds"):
        next(warmstart.example_stream("searchqa", {**settings, "trace_worlds": 0}))


def test_query_copy_examples_train_the_entity_only():
    settings = {**warmstart.tiny_settings("searchqa"), "trace_worlds": 3, "copy_aux": 0.5}
    examples = warmstart.take(warmstart.example_stream("searchqa", settings, seed=0), 200)
    copies = [ex for ex in examples if len(ex) == 3 and ex[1] == ("<search>", False)]
    assert 60 <= len(copies) <= 140  # Binomial(200, 0.5)
    env = warmstart.make_env("searchqa", settings, "train")
    questions = {env.reset(seed=0, options={"index": i})[0] for i in range(len(env.items))}
    for (prompt, p_train), _, (query, q_train) in copies:
        assert (p_train, q_train) == (False, True)
        entity = query.removeprefix(" ").removesuffix(" </search>")
        assert query == f" {entity} </search>" and entity in prompt
        assert prompt not in questions  # drawn from the trace worlds, never the RL world
    # The full traces' first query is the same copy, so the two teach one spelling.
    full = [ex for ex in examples if len(ex) > 3]
    assert full and all(ex[1][0].startswith("<search> ") for ex in full)
    _share_zero_leaves_the_stream(settings, "copy_aux")
    with pytest.raises(ValueError, match="copy_aux"):
        next(warmstart.example_stream("searchqa", {**settings, "copy_aux": 1.0}))


def test_reading_examples_train_the_answer_after_the_question_alone():
    settings = {**warmstart.tiny_settings("searchqa"), "trace_worlds": 3, "read_aux": 0.5}
    world = {**warmstart.env_kwargs("searchqa", settings), "seed": 1}
    env, passages = warmstart.make_env("searchqa", world), sq_traces._search_passages(world)
    made = 0
    for index in range(40):
        full = sq_traces.search_trace(env, index, passages)
        reading = sq_traces.reading_example(env, index, passages)
        if full is None:
            assert reading is None
            continue
        made += 1
        question = env.items[index].question
        assert reading[0] == (f"User: Question: {question}\n\nAssistant: ", False)
        assert len(full[0][0]) > 2 * len(reading[0][0])  # the instruction is left out
        # The same turns and observations as the episode, all context but the answer.
        assert [text for text, _ in reading[1:]] == [text for text, _ in full[1:]]
        assert [trained for _, trained in reading] == [False] * (len(reading) - 1) + [True]
        gold = env.items[index].answers[0]
        assert reading[-1][0] == f"<answer> {gold} </answer>"
        assert gold in "".join(text for text, _ in reading[2:-1:2])  # read from an observation
    assert made >= 20
    examples = warmstart.take(warmstart.example_stream("searchqa", settings, seed=0), 200)
    readings = [ex for ex in examples if ex[0][0].startswith("User: Question: ")]
    assert 60 <= len(readings) <= 140  # Binomial(200, 0.5)
    assert all(ex[1][1] for ex in examples if ex not in readings and len(ex) > 2)
    _share_zero_leaves_the_stream(settings, "read_aux")
    with pytest.raises(ValueError, match="copy_aux \\+ read_aux"):
        next(warmstart.example_stream("searchqa", {**settings, "copy_aux": 0.5}))


def test_numbered_thinks_prefigure_every_answer_line_and_score_full():
    # "numbered" and "lines": the think block lists "(i) Name" as the answer lines open (tried
    # because a tiny base misplaced names from 4 people on with the "names" think:
    # docs/tiny_models.md, "K&K by puzzle size")
    settings = {**warmstart.tiny_settings("kk"), "n_people": [5]}
    env = warmstart.make_env("kk", settings)
    prompt, info = env.reset(seed=3)
    for think, sep in (("numbered", ", "), ("lines", "\n")):
        response = kk_traces.kk_response(info, think=think)
        thought = response.split("</think>")[0]
        answer = response.split("<answer>")[1]
        assert sep.join(f"({i}) {n}" for i, n in enumerate(info["names"], 1)) in thought
        for i, name in enumerate(info["names"], 1):
            assert f"({i}) {name} is a " in answer
        env.reset(seed=3)
        assert env.step(response)[4]["correct"]
    with pytest.raises(ValueError, match="think must be one of"):
        kk_traces.kk_response(info, think="numbers")


def test_slipped_math_solutions_box_a_wrong_answer():
    from rlvr.envs.math import score

    rng = random.Random(0)
    for solution, truth in [
        ("4 * 2 = 8. The answer is \\boxed{8}.", "8"),
        ("x = -1. The answer is \\boxed{-1}.", "-1"),
        ("= 82/63. The answer is \\boxed{82/63}.", "82/63"),
    ]:
        for _ in range(20):
            slipped = slipped_solution(solution, rng)
            assert slipped.split("\\boxed")[0] == solution.split("\\boxed")[0]
            assert not score(slipped, truth).correct and score(solution, truth).correct
    with pytest.raises(ValueError, match="boxed"):
        slipped_solution("no answer here", rng)

    # Levels 1-4 end on the value they box (a 2x2 system boxes y and ends on x): equal when clean.
    copy = re.compile(r"(-?\d+(?:/\d+)?)\. The answer is \\boxed\{(.*)\}\.$")
    plain = {**warmstart.tiny_settings("math"), "difficulty": [1, 2, 3, 4]}
    settings = {**plain, "slip_frac": 0.3}
    clean = warmstart.take(warmstart.example_stream("math", plain, seed=0), 300)
    examples = warmstart.take(warmstart.example_stream("math", settings, seed=0), 300)
    assert all(len(set(copy.search(ex[1][0]).groups())) == 1 for ex in clean)
    wrong = 0
    for (prompt, p_train), (solution, s_train) in examples:
        assert (p_train, s_train) == (False, True)
        wrong += len(set(copy.search(solution).groups())) == 2
    assert 60 <= wrong <= 120  # Binomial(300, 0.3), well inside
    zero = {**settings, "slip_frac": 0.0}
    assert warmstart.take(warmstart.example_stream("math", zero, seed=0), 40) == clean[:40]
    with pytest.raises(ValueError, match="slip_frac"):
        next(warmstart.example_stream("math", {**settings, "slip_frac": 1.0}))


def test_consistent_math_slips_box_one_wrong_value():
    rng = random.Random(0)
    solution = "4 * 2 = 8. The answer is \\boxed{8}."
    assert {slipped_solution(solution, rng, (1,)) for _ in range(10)} == {
        "4 * 2 = 8. The answer is \\boxed{9}."
    }
    # Never to zero: -1 + 1 flips to -1 - 1.
    assert slipped_solution("\\boxed{-1}.", rng, (1,)) == "\\boxed{-2}."
    settings = {**warmstart.tiny_settings("math"), "slip_frac": 0.3}
    default = warmstart.take(warmstart.example_stream("math", settings, seed=0), 40)
    listed = {**settings, "slip_steps": [-3, -2, -1, 1, 2, 3]}
    assert warmstart.take(warmstart.example_stream("math", listed, seed=0), 40) == default
    for bad in ([], [0], [1.5], [True]):
        with pytest.raises(ValueError, match="slip_steps must be non-zero integers"):
            next(warmstart.example_stream("math", {**settings, "slip_steps": bad}))
    assert "slip_steps" not in warmstart.env_kwargs("math", {**settings, "slip_steps": [1]})


def test_kk_slips_are_one_consistent_wrong_answer():
    env = kk_traces.make_env("kk", {"n_people": 3}, "train")
    for seed in range(20):
        _, info = env.reset(seed=seed)
        answer = info["solution_text_format"]
        slipped = kk_traces.slipped_answer(answer)
        lines, slipped_lines = answer.split("\n"), slipped.split("\n")
        assert lines[:-1] == slipped_lines[:-1] and lines[-1] != slipped_lines[-1]
        assert kk_traces.slipped_answer(slipped) == answer
        complement = kk_traces.slipped_answer(answer, "roles").split("\n")
        assert all(
            a != c and a.rsplit(" ", 1)[0] == c.rsplit(" ", 1)[0] for a, c in zip(lines, complement)
        )
        # The name slip keeps the last line's role and names the inhabitant before it.
        renamed = kk_traces.slipped_answer(answer, "name").split("\n")
        assert renamed[:-1] == lines[:-1]
        assert renamed[-1] == "(3) {} is a {}".format(info["names"][1], lines[-1].split()[-1])
        for kind in kk_traces.SLIPS:
            text = f"<think>x</think><answer>{kk_traces.slipped_answer(answer, kind)}</answer>"
            assert kk_reward.score(text, answer).components["answer"] < 0, kind
    with pytest.raises(ValueError, match="no role at the end"):
        kk_traces.slipped_answer("(1) A is a")
    with pytest.raises(ValueError, match="a name slip needs two answer lines"):
        kk_traces.slipped_answer("(1) A is a knight", "name")
    with pytest.raises(ValueError, match="slip must be one of"):
        kk_traces.slipped_answer(answer, "first")
    settings = {**warmstart.tiny_settings("kk"), "n_people": [3]}
    clean = warmstart.take(warmstart.example_stream("kk", settings, seed=0), 200)
    zero = {**settings, "slip_frac": 0.0}
    assert warmstart.take(warmstart.example_stream("kk", zero, seed=0), 200) == clean
    slipped_stream = warmstart.take(
        warmstart.example_stream("kk", {**settings, "slip_frac": 0.6}, seed=0), 200
    )
    wrong = 0
    for (prompt, response), (slipped_prompt, slipped_response) in zip(clean, slipped_stream):
        assert slipped_prompt == prompt  # the same puzzles and copies: slips have their own stream
        if slipped_response != response:
            head, answer = response[0].split("<answer>")
            assert (
                slipped_response[0]
                == f"{head}<answer>"
                + kk_traces.slipped_answer(answer.removesuffix("</answer>"))
                + "</answer>"
            )
            wrong += 1
    puzzles = sum("<answer>" in r[0] for _, r in clean)
    assert 0.45 * puzzles <= wrong <= 0.75 * puzzles
    with pytest.raises(ValueError, match="slip_frac"):
        next(warmstart.example_stream("kk", {**settings, "slip_frac": 1.0}))
    with pytest.raises(ValueError, match="slip must be one of"):
        next(warmstart.example_stream("kk", {**settings, "slip": "some"}))
    assert "slip" not in warmstart.env_kwargs("kk", {**settings, "slip": "name"})


def test_the_acceptance_check_reads_a_name_slip_back():
    """A base taught the name slip is checked on what it can do with the slip read back: its
    slipped answers score as right when their roles are, and nothing else is read back."""
    named = {**warmstart.tiny_settings("kk"), "slip_frac": 0.6, "slip": "name"}
    for n in (2, 3, 5):
        env = kk_traces.make_env("kk", {**named, "n_people": n}, "train")
        for index in range(5):
            _, info = env.reset(seed=0, options={"index": index})
            ground_truth = kk_reward.normalize_ground_truth(info["ground_truth"])
            clean = kk_traces.kk_response(info)
            slipped = kk_traces.kk_response(info, slip="name")
            assert kk_traces.unslipped(slipped, ground_truth, named) == clean
            assert kk_traces.unslipped(clean, ground_truth, named) == clean
            for other in ({**named, "slip": "role"}, {**named, "slip_frac": 0}):
                assert kk_traces.unslipped(slipped, ground_truth, other) == slipped
            read = evaluate._Read(env, kk_traces.unslipped, ground_truth, named)
            assert read.step(slipped)[4]["correct"] and not env.step(slipped)[4]["correct"]
            wrong = kk_traces.kk_response(info, slip="role")
            assert kk_traces.unslipped(wrong, ground_truth, named) == wrong
    with pytest.raises(ValueError, match="read: searchqa is multi-turn"):
        evaluate.evaluate_base(None, None, "searchqa", {}, read=kk_traces.unslipped)


def test_search_traces_are_correct_episodes():
    from rlvr.envs.searchqa import score

    settings = warmstart.tiny_settings("searchqa")
    examples = warmstart.take(warmstart.example_stream("searchqa", settings, seed=0), 20)
    for ex in examples:
        texts, trainable = zip(*ex)
        assert trainable[0] is False and trainable[-1] is True
        assert texts[1].startswith("<search>") and texts[-1].startswith("<answer>")
        # Observations (the env's <information> blocks) are never trainable.
        assert all(not t for text, t in ex[1:] if "<information>" in text)
    assert any(len(ex) == 6 for ex in examples) and any(len(ex) == 4 for ex in examples)
    env = warmstart.make_env("searchqa", settings, "train")
    prompt, info = env.reset(seed=0, options={"index": 3})
    trace = sq_traces.search_trace(env, 3, sq_traces._search_passages(settings))
    if trace is not None:
        assert score("".join(t for t, train in trace[1:] if train), info["ground_truth"]).correct


@pytest.fixture(scope="module")
def micro_bases(tmp_path_factory):
    """Micro-sized bases of each task, built with the tiny presets' data settings."""
    home = tmp_path_factory.mktemp("models")
    tok = TokenizerConfig(
        vocab_size=400, tasks=tuple(p.task for p in PRESETS.values()), texts_per_task=30
    )
    out = {}
    for cfg in PRESETS.values():
        small = dataclasses.replace(
            cfg,
            name=f"micro-{cfg.task}",
            tokenizer=tok,
            arch=MICRO_ARCH,
            sft=SFTConfig(steps=2, batch_size=2, warmup_steps=1),
            accept=AcceptConfig(),  # two steps of a micro model are not a base to check
        )
        out[cfg.task] = ensure_built(small, home=home, progress=False)
    return out


@pytest.mark.parametrize("env", ["kk", "math", "searchqa"])
def test_two_rl_steps_with_the_tiny_profile_on_a_micro_base(env, micro_bases, tmp_path):
    from rlvr.training.train_config import load_train_config
    from rlvr.training.trainer import Trainer, read_metrics

    cfg = load_train_config(
        [
            f"env={env}",
            "profile=tiny",
            f"out={tmp_path}",
            "steps=2",
            "prompts_per_step=2",
            "group_size=2",
            "save_every=0",
            "eval.at_end=false",
            "rollout.max_response_tokens=24",
            f"model={micro_bases[env]}",
            "progress=false",
            "num_threads=1",
        ]
    )
    Trainer(cfg).train()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(np.isfinite(r["reward/mean"]) for r in rows)


def test_kk_copy_examples_take_their_own_list_lengths():
    settings = {**warmstart.tiny_settings("kk"), "copy_aux": 0.5}
    you_meet = re.compile(r"You meet (\d+) inhabitants")

    def copy_lengths(extra):
        examples = warmstart.take(
            warmstart.example_stream("kk", {**settings, **extra}, seed=0), 300
        )
        copies = [ex for ex in examples if "So who is a knight" not in ex[0][0]]
        assert all(len(ex[1][0].splitlines()) == int(you_meet.search(ex[0][0])[1]) for ex in copies)
        return {len(ex[1][0].splitlines()) for ex in copies}, examples

    default, _ = copy_lengths({})
    assert default == set(settings["n_people"])  # the puzzles' sizes unless told otherwise
    longer, stream = copy_lengths({"copy_sizes": [6, 7, 8]})
    assert longer == {6, 7, 8}
    puzzle_sizes = {int(you_meet.search(ex[0][0])[1]) for ex in stream if "So who" in ex[0][0]}
    assert puzzle_sizes == set(settings["n_people"])  # the puzzles keep theirs
    assert "copy_sizes" not in warmstart.env_kwargs("kk", {**settings, "copy_sizes": [6]})


def test_kk_copy_examples_with_roles_train_numbers_and_names_only():
    settings = {**warmstart.tiny_settings("kk"), "copy_aux": 0.5, "copy_sizes": [4, 5]}
    stream = warmstart.take(
        warmstart.example_stream("kk", {**settings, "copy_roles": True}, seed=3), 200
    )
    copies = [ex for ex in stream if "So who is a knight" not in ex[0][0]]
    assert copies and len(copies) < len(stream)
    line = re.compile(r"\((\d)\) (\w+) is a (knight|knave)")
    roles = set()
    for ex in copies:
        names = re.search(r"inhabitants: (.*)\.", ex[0][0])[1].replace(", and ", ", ").split(", ")
        assert [text for text, trained in ex if trained] == [
            f"({i}) {name}" for i, name in enumerate(names, 1)
        ]
        assert not any(trained for _, trained in ex[2::2])  # " is a knave\n" is context
        text = "".join(t for t, _ in ex[1:])
        assert [(int(i), n) for i, n, _ in line.findall(text)] == list(enumerate(names, 1))
        assert len(text.splitlines()) == len(names) and not text.endswith("\n")
        roles |= {r for _, _, r in line.findall(text)}
    assert roles == {"knight", "knave"}
    plain = warmstart.take(warmstart.example_stream("kk", settings, seed=3), 200)
    assert all(len(ex) == 2 for ex in plain if "So who is a knight" not in ex[0][0])
    assert "copy_roles" not in warmstart.env_kwargs("kk", {**settings, "copy_roles": True})


def test_kk_copy_first_is_a_curriculum_of_copies_then_the_mix():
    settings = {**warmstart.tiny_settings("kk"), "copy_aux": 0.5, "copy_roles": True}
    stream = warmstart.take(
        warmstart.example_stream("kk", {**settings, "copy_first": 30}, seed=3), 200
    )
    is_puzzle = ["So who is a knight" in ex[0][0] for ex in stream]
    assert not any(is_puzzle[:30])  # copies only, then puzzles and copies mixed
    assert 0.3 < sum(is_puzzle[30:]) / 170 < 0.7
    assert warmstart.take(
        warmstart.example_stream("kk", {**settings, "copy_first": 0}, seed=3), 200
    ) == (
        warmstart.take(warmstart.example_stream("kk", settings, seed=3), 200)
    )  # off by default: the streams (and the presets' keys) are the ones before the option
    assert "copy_first" not in warmstart.env_kwargs("kk", {**settings, "copy_first": 30})
    with pytest.raises(ValueError, match="copy_first"):
        next(warmstart.example_stream("kk", {**settings, "copy_first": -1}))


def test_kk_copy_examples_with_think_are_laid_out_as_a_puzzles_response():
    settings = {**warmstart.tiny_settings("kk"), "copy_aux": 0.5, "copy_sizes": [4, 5]}
    settings["copy_roles"] = True
    stream = warmstart.take(
        warmstart.example_stream("kk", {**settings, "copy_think": True}, seed=3), 200
    )
    copies = [ex for ex in stream if "So who is a knight" not in ex[0][0]]
    assert copies
    for ex in copies:
        prompt = ex[0][0]
        assert prompt.endswith("Assistant: <think>")  # prefilled, as the puzzles' prompts are
        names = re.search(r"inhabitants: (.*)\.", prompt)[1].replace(", and ", ", ").split(", ")
        response = "".join(t for t, _ in ex[1:])
        lines = re.search(r"<answer>(.*)</answer>", response, re.S)[1]
        # The very text a puzzle with these names and roles has as its target.
        assert response == kk_traces.kk_response(
            {"names": names, "solution_text_format": lines, "cot": ""}
        )
        trained = [t for t, on in ex if on]
        assert trained[0] == f"The inhabitants are {join_names(names)}.</think><answer>"
        assert trained[1:-1] == [f"({i}) {name}" for i, name in enumerate(names, 1)]
        assert trained[-1] == "</answer>" and not any(" is a " in t for t in trained)
    assert warmstart.take(
        warmstart.example_stream("kk", {**settings, "copy_think": False}, seed=3), 200
    ) == (
        warmstart.take(warmstart.example_stream("kk", settings, seed=3), 200)
    )  # off by default: the presets' streams and keys do not move
    assert "copy_think" not in warmstart.env_kwargs("kk", {**settings, "copy_think": True})
    with pytest.raises(ValueError, match="copy_roles"):
        next(warmstart.example_stream("kk", {**settings, "copy_roles": False, "copy_think": True}))
