"""Reproduction grids: ``tiny`` (CPU, built locally, the default) and ``paper`` (GPUs).

Two levels of configuration, both data, one word each:

- a *profile* (``rlvr/profiles/<name>[_<env>].yaml``, ``rlvr train profile=<name>``) is one
  training recipe: optimiser, loss, batch, sampling, environment settings;
- a *grid* (``rlvr reproduce --grid <name>``) is ``rlvr/reproduce/grids/<name>.yaml``
  (``smoke.yaml`` for ``--grid tiny --smoke``): its *settings* (a task with a base model, the
  profile it runs, and an evaluation protocol), seeds, base builds and the GRPO-SG sweep.

Every training run is ``rlvr train`` with the setting's ``train`` overrides (naming a profile)
plus ``env``/``algo``/``seed``; evaluation uses the run's own prompt format and temperature. This
module loads the grids into ``Grid``/``Setting`` with the one configuration loader
(``rlvr.config``: unknown keys and wrong types are one-line errors naming the file and key) and
holds the GPU plan and validation code.

The paper grid: the paper's exact training settings are not published in any copy we could
find; its profile (``rlvr/profiles/paper*.yaml``) holds the public recipes the paper
builds on (the Logic-RL / AR-Lopti scripts for K&K and math, verl-tool's search recipe for QA;
docs/design.md, "Recipes (paper profile)"), which reviewers say the paper's code followed.
Values that no recipe fixes are marked ``chosen`` there and listed in ``PAPER_CHOICES``.
On a machine without GPUs ``rlvr reproduce ... --grid paper`` validates every config and
prints the plan (engine, GPUs, memory, steps) instead of training. The engine follows the plan:
a setting whose run passes the trainer's own memory check (``rlvr.agents.memory``) on one of the
GPUs it names trains natively; any other is marked ``verl`` and the native path refuses it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.agents.algorithms import algorithm_names
from rlvr.agents.train_config import PROFILE_DIR, load_train_config
from rlvr.config import ConfigError, load_yaml, merge, nest
from rlvr.envs import ENVS

#: The grids, one YAML file per ``--grid`` (and ``smoke.yaml``).
GRID_DIR = Path(__file__).resolve().parent / "grids"
#: The profiles the grids name.
TRAIN_PROFILE_DIR = PROFILE_DIR
#: ``--smoke`` runs this grid, under the name of the grid it stands in for.
SMOKE_GRID, SMOKE_OF = "smoke", "tiny"


@dataclass
class Setting:
    """One task of a grid: base model, training overrides, evaluation protocol.

    ``train`` are flat ``key=value`` overrides of ``rlvr train`` (``{"profile": "tiny"}``: a
    profile by name). ``eval_sets`` maps a column name to env keyword arguments (e.g.
    one benchmark file each); empty means one set, grouped by ``group_by`` over
    ``group_values``. Evaluation runs greedy plus ``k`` samples at the training temperature over
    ``n_items`` items per group.
    """

    env: str
    model: str
    train: dict[str, Any] = field(default_factory=dict)
    group_by: str = ""
    group_values: list[Any] = field(default_factory=list)
    eval_sets: dict[str, dict[str, Any]] = field(default_factory=dict)
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    n_items: int = 100
    k: int = 8
    eval_temperature: float | None = None  # None: the training temperature
    eval_max_new_tokens: int | None = None  # None: the training response budget
    eval_batch_size: int = 64
    #: (model, GPU plan) facts used only by the paper plan
    arch: dict[str, int] = field(default_factory=dict)
    #: The GPU the paper plan sizes this setting for (a key of ``GPUS``).
    gpu: str = ""
    #: The env the setting's runs train on when it is not ``env`` (``""``: ``env``). The smoke
    #: grid trains its random micro model on ``digits``, where its groups have reward variance
    #: (on K&K and math every response scores the floor and no method would update), and
    #: evaluates on ``env`` with ``eval_env_kwargs`` alone.
    train_env: str = ""

    @property
    def run_env(self) -> str:
        """The env the setting's training runs use."""
        return self.train_env or self.env


