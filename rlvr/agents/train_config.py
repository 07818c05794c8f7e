"""Typed configuration of ``rlvr train`` and the profile mechanism.

A run's configuration is ``TrainConfig`` defaults <- ``rlvr/profiles/{profile}.yaml`` <-
``rlvr/profiles/{profile}_{env}.yaml`` (if present) <- command-line ``key=value`` overrides
(nested keys with dots: ``optim.lr=1e-6``, ``env_kwargs.n_people=3``). Mappings such as
``env_kwargs`` merge key by key across the layers; everything else replaces.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal, Optional

from rlvr.agents.algorithms import algorithm_names
from rlvr.agents.config import LossConfig, WeightConfig
from rlvr.config import ConfigError, deep_merge, load_yaml, merge, parse_overrides

PROFILE_DIR = Path(__file__).resolve().parents[1] / "profiles"

#: The built-in algorithms (a plugin may register more: ``algorithm_names()``).
ALGOS = tuple(algorithm_names())

#: The trainer's env names -> gymnasium ids (DESIGN section 3).
ENV_IDS = {
    "kk": "rlvr/KnightsKnaves-v0",
    "math": "rlvr/Math-v0",
    "searchqa": "rlvr/SearchQA-v0",
}


@dataclasses.dataclass
class RolloutConfig:
    """Sampling. ``max_response_tokens`` bounds a whole episode's response (generated plus, in
    multi-turn envs, observation tokens); ``stop`` strings end a turn (``</search>``)."""

    backend: Literal["hf", "vllm"] = "hf"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_prompt_tokens: int = 512
    max_response_tokens: int = 64
    #: Generated tokens per turn in multi-turn envs (0: up to the rest of the episode budget).
    max_turn_tokens: int = 0
    stop: list[str] = dataclasses.field(default_factory=list)
    vllm_gpu_memory_utilization: float = 0.4
    vllm_enforce_eager: bool = False
    #: vLLM's context length (0: max_prompt_tokens + max_response_tokens).
    vllm_max_model_len: int = 0
    #: vLLM sleep mode: the engine's GPU memory is released during the update.
    vllm_sleep_mode: bool = True
    #: GPUs of one vLLM engine (above 1, weights sync through a safetensors folder).
    tensor_parallel_size: int = 1


@dataclasses.dataclass
class OptimConfig:
    """AdamW with linear warm-up then a constant, linear or cosine schedule down to
    ``min_lr_ratio * lr``. ``grad_clip <= 0`` disables clipping (the norm is still logged)."""

    lr: float = 1e-6
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    grad_clip: float = 1.0
    warmup_steps: int = 0
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    min_lr_ratio: float = 0.0


@dataclasses.dataclass
class PeriodicEvalConfig:
    """Periodic evaluation during training (the ``eval.*`` keys) on the held-out split: greedy
    accuracy over ``n_prompts`` tasks and sampled accuracy (``samples`` draws per task at the
    rollout temperature). ``every = 0`` turns it off; ``at_end`` also evaluates after the last
    step. Sampling follows ``rollout.*``; ``rlvr eval`` has its own ``rlvr.eval.runner.EvalConfig``
    (model, groups, k, temperature, budget)."""

    every: int = 0
    n_prompts: int = 8
    samples: int = 1
    split: str = "test"
    at_end: bool = False


@dataclasses.dataclass
class TrainConfig:
    env: Literal["kk", "math", "searchqa"] = "kk"
    #: A registered algorithm (``rlvr.agents.algorithms``; ``rlvr algorithms`` lists them).
    algo: str = "grpo"
    #: Modules to import before the configuration is checked (algorithms registered outside
    #: ``rlvr``, e.g. ``plugins=[my_lab.algos]``).
    plugins: list[str] = dataclasses.field(default_factory=list)
    out: str = ""
    #: ``micro``, a local directory, or a Hugging Face hub name.
    model: str = "micro"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "auto"
    seed: int = 0
    steps: int = 10
    prompts_per_step: int = 4
    group_size: int = 4
    #: Episodes per optimizer step (0: the whole batch, one step per epoch).
    mini_batch_size: int = 0
    #: Episodes per forward/backward inside a mini-batch (0: the whole mini-batch).
    micro_batch_size: int = 0
    ppo_epochs: int = 1
    #: ``recompute``: old log-probs from the training model before the update (verl);
    #: ``rollout``: the sampler's own log-probs.
    old_logprobs: Literal["recompute", "rollout"] = "recompute"
    logprob_chunk_size: int = 256
    gradient_checkpointing: bool = False
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Reward of an episode whose env/tool/verifier raised; None: the env's minimum reward.
    error_reward: Optional[float] = None
    #: Keep a frozen reference model and log ``kl`` even when ``loss.kl_coef`` is 0.
    track_kl: bool = True
    weights: WeightConfig = dataclasses.field(default_factory=WeightConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    eval: PeriodicEvalConfig = dataclasses.field(default_factory=PeriodicEvalConfig)
    save_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    profile: str = "default"
    progress: bool = True
    tensorboard: bool = False
    #: Refuse settings whose estimated memory exceeds what is available (``memory.py``).
    memory_check: bool = True
    #: CPU threads for torch (0: leave torch's default).
    num_threads: int = 0

    def validate(self) -> None:
        """Errors naming the bad key for combinations the type system cannot express."""
        positive = {"steps": self.steps, "prompts_per_step": self.prompts_per_step,
                    "group_size": self.group_size, "ppo_epochs": self.ppo_epochs,
                    "logprob_chunk_size": self.logprob_chunk_size,
                    "rollout.max_response_tokens": self.rollout.max_response_tokens,
                    "rollout.max_prompt_tokens": self.rollout.max_prompt_tokens}
        for key, value in positive.items():
            if value < 1:
                raise ConfigError(f"{key}: must be >= 1, got {value}")
        batch = self.prompts_per_step * self.group_size
        if self.mini_batch_size < 0 or (self.mini_batch_size and batch % self.mini_batch_size):
            raise ConfigError(f"mini_batch_size: {self.mini_batch_size} must divide the batch of "
                              f"prompts_per_step * group_size = {batch} episodes (or be 0)")
        mini = self.mini_batch_size or batch
        if self.micro_batch_size < 0 or (self.micro_batch_size and mini % self.micro_batch_size):
            raise ConfigError(f"micro_batch_size: {self.micro_batch_size} must divide the "
                              f"mini-batch of {mini} episodes (or be 0)")
        from rlvr.agents.algorithms import get_algorithm, load_plugins

        try:
            load_plugins(self.plugins)
            get_algorithm(self.algo).params(self.weights)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        if self.optim.lr <= 0:
            raise ConfigError(f"optim.lr: must be > 0, got {self.optim.lr}")
        if self.optim.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps: must be >= 0, got {self.optim.warmup_steps}")
        if not 0 <= self.optim.min_lr_ratio <= 1:
            raise ConfigError(f"optim.min_lr_ratio: must be in [0, 1], got {self.optim.min_lr_ratio}")
        if self.save_every < 0 or self.keep_checkpoints < 1:
            raise ConfigError("save_every must be >= 0 and keep_checkpoints >= 1")
        if self.eval.every < 0 or self.eval.n_prompts < 1 or self.eval.samples < 1:
            raise ConfigError("eval.every must be >= 0, eval.n_prompts and eval.samples >= 1")
        if not self.out:
            raise ConfigError("out: an output directory is required (out=DIR)")


def upgrade_legacy(values: dict[str, Any]) -> dict[str, Any]:
    """Configuration files written before ``weights.scheme`` was dropped (it repeated ``algo``)
    still load: a ``weights.scheme`` equal to ``algo`` is removed, a different one is an error."""
    weights = values.get("weights")
    if isinstance(weights, dict) and "scheme" in weights:
        algo = values.get("algo", TrainConfig.algo)
        if weights["scheme"] != algo:
            raise ConfigError(f"weights.scheme: {weights['scheme']!r} disagrees with algo="
                              f"{algo!r} (weights.scheme is gone: set algo only)")
        values = {**values, "weights": {k: v for k, v in weights.items() if k != "scheme"}}
    return values


def profile_layers(profile: str, env: str, profile_dir: Path = PROFILE_DIR) -> list[Path]:
    """The YAML files a run reads, in order: ``{profile}.yaml`` then ``{profile}_{env}.yaml``."""
    base = Path(profile) if profile.endswith((".yaml", ".yml")) else profile_dir / f"{profile}.yaml"
    if not base.exists():
        avail = sorted(p.stem for p in profile_dir.glob("*.yaml") if "_" not in p.stem)
        raise ConfigError(f"profile: {profile!r} not found (available: {avail})")
    layers = [base]
    per_env = base.with_name(f"{base.stem}_{env}.yaml")
    if per_env.exists():
        layers.append(per_env)
    return layers


def load_train_config(overrides: list[str] | dict[str, Any] | None = None, *,
                      profile_dir: Path = PROFILE_DIR) -> TrainConfig:
    """Build a ``TrainConfig`` from profiles and overrides (module docstring)."""
    ov = parse_overrides(overrides) if isinstance(overrides, list) else dict(overrides or {})
    profile = str(ov.get("profile", TrainConfig.profile))
    env = str(ov.get("env", TrainConfig.env))
    if env not in ENV_IDS:
        raise ConfigError(f"env: {env!r} is not one of {sorted(ENV_IDS)}")
    values: dict[str, Any] = {}
    for path in profile_layers(profile, env, profile_dir):
        values = deep_merge(values, load_yaml(path))
    values = deep_merge(values, ov)
    values = upgrade_legacy(values)
    cfg = merge(TrainConfig(), values)
    cfg.validate()
    return cfg
