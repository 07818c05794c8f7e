"""Typed configuration of ``rlvr train`` and the profile mechanism.

A run's configuration is ``TrainConfig`` defaults <- ``rlvr/profiles/{profile}.yaml`` <-
``rlvr/profiles/{profile}_{env}.yaml`` (if present) <- command-line ``key=value`` overrides
(nested keys with dots: ``optim.lr=1e-6``, ``env_kwargs.n_people=3``). Mappings such as
``env_kwargs`` merge key by key across the layers; everything else replaces. A layer named as the
profile (``profile=paper_kk``) is that profile for that env (``profile=paper env=kk``); a base
file may name the env its runs default to (``env: digits`` in ``micro.yaml``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal, Optional

from rlvr.agents.advantages import get_estimator
from rlvr.agents.algorithms import WeightConfig, algorithm_names, get_algorithm, load_plugins
from rlvr.config import (
    UNKEYED,
    ConfigError,
    check_interval,
    did_you_mean,
    layered,
    load_yaml,
    merge,
    parse_overrides,
    unkeyed,
)
from rlvr.device import check_device
from rlvr.envs import ENVS, env_spec, lift_env_keys, require_env
from rlvr.envs.base import MAX_TOOL_FAILURE_RATE, check_failure_rate
from rlvr.eval.config import EvalConfig
from rlvr.models.prompt_formats import with_format
from rlvr.repro import check_threads

PROFILE_DIR = Path(__file__).resolve().parents[1] / "profiles"

#: The built-in algorithms (a plugin may register more: ``algorithm_names()``).
ALGOS = tuple(algorithm_names())


@dataclasses.dataclass
class LossConfig:
    """Arguments of ``rlvr.agents.losses.policy_loss`` (K&K recipe values in docs/design.md §6:
    clip 0.2/0.24 is the recipe's asymmetric clip; defaults here are the symmetric 0.2)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    kl_coef: float = 0.0
    agg: Literal[
        "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
    ] = "token-mean"
    loss_scale_factor: float | None = None
    #: Where the token weight enters the surrogate (``rlvr.agents.losses``): on the clipped
    #: surrogate (GRPO-SG's text) or on the ratio inside min and clip (TR-GRPO's Eq. 9 as
    #: reviewed); ``docs/algorithms.md``, "Where the weight enters".
    weight_position: Literal["surrogate", "ratio"] = "surrogate"
    #: How the token weight enters the KL term (``rlvr.agents.method_loss.KL_WEIGHTINGS``).
    kl_weighting: Literal["none", "term", "ratio"] = "none"
    #: A registered advantage estimator (``rlvr.agents.advantages``: ``grpo``, ``drgrpo``...).
    advantage: str = "grpo"
    adv_eps: float = 1e-6

    def policy_loss_kwargs(self) -> dict:
        """Keyword arguments for ``policy_loss`` (everything but the tensors)."""
        return {
            "clip_low": self.clip_low,
            "clip_high": self.clip_high,
            "dual_clip": self.dual_clip,
            "kl_coef": self.kl_coef,
            "agg": self.agg,
            "loss_scale_factor": self.loss_scale_factor,
            "weight_position": self.weight_position,
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
class EvalScheduleConfig:
    """When the trainer evaluates its policy, and on how many tasks (the ``eval.*`` keys): every
    ``every`` steps (0: never) and, with ``at_end``, after the last step; greedy plus ``samples``
    draws on each of the first ``n_prompts`` tasks of the env's ``split``. The evaluation itself
    is a ``rlvr.eval.runner.EvalConfig``, the type ``rlvr eval`` runs, built from this schedule
    and the ``rollout.*`` settings by ``periodic_eval_config``."""

    every: int = 0
    n_prompts: int = 8
    samples: int = 1
    split: str = "test"
    at_end: bool = False

    def due(self, step: int, last: int) -> bool:
        """Whether the trainer evaluates after step ``step`` of ``last``."""
        return bool(self.every and step % self.every == 0 or (self.at_end and step == last))


@dataclasses.dataclass
class TrainConfig:
    #: A registered environment (``rlvr.envs``).
    env: str = "kk"
    #: A registered algorithm (``rlvr.agents.algorithms``; ``rlvr algorithms`` lists them).
    algo: str = "grpo"
    #: Modules to import before the configuration is checked (algorithms registered outside
    #: ``rlvr``, e.g. ``plugins=[my_lab.algos]``).
    plugins: list[str] = dataclasses.field(default_factory=list)
    #: Fields declared ``unkeyed`` change nothing a run computes: no run key covers them.
    out: str = unkeyed("")
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
    #: Every this many steps, the cosine between the method's gradient and GRPO's on the same
    #: first mini-batch and the ratio of their norms (one extra forward and backward, never
    #: stepped with; the update itself is unchanged bit for bit). 0: never.
    grad_cosine_every: int = 10
    weights: WeightConfig = dataclasses.field(default_factory=WeightConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    eval: EvalScheduleConfig = dataclasses.field(default_factory=EvalScheduleConfig)
    save_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = unkeyed(False)
    profile: str = "default"
    progress: bool = unkeyed(True)
    #: Also write ``<out>/tensorboard`` (as ``report_to=[tensorboard]``).
    tensorboard: bool = unkeyed(False)
    #: Trackers that get every ``metrics.jsonl`` record (``rlvr.training.trackers``).
    report_to: list[Literal["tensorboard", "wandb"]] = dataclasses.field(
        default_factory=list, metadata=UNKEYED
    )
    #: Refuse settings whose estimated memory exceeds what is available (``memory.py``).
    memory_check: bool = True
    #: CPU threads for torch (0: leave torch's default).
    num_threads: int = 0
    #: Stop the run when more than this share of a step's (or an evaluation's) tool calls fail:
    #: a retrieval service down or out of reach (``agents.metrics.check_tool_failures``).
    max_tool_failure_rate: float = unkeyed(MAX_TOOL_FAILURE_RATE)

    def validate(self) -> None:
        """One ``ConfigError`` naming the first bad key and its accepted range."""
        r, o, lo = self.rollout, self.optim, self.loss
        ranges = [  # key, value, accepted interval (NaN and infinities fall outside every one)
            ("steps", self.steps, "[1, inf)"),
            ("prompts_per_step", self.prompts_per_step, "[1, inf)"),
            ("group_size", self.group_size, "[1, inf)"),
            ("ppo_epochs", self.ppo_epochs, "[1, inf)"),
            ("mini_batch_size", self.mini_batch_size, "[0, inf)"),
            ("micro_batch_size", self.micro_batch_size, "[0, inf)"),
            ("logprob_chunk_size", self.logprob_chunk_size, "[1, inf)"),
            ("num_threads", self.num_threads, "[0, inf)"),
            ("save_every", self.save_every, "[0, inf)"),
            ("grad_cosine_every", self.grad_cosine_every, "[0, inf)"),
            ("keep_checkpoints", self.keep_checkpoints, "[1, inf)"),
            (
                "error_reward",
                0.0 if self.error_reward is None else self.error_reward,
                "(-inf, inf)",
            ),
            ("rollout.temperature", r.temperature, "[0, inf)"),
            ("rollout.top_p", r.top_p, "(0, 1]"),
            ("rollout.top_k", r.top_k, "[0, inf)"),
            ("rollout.max_prompt_tokens", r.max_prompt_tokens, "[1, inf)"),
            ("rollout.max_response_tokens", r.max_response_tokens, "[1, inf)"),
            ("rollout.max_turn_tokens", r.max_turn_tokens, "[0, inf)"),
            ("rollout.vllm_gpu_memory_utilization", r.vllm_gpu_memory_utilization, "(0, 1]"),
            ("rollout.vllm_max_model_len", r.vllm_max_model_len, "[0, inf)"),
            ("rollout.tensor_parallel_size", r.tensor_parallel_size, "[1, inf)"),
            ("optim.lr", o.lr, "(0, inf)"),
            ("optim.weight_decay", o.weight_decay, "[0, inf)"),
            ("optim.beta1", o.beta1, "[0, 1)"),
            ("optim.beta2", o.beta2, "[0, 1)"),
            ("optim.eps", o.eps, "(0, inf)"),
            ("optim.grad_clip", o.grad_clip, "(-inf, inf)"),
            ("optim.warmup_steps", o.warmup_steps, "[0, inf)"),
            ("optim.min_lr_ratio", o.min_lr_ratio, "[0, 1]"),
            ("loss.clip_low", lo.clip_low, "[0, 1)"),
            ("loss.clip_high", lo.clip_high, "[0, inf)"),
            ("loss.dual_clip", 2.0 if lo.dual_clip is None else lo.dual_clip, "(1, inf)"),
            ("loss.kl_coef", lo.kl_coef, "[0, inf)"),
            ("loss.adv_eps", lo.adv_eps, "[0, inf)"),
            (
                "loss.loss_scale_factor",
                1.0 if lo.loss_scale_factor is None else lo.loss_scale_factor,
                "(0, inf)",
            ),
            ("eval.every", self.eval.every, "[0, inf)"),
            ("eval.n_prompts", self.eval.n_prompts, "[1, inf)"),
            ("eval.samples", self.eval.samples, "[1, inf)"),
        ]
        load_user_plugins(self.plugins)
        require_env(self.env)
        for key, value, interval in ranges:
            check_interval(key, value, interval)
        check_failure_rate(self.max_tool_failure_rate)
        self.weights.check()  # every weights.* field in the interval its method declares
        batch = self.prompts_per_step * self.group_size
        if self.mini_batch_size and batch % self.mini_batch_size:
            raise ConfigError(
                f"mini_batch_size: {self.mini_batch_size} must divide the batch of "
                f"prompts_per_step * group_size = {batch} episodes (or be 0)"
            )
        mini = self.mini_batch_size or batch
        if self.micro_batch_size and mini % self.micro_batch_size:
            raise ConfigError(
                f"micro_batch_size: {self.micro_batch_size} must divide the "
                f"mini-batch of {mini} episodes (or be 0)"
            )
        try:
            algorithm = get_algorithm(self.algo)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        try:
            get_estimator(lo.advantage)
        except ValueError as e:
            raise ConfigError(f"loss.advantage: {e}") from None
        try:
            algorithm.parameters(self.weights)  # and the checks across them (GRPO-SG's L <= U)
        except ValueError as e:
            raise ConfigError(f"weights.{e}") from None
        if self.eval.every or self.eval.at_end:
            try:
                periodic_eval_config(self)
            except ValueError as e:
                raise ConfigError(
                    f"eval: the periodic evaluation is not a valid runner EvalConfig: {e} "
                    "(it samples with the rollout.* settings)"
                ) from None
        if not self.out:
            raise ConfigError("out: an output directory is required (out=DIR)")
        check_device(self.device)
        if self.device in ("cpu", "auto"):
            try:
                check_threads(self.num_threads, "num_threads")
            except ValueError as e:
                raise ConfigError(str(e)) from None
        check_model(self.model)
        env_spec(self.env).check_kwargs(self.env_kwargs)


def periodic_eval_config(cfg: TrainConfig):
    """The ``rlvr.eval.runner.EvalConfig`` of the trainer's periodic evaluation: the schedule's
    tasks (``n_items`` = ``eval.n_prompts`` of ``eval.split``), greedy plus ``k`` =
    ``eval.samples`` draws sampled as training samples (``rollout.*``: temperature, top-p, stop
    strings, the episode budget), played as one batch. The trainer plays it on its live policy
    and env pool (``Trainer.evaluate``); ``rlvr eval`` would load ``model`` instead."""
    ec, r = cfg.eval, cfg.rollout
    return EvalConfig(
        model=cfg.model,
        env=cfg.env,
        env_kwargs=dict(cfg.env_kwargs),
        split=ec.split,
        n_items=ec.n_prompts,
        greedy=True,
        k=ec.samples,
        temperature=r.temperature,
        top_p=r.top_p,
        max_new_tokens=r.max_response_tokens,
        stop=list(r.stop),
        batch_size=ec.n_prompts * (1 + ec.samples),
        seed=cfg.seed,
        backend="rollout",
        device=cfg.device,
    )


def check_model(model: str) -> None:
    """``model`` names something that can load: a local name, a folder, or a hub id
    (``rlvr.models.names``; one line listing the local names). Whether a hub id can be fetched
    from here is asked where the model loads (``check_hub_model``), not when a configuration is
    validated: a GPU grid is validated on machines that never load its models."""
    from rlvr.models.names import check_model_name

    check_model_name(model)


def load_user_plugins(modules) -> None:
    """``plugins=``: modules that register algorithms or environments, imported first (the
    working directory is importable under the ``rlvr`` command, as under ``python -m``)."""
    if not isinstance(modules, (list, tuple)):
        modules = [modules]
    try:
        load_plugins([str(m) for m in modules])
    except ValueError as e:
        raise ConfigError(str(e)) from None


def with_model_format(values: dict[str, Any], env: str) -> dict[str, Any]:
    """``values`` with the prompt format the model carries under the profile's and the command
    line's ``env_kwargs`` (``rlvr.models.prompt_formats.with_format``: a tiny base trains on the
    prompts it was warm-started on whichever way it is named; a contradiction is one line)."""
    model = str(values.get("model", TrainConfig.model))
    kwargs, fmt = with_format(model, env, values.get("env_kwargs") or {})
    return values if fmt is None else {**values, "env_kwargs": kwargs}


def upgrade_legacy(values: dict[str, Any]) -> dict[str, Any]:
    """Configuration files written before ``weights.scheme`` was dropped (it repeated ``algo``)
    still load: a ``weights.scheme`` equal to ``algo`` is removed, a different one is an error."""
    weights = values.get("weights")
    if isinstance(weights, dict) and "scheme" in weights:
        algo = values.get("algo", TrainConfig.algo)
        if weights["scheme"] != algo:
            raise ConfigError(
                f"weights.scheme: {weights['scheme']!r} disagrees with algo="
                f"{algo!r} (weights.scheme is gone: set algo only)"
            )
        values = {**values, "weights": {k: v for k, v in weights.items() if k != "scheme"}}
    return values


def profile_layers(profile: str, env: str, profile_dir: Path = PROFILE_DIR) -> list[Path]:
    """The YAML files a run reads, in order: ``{profile}.yaml`` then ``{profile}_{env}.yaml``.

    A per-env layer named as the profile (``paper_kk``) stands for its profile with that layer
    (``paper.yaml`` then ``paper_kk.yaml``), for the env the layer is written for."""
    base = Path(profile) if profile.endswith((".yaml", ".yml")) else profile_dir / f"{profile}.yaml"
    if not base.exists():
        names = available_profiles(profile_dir)
        raise ConfigError(
            f"profile: {profile!r} not found{did_you_mean(profile, names)} (available: {names})"
        )
    head, layer_env = layer_of(base)
    if head is not None:
        if layer_env != env:
            raise ConfigError(
                f"profile: {profile!r} is the {layer_env} layer of profile {head.stem!r}, "
                f"not for env={env} (use profile={head.stem} env={env})"
            )
        return [head, base]
    layers = [base]
    per_env = base.with_name(f"{base.stem}_{env}.yaml")
    if per_env.exists():
        layers.append(per_env)
    return layers


def layer_of(path: Path) -> tuple[Path | None, str]:
    """``(paper.yaml, "kk")`` when ``path`` is the per-env layer ``paper_kk.yaml`` of an existing
    profile, else ``(None, "")``."""
    head, _, env = path.stem.rpartition("_")
    parent = path.with_name(f"{head}.yaml")
    if head and env in ENVS and parent.exists():
        return parent, env
    return None, ""


def available_profiles(profile_dir: Path = PROFILE_DIR) -> list[str]:
    """Names ``profile=`` accepts on its own (per-env layers such as ``paper_kk`` also work)."""
    return sorted(p.stem for p in profile_dir.glob("*.yaml") if layer_of(p)[0] is None)


def profile_env(profile: str, profile_dir: Path = PROFILE_DIR) -> str:
    """The env a run of ``profile`` takes when no ``env=`` is given: the env a per-env layer
    named as the profile is for (``paper_math`` -> ``math``), else the ``env`` its base file
    names (``micro.yaml``: ``digits``, the task a random model has reward variance on);
    ``""`` when neither says (``TrainConfig.env``)."""
    path = Path(profile) if profile.endswith((".yaml", ".yml")) else profile_dir / f"{profile}.yaml"
    env = layer_of(path)[1]
    if env or not path.is_file():
        return env
    return str(load_yaml(path).get("env") or "")


def load_train_config(
    overrides: list[str] | dict[str, Any] | None = None, *, profile_dir: Path = PROFILE_DIR
) -> TrainConfig:
    """Build a ``TrainConfig`` from profiles and overrides (module docstring)."""
    ov = parse_overrides(overrides) if isinstance(overrides, list) else dict(overrides or {})
    load_user_plugins(ov.get("plugins") or [])  # a plugin may register the env named below
    profile = str(ov.get("profile", TrainConfig.profile))
    if "env" not in ov and profile_env(profile, profile_dir):
        ov["env"] = profile_env(profile, profile_dir)
    env = str(ov.get("env", TrainConfig.env))
    require_env(env)
    values = upgrade_legacy(layered(profile_layers(profile, env, profile_dir), ov))
    values = lift_env_keys(values, env)
    values = with_model_format(values, env)
    cfg = merge(TrainConfig(), values)
    cfg.validate()
    return cfg