@dataclass
class Grid:
    """A reproduction grid: ``rlvr/reproduce/grids/<name>.yaml``."""

    name: str
    settings: dict[str, Setting]
    seeds: int = 3
    #: GRPO-SG sensitivity sweep on K&K: parameter -> values (others at their defaults).
    sweep: dict[str, list[float]] = field(default_factory=dict)
    #: Seeds per non-default sweep point (0: all); the default point reuses table_kk's runs.
    sweep_seeds: int = 0
    #: Needs GPUs to train (the paper grid); without them the plan is printed instead.
    needs_gpu: bool = False
    #: Margin (absolute accuracy) within which "Reverse is close to GRPO" counts as held.
    close_margin: float = 0.05
    #: Margin (absolute accuracy) inside which an interval around zero is reported as "no effect
    #: beyond ±margin" rather than underpowered: issue 28's precision target, just above the
    #: smallest gain the paper reports (+2.7 points on math).
    no_effect_margin: float = 0.03
    #: Continued-SFT references at the RL run's compute, in forward-backward tokens.
    sft_reference: bool = True
    #: Base builds per setting (``tiny-kk``, ``tiny-kk@1``...): each method is trained on each
    #: (base seed x RL seed), so intervals cover the base's draw too. 1 for hub models.
    base_seeds: int = 1
    #: Values no public recipe fixes (our choices): config key -> the choice and why.
    choices: dict[str, str] = field(default_factory=dict)


# -- the grids -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _read_grid(stem: str) -> dict[str, Any]:
    path = GRID_DIR / f"{stem}.yaml"
    if not path.exists():
        raise ConfigError(f"--grid: {stem!r} is not one of {grid_names()}")
    return load_yaml(path)


def grid_names() -> list[str]:
    """The ``--grid`` names: one per grid file (the smoke grid runs under ``tiny``)."""
    stems = [p.stem for p in GRID_DIR.glob("*.yaml") if p.stem != SMOKE_GRID]
    return sorted(stems, key=lambda n: (n != SMOKE_OF, n))


def load_grid(stem: str, name: str | None = None) -> Grid:
    """The ``Grid`` of ``grids/<stem>.yaml`` (named ``name``, default ``stem``). Keys are the
    fields of ``Grid`` and ``Setting`` plus ``architectures`` (model -> shape, named by a
    setting's ``arch``); an unknown key or a wrong type is a one-line ``ConfigError`` naming
    the file and the key."""
    where = f"rlvr/reproduce/grids/{stem}.yaml"
    data = copy.deepcopy(_read_grid(stem))  # the cached file stays as read
    try:
        archs = data.pop("architectures", {}) or {}
        raw_settings = data.pop("settings", None)
        if not isinstance(raw_settings, dict) or not raw_settings:
            raise ConfigError("settings: a grid needs a mapping of settings")
        if "name" in data:
            raise ConfigError("name: a grid is named by its file")
        grid = merge(Grid(name or stem, {}), data)
        for key, raw in raw_settings.items():
            grid.settings[str(key)] = _setting(str(key), raw, archs)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return grid


def _setting(key: str, raw: Any, archs: dict[str, Any]) -> Setting:
    prefix = f"settings.{key}."
    if not isinstance(raw, dict):
        raise ConfigError(f"settings.{key}: expected a mapping, got {raw!r}")
    values = dict(raw)
    for required in ("env", "model"):
        if not isinstance(values.get(required), str):
            raise ConfigError(f"{prefix}{required}: required (a string)")
    for name in ("env", "train_env"):
        if name in values and values[name] not in ENVS:
            raise ConfigError(f"{prefix}{name}: {values[name]!r} is not one of {sorted(ENVS)}")
    if isinstance(values.get("arch"), str):
        if values["arch"] not in archs:
            raise ConfigError(
                f"{prefix}arch: {values['arch']!r} is not in architectures ({sorted(archs)})"
            )
        values["arch"] = dict(archs[values["arch"]])
    if values.get("gpu") and values["gpu"] not in GPUS:
        raise ConfigError(f"{prefix}gpu: {values['gpu']!r} is not one of {sorted(GPUS)}")
    base = Setting(values.pop("env"), values.pop("model"))
    return merge(base, values, prefix=prefix)


def tiny_grid(smoke: bool = False) -> Grid:
    """The CPU grid on the locally built tiny bases (``--smoke``: the micro model, 2 steps)."""
    return load_grid(SMOKE_GRID, SMOKE_OF) if smoke else load_grid("tiny")


def paper_grid() -> Grid:
    """The paper's models on GPUs (``grids/paper.yaml``, profile ``paper``)."""
    return load_grid("paper")


def get_grid(name: str, smoke: bool = False) -> Grid:
    if name not in grid_names():
        raise ConfigError(f"--grid: {name!r} is not one of {grid_names()}")
    if smoke:
        if name != SMOKE_OF:
            raise ConfigError("--smoke runs the tiny grid's code path; use --grid tiny")
        return tiny_grid(smoke=True)
    return load_grid(name)


def _grid_value(stem: str, *path: str) -> Any:
    node: Any = _read_grid(stem)
    for key in path:
        node = node[key]
    return node


# -- paper ---------------------------------------------------------------------------------------
#: Public architecture facts (the models' ``config.json`` on the Hugging Face hub), for the plan.
QWEN_ARCH = {m: dict(a) for m, a in _grid_value("paper", "architectures").items()}
#: Values of the paper grid that no public recipe fixes (our choices, stated in docs).
PAPER_CHOICES = dict(_grid_value("paper", "choices"))
#: Column -> the math env's dataset name (``rlvr.envs.math.data.DATASETS``).
PAPER_MATH_SETS = {
    n: s["dataset"] for n, s in _grid_value("paper", "settings", "math", "eval_sets").items()
}
#: Column -> FlashRAG subset: Search-R1's seven evaluation sets (test split, dev where FlashRAG
#: has no test split: ``rlvr.envs.searchqa.data.flashrag_split``).
PAPER_QA_SETS = {
    n: s["dataset"] for n, s in _grid_value("paper", "settings", "searchqa", "eval_sets").items()
}
#: Search-R1's retrieval service (``rlvr retrieval-serve`` over an e5 index of wiki-18, or
#: Search-R1's own ``retrieval_server.py``), as the paper's search-QA profile names it.
QA_RETRIEVER = load_yaml(TRAIN_PROFILE_DIR / "paper_searchqa.yaml")["env_kwargs"]["retriever"]

#: GPUs a paper setting can name: memory in GiB as ``torch.cuda.mem_get_info`` reports it.
GPUS = {"H200-141GB": 139.8, "H100-80GB": 79.6}
#: Kept free on every GPU: the CUDA context, NCCL buffers and allocator slack.
GPU_RESERVE_GIB = 1.0


# -- validation and the GPU plan -----------------------------------------------------------------
def setting_overrides(
    setting: Setting, algo: str, seed: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Flat ``key=value`` overrides of one training run of ``setting``."""
    return {
        **setting.train,
        "env": setting.run_env,
        "algo": algo,
        "model": setting.model,
        "seed": seed,
        **(extra or {}),
    }


def param_count(arch: dict[str, int]) -> int:
    """Parameters of a Qwen2 decoder (attention with biases on q/k/v, SwiGLU MLP; the output head
    is tied to the embeddings when ``arch["tied"]``, as in Qwen2.5-3B)."""
    h, L, inter, vocab = arch["hidden"], arch["layers"], arch["inter"], arch["vocab"]
    head_dim = h // arch["heads"]
    kv = arch["kv_heads"] * head_dim
    attn = h * h + 2 * h * kv + (h + 2 * kv) + h * h
    mlp = 3 * h * inter
    return L * (attn + mlp + 2 * h) + (1 if arch.get("tied") else 2) * vocab * h + h


def meta_model(arch: dict[str, int]):
    """A Qwen2 decoder of ``arch`` on the meta device (shapes only, no memory), with fp32
    parameters as the trainer keeps them (bf16/fp16 runs are mixed precision)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        hidden_size=arch["hidden"],
        num_hidden_layers=arch["layers"],
        num_attention_heads=arch["heads"],
        num_key_value_heads=arch["kv_heads"],
        intermediate_size=arch["inter"],
        vocab_size=arch["vocab"],
        tie_word_embeddings=bool(arch.get("tied")),
    )
    with torch.device("meta"):
        return Qwen2ForCausalLM(cfg)


def native_estimate(setting: Setting, cfg):
    """The trainer's own estimate (``rlvr.agents.memory.estimate_for_config``) of ``cfg`` on one
    of the GPUs ``setting`` names."""
    import torch

    from rlvr.agents.memory import estimate_for_config

    total = int(GPUS[setting.gpu] * 2**30)
    return estimate_for_config(
        meta_model(setting.arch),
        cfg,
        torch.device("cuda"),
        available=total - int(GPU_RESERVE_GIB * 2**30),
        device_total=total,
    )


def verl_gpus(setting: Setting, cfg) -> int:
    """GPUs of a verl (FSDP) run: 16 B/param of mixed-precision AdamW sharded across GPUs
    (Rajbhandari et al. 2020, ZeRO section 3), plus 2 B/param each for the bf16 reference and
    vLLM copies, the KV cache of one rollout batch and the activations of a micro-batch, at 85%
    of each GPU; rounded up to a power of two, so that a batch of 2^k rollouts divides over
    them."""
    n = param_count(setting.arch)
    length = cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
    head_dim = setting.arch["hidden"] // setting.arch["heads"]
    kv_cache = (
        2
        * cfg.prompts_per_step
        * cfg.group_size
        * length
        * setting.arch["layers"]
        * setting.arch["kv_heads"]
        * head_dim
        * 2
    )
    acts = (
        (cfg.micro_batch_size or 4)
        * length
        * setting.arch["hidden"]
        * setting.arch["layers"]
        * 2
        * 2
    )
    total = n * (16 + 2 + 2) + kv_cache + acts
    need = max(2, math.ceil(total / (0.85 * GPUS[setting.gpu] * 2**30)))
    return 2 ** math.ceil(math.log2(need))


#: vLLM's memory beyond its weights and KV cache: the activation peak of its profiling run, CUDA
#: graphs, sampler and NCCL buffers. An allowance: vLLM measures them at start-up and sizes the KV
#: cache from what ``gpu_memory_utilization`` leaves after weights and these (vLLM
#: ``v1/worker/gpu_worker.py``, ``determine_available_memory``).
VLLM_OVERHEAD_GIB = 4.0


def kv_bytes_per_token(arch: dict[str, int]) -> int:
    """KV cache of one token in bf16: K and V x layers x kv_heads x head_dim x 2 bytes."""
    head_dim = arch["hidden"] // arch["heads"]
    return 2 * arch["layers"] * arch["kv_heads"] * head_dim * 2


@dataclass(frozen=True)
class RolloutMemory:
    """One GPU while vLLM generates a step's rollouts (bytes): vLLM's share
    (``gpu_memory_utilization`` of the GPU: bf16 weights, the KV cache, its overhead) beside what
    the trainer keeps there meanwhile."""

    gpu: str
    #: vLLM engines (GPUs / tensor-parallel size) and the rollouts each holds at once.
    engines: int
    sequences: int
    #: prompt + response budget (``max_model_len``).
    tokens: int
    kv_per_token: int
    tensor_parallel: int
    weights: int
    overhead: int
    #: Kept on the GPU by the trainer during rollouts (sharded master weights, AdamW unless
    #: offloaded, the reference).
    trainer: int
    total: int
    gpu_memory_utilization: float
    optimizer_offload: bool = False

    @property
    def kv_budget(self) -> int:
        """KV cache bytes on one GPU at this ``gpu_memory_utilization``."""
        return int(self.gpu_memory_utilization * self.total) - self.weights - self.overhead

    @property
    def kv_sequences(self) -> int:
        """Full-length sequences (``tokens`` each) one engine's KV cache holds."""
        per_seq = self.tokens * self.kv_per_token // self.tensor_parallel
        return max(0, self.kv_budget) // per_seq

    @property
    def fits(self) -> bool:
        """vLLM's share plus the trainer's within the GPU (``GPU_RESERVE_GIB`` kept free), and a
        KV cache of at least one full-length sequence (vLLM refuses to start otherwise)."""
        used = self.trainer + self.gpu_memory_utilization * self.total
        return used <= self.total - GPU_RESERVE_GIB * 2**30 and self.kv_sequences >= 1

    def record(self) -> dict[str, Any]:
        gib = 2**30
        return {
            "gpu": self.gpu,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "vllm_weights_GiB": round(self.weights / gib, 2),
            "kv_cache_GiB": round(self.kv_budget / gib, 2),
            "kv_bytes_per_token": self.kv_per_token,
            "kv_sequences": self.kv_sequences,
            "sequences_per_engine": self.sequences,
            "max_model_len": self.tokens,
            "vllm_overhead_GiB": VLLM_OVERHEAD_GIB,
            "trainer_resident_GiB": round(self.trainer / gib, 2),
            "optimizer_offload": self.optimizer_offload,
        }


def _rollout_memory(setting: Setting, cfg, gpus: int, trainer: int, gmu: float | None, **kw):
    n = param_count(setting.arch)
    tp = cfg.rollout.tensor_parallel_size
    engines = max(1, gpus // tp)
    batch = cfg.prompts_per_step * cfg.group_size
    tokens = cfg.rollout.vllm_max_model_len or (
        cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
    )
    per_token = kv_bytes_per_token(setting.arch)
    sequences = -(-batch // engines)
    weights = 2 * n // tp
    overhead = int(VLLM_OVERHEAD_GIB * 2**30)
    total = int(GPUS[setting.gpu] * 2**30)
    if gmu is None:  # the share that holds every rollout of the engine at full length
        need = weights + overhead + sequences * tokens * per_token // tp
        gmu = math.ceil(100 * need / total) / 100
    return RolloutMemory(
        gpu=setting.gpu,
        engines=engines,
        sequences=sequences,
        tokens=tokens,
        kv_per_token=per_token,
        tensor_parallel=tp,
        weights=weights,
        overhead=overhead,
        trainer=trainer,
        total=total,
        gpu_memory_utilization=gmu,
        **kw,
    )


def verl_rollout_memory(setting: Setting, cfg, gpus: int) -> RolloutMemory:
    """The memory plan of a verl run's rollouts on ``gpus`` GPUs: ``gpu_memory_utilization``
    sized so that each vLLM engine's KV cache holds its share of the step's rollouts at the full
    prompt + response length (no preemption), beside the FSDP shards that stay on the GPU
    (fp32 master weights 4 B/param, AdamW 8 B/param, the bf16 reference 2 B/param when the KL
    term is on, over ``gpus``; gradients are freed after each step). AdamW moves to CPU memory
    (``optimizer_offload``) only when both do not fit otherwise."""
    n = param_count(setting.arch)
    ref = 2 * n if cfg.loss.kl_coef > 0 else 0
    for offload in (False, True):
        trainer = (4 * n + (0 if offload else 8 * n) + ref) // gpus
        plan = _rollout_memory(setting, cfg, gpus, trainer, None, optimizer_offload=offload)
        if plan.fits:
            return plan
    return plan


def native_rollout_memory(setting: Setting, cfg) -> RolloutMemory:
    """The native run's rollouts on one GPU at the profile's ``gpu_memory_utilization`` (the
    trainer keeps its fp32 weights, gradients and AdamW, 16 B/param, and the reference;
    ``rlvr.agents.memory``): the KV cache that share leaves."""
    n = param_count(setting.arch)
    ref = 2 * n if cfg.loss.kl_coef > 0 else 0
    return _rollout_memory(setting, cfg, 1, 16 * n + ref, cfg.rollout.vllm_gpu_memory_utilization)


def plan_rows(grid: Grid) -> list[dict[str, Any]]:
    """One row per setting: the engine (native on one GPU when the trainer's own memory check
    passes on the GPU the setting names, else verl), GPUs, peak memory, steps, rollouts, and
    the rollout engine's memory (``gpu_memory_utilization``, the KV cache it leaves per GPU and
    how many full-length rollouts that holds out of each engine's share)."""
    rows = []
    for key, s in grid.settings.items():
        if not s.arch:
            continue
        cfg = load_train_config(nest(setting_overrides(s, "grpo", 0, {"out": "plan"})))
        est = native_estimate(s, cfg)
        native = est.total <= est.available
        gpus = 1 if native else verl_gpus(s, cfg)
        mem = native_rollout_memory(s, cfg) if native else verl_rollout_memory(s, cfg, gpus)
        rows.append(
            {
                "setting": key,
                "model": s.model,
                "params_B": round(param_count(s.arch) / 1e9, 2),
                "engine": "native" if native else "verl",
                "gpus": f"{gpus}x {s.gpu}",
                "native_peak_GiB": round(est.total / 2**30, 1),
                "micro_batch": cfg.micro_batch_size,
                "steps": cfg.steps,
                "rollouts_per_step": cfg.prompts_per_step * cfg.group_size,
                "max_tokens_per_rollout": cfg.rollout.max_prompt_tokens
                + cfg.rollout.max_response_tokens,
                "vllm_gmu": mem.gpu_memory_utilization,
                "kv_GiB_per_gpu": round(mem.kv_budget / 2**30, 1),
                "kv_holds": f"{min(mem.kv_sequences, mem.sequences)}/{mem.sequences}",
                "seeds": grid.seeds,
            }
        )
    return rows


PLAN_NOTE = (
    "Engine: `native` runs fit one GPU by the trainer's own memory check "
    "(rlvr.agents.memory.estimate_for_config: fp32 master weights, gradients and AdamW, the "
    "reference, bf16 activations of one micro-batch with gradient checkpointing, and the vLLM "
    "engine, asleep during the update); `verl` runs do not (native_peak_GiB is above the GPU) "
    "and are sized for FSDP sharding (rlvr.reproduce.grid.verl_gpus); the native trainer "
    "refuses them. vllm_gmu: vLLM's gpu_memory_utilization (verl: sized so that each engine's "
    "KV cache holds its share of a step's rollouts at full length beside the FSDP shards, "
    "rlvr.reproduce.grid.verl_rollout_memory; native: the profile's); kv_GiB_per_gpu: the KV "
    "cache it leaves after the bf16 weights and vLLM's overhead; kv_holds: full-length rollouts "
    "that cache holds of each engine's share (fewer: vLLM queues the rest)."
)


def check_engines(grid: Grid) -> None:
    """Refuse, in one line, a GPU reproduction that includes settings only verl can train."""
    verl = [r["setting"] for r in plan_rows(grid) if r["engine"] == "verl"]
    if verl:
        from rlvr.agents.memory import VERL_ROUTE

        raise ConfigError(
            f"grid {grid.name}: settings {', '.join(verl)} do not fit one GPU "
            f"(see the plan printed without GPUs); {VERL_ROUTE}"
        )


def validate(grid: Grid, algos: tuple[str, ...] | None = None) -> int:
    """Load every training config of ``grid`` (every registered algorithm by default) through
    the trainer's typed config (errors name the bad key); returns how many were checked."""
    count = 0
    for key, s in grid.settings.items():
        for algo in algos or algorithm_names():
            try:
                load_train_config(nest(setting_overrides(s, algo, 0, {"out": "validate"})))
            except ConfigError as e:
                raise ConfigError(f"grid {grid.name}, setting {key}, algo {algo}: {e}") from e
            count += 1
    return count


def replace(setting: Setting, **changes) -> Setting:
    return dataclasses.replace(setting, **changes)
