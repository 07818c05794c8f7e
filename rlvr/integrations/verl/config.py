"""One native training config (``TrainConfig``) as the overrides of verl 0.9.1's ``ppo_trainer``.

The paper profile's recipes are loaded into the typed ``TrainConfig`` once
(``rlvr.reproduce.plan``) and translated here, so the native trainer and verl read
the same values. Every key is translated explicitly; a native setting that verl cannot express
raises ``VerlTranslationError`` naming the key. What maps to what:

- batch: ``data.train_batch_size`` = prompts_per_step; ``rollout.n`` = group_size;
  ``actor.ppo_mini_batch_size`` counts prompts (verl multiplies it by ``rollout.n``,
  ``verl/workers/config/actor.py``), so it is ``mini_batch_size / group_size``; the native
  micro-batch (episodes per forward) is verl's per-GPU micro-batch;
- steps: ``trainer.total_training_steps`` = steps; verl's loop stops at the first of that and
  ``total_epochs`` (``RayPPOTrainer.fit`` in ``verl/trainer/ppo/ray_trainer.py``, which
  ``rlvr.integrations.verl.main`` runs, and the V1 ``trainer_base.py`` alike), so
  ``total_epochs`` is set to ``steps``, a bound never reached first: every epoch has at least one
  step. run.sh exports the tasks the native run visits (``steps x prompts_per_step``, or the
  whole split when it is smaller; verl then cycles over it in shuffled epochs);
- loss: clip ratios low/high/c, ``token-mean`` etc. (same names), KL as verl's KL loss with
  ``low_var_kl``, which is the k3 estimator (Schulman 2020) that the native loss uses; the
  advantage estimator's own verl settings (``AdvantageEstimator.verl``), refused without them;
- optimizer: AdamW lr, betas, eps (``override_optimizer_config``), weight decay (verl's default
  is 0.01, the native one 0.0), gradient clip, warm-up, constant/cosine schedule;
- rollout (vLLM): ``max_model_len`` = the prompt + response budget, always a number;
  ``gpu_memory_utilization`` from the run's memory plan (``rlvr.reproduce.grid.
  verl_rollout_memory``: each engine's KV cache holds its share of the step's rollouts), and
  ``engine_kwargs.vllm.hf_overrides`` removing the model config keys vLLM cannot serve
  (``dual_chunk_attention_config`` of Qwen2.5-7B-Instruct-1M); the actor's attention is
  ``sdpa`` (``ATTN_IMPLEMENTATION``);
- validation: the evaluation protocol of the setting (``rlvr.reproduce.runs.eval_config``):
  ``k`` samples at the evaluation temperature and top-p (verl's defaults are greedy, so
  ``val_kwargs.n=16`` alone would give 16 greedy copies), greedy when ``k`` is 1;
- the loss: verl's own, the plugin's policy loss or rlvr's actor loss, as the algorithm's
  registry entry says (``Algorithm.verl_path``, the decision ``verl.trainer`` reads too);
- the ``rlvr`` section read by ``rlvr.integrations.verl.main``: algorithm, the ``WeightConfig``
  fields it reads (``rlvr.agents.algorithms.resolved_fields``), weight position, and for a
  multi-turn env its agent loop's settings (search QA: the retrieval service).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlvr.agents.advantages import get_estimator
from rlvr.agents.algorithms import get_algorithm, resolved_fields
from rlvr.agents.rollout.vllm import hf_overrides
from rlvr.config import ConfigError, nest
from rlvr.envs import env_spec
from rlvr.integrations.verl.data import agent_loop_overrides, agent_loop_section

#: The verl release these configs are written and checked for (``tests/integrations``).
VERL_VERSION = "0.9.1"
#: GPUs per node of a multi-node run (an 8-GPU HGX node); fewer GPUs run on one node.
GPUS_PER_NODE = 8
#: verl's GRPO advantage epsilon (``core_algos.compute_grpo_outcome_advantage``, ``epsilon``).
VERL_ADV_EPS = 1e-6
#: The plugin's policy-loss config class (``rlvr.integrations.verl.plugin``).
PLUGIN_LOSS_CONFIG = "rlvr.integrations.verl.plugin.RlvrPolicyLossConfig"
#: verl's checkpoint contents plus Hugging Face weights (``actor/huggingface/``).
SAVE_CONTENTS = ["model", "optimizer", "extra", "hf_model"]
#: The actor's (and reference's) attention in verl's FSDP engine: torch's SDPA, so that verl's
#: vLLM extra is enough (``flash_attention_2``, verl's default, needs the flash-attn package).
ATTN_IMPLEMENTATION = "sdpa"
#: Reward function for every task (``rlvr.integrations.verl.reward``).
REWARD_PATH = "pkg://rlvr.integrations.verl.reward"


class VerlTranslationError(ConfigError):
    """A native setting that verl 0.9.1 cannot express (one line, naming the key)."""


def _refuse(key: str, value: Any, why: str) -> None:
    raise VerlTranslationError(f"{key}={value!r}: {why}")


def gpu_layout(gpus: int) -> tuple[int, int]:
    """``(n_gpus_per_node, nnodes)`` of ``gpus`` GPUs: one node up to ``GPUS_PER_NODE``."""
    if gpus < 1:
        raise VerlTranslationError(f"gpus={gpus}: a verl run needs at least one GPU")
    if gpus <= GPUS_PER_NODE:
        return gpus, 1
    if gpus % GPUS_PER_NODE:
        raise VerlTranslationError(
            f"gpus={gpus}: more than one node needs a multiple of {GPUS_PER_NODE} GPUs"
        )
    return GPUS_PER_NODE, gpus // GPUS_PER_NODE


def _batches(cfg, n_gpus: int) -> dict[str, Any]:
    if cfg.mini_batch_size and cfg.mini_batch_size % cfg.group_size:
        _refuse(
            "mini_batch_size",
            cfg.mini_batch_size,
            f"verl's ppo_mini_batch_size counts prompts: it must be a multiple of group_size "
            f"({cfg.group_size})",
        )
    mini_episodes = cfg.mini_batch_size or cfg.prompts_per_step * cfg.group_size
    if mini_episodes % n_gpus:
        _refuse(
            "mini_batch_size",
            mini_episodes,
            f"a mini-batch must split evenly over the run's {n_gpus} GPUs",
        )
    micro = cfg.micro_batch_size or mini_episodes // n_gpus
    return {
        "data.train_batch_size": cfg.prompts_per_step,
        "actor_rollout_ref.rollout.n": cfg.group_size,
        "actor_rollout_ref.actor.ppo_mini_batch_size": mini_episodes // cfg.group_size,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.actor.use_dynamic_bsz": False,
        "actor_rollout_ref.actor.ppo_epochs": cfg.ppo_epochs,
        # Forward-only passes of the same episodes: the same memory bound as the update.
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
    }


def _optimizer(cfg) -> dict[str, Any]:
    o = cfg.optim
    if o.grad_clip <= 0:
        _refuse("optim.grad_clip", o.grad_clip, "verl always clips the gradient norm")
    if o.schedule not in ("constant", "cosine"):
        _refuse("optim.schedule", o.schedule, "verl's schedules are constant and cosine")
    p = "actor_rollout_ref.actor.optim."
    return {
        p + "lr": o.lr,
        p + "weight_decay": o.weight_decay,
        p + "betas": [o.beta1, o.beta2],
        p + "override_optimizer_config": {"eps": o.eps},
        p + "clip_grad": o.grad_clip,
        p + "lr_warmup_steps": o.warmup_steps,
        p + "lr_scheduler_type": o.schedule,
        p + "min_lr_ratio": o.min_lr_ratio,
    }


def _loss(cfg) -> dict[str, Any]:
    lo = cfg.loss
    if lo.dual_clip is None:
        _refuse("loss.dual_clip", None, "verl always applies the dual clip (clip_ratio_c)")
    if abs(lo.adv_eps - VERL_ADV_EPS) > 1e-12:
        _refuse("loss.adv_eps", lo.adv_eps, f"verl's GRPO advantage uses eps {VERL_ADV_EPS}")
    estimator = get_estimator(lo.advantage)
    if estimator.verl is None:
        _refuse("loss.advantage", lo.advantage, "verl has no estimator that computes it")
    a = "actor_rollout_ref.actor."
    return {
        **estimator.verl,
        "algorithm.use_kl_in_reward": False,
        a + "clip_ratio_low": lo.clip_low,
        a + "clip_ratio_high": lo.clip_high,
        a + "clip_ratio_c": lo.dual_clip,
        a + "loss_agg_mode": lo.agg,
        a + "loss_scale_factor": lo.loss_scale_factor,
        a + "use_kl_loss": lo.kl_coef > 0,
        a + "kl_loss_coef": lo.kl_coef,
        # low_var_kl is k3, exp(ref - logp) - (ref - logp) - 1 (verl core_algos.kl_penalty).
        a + "kl_loss_type": "low_var_kl",
        a + "entropy_coeff": 0.0,
    }


def plugin_loss_config(algo: str, weights, weight_position: str) -> dict[str, Any]:
    """verl's ``policy_loss`` section of a method on the ``policy_loss`` path: the plugin's config
    class, ``loss_mode`` and the ``WeightConfig`` fields the method reads (as given: ``None``
    takes the method's default in the plugin)."""
    return {
        "_target_": PLUGIN_LOSS_CONFIG,
        "loss_mode": algo,
        "weight_position": weight_position,
        **{p.name: getattr(weights, p.name) for p in get_algorithm(algo).fields},
    }


def _policy_loss(cfg, params: dict[str, Any]) -> dict[str, Any]:
    """verl's ``policy_loss`` section: the plugin loss for weights of log-probs; verl's
    ``vanilla`` surrogate where ``verl.main`` replaces the whole actor loss."""
    p = "actor_rollout_ref.actor.policy_loss."
    algorithm = get_algorithm(cfg.algo)
    if algorithm.verl_path(params) != "policy_loss":
        out: dict[str, Any] = {p + "loss_mode": "vanilla"}
        if algorithm.select_tokens is not None:  # 80/20 selects by the training forward's entropy
            out["actor_rollout_ref.actor.calculate_entropy"] = True
        return out
    resolved = resolved_fields(cfg.weights, cfg.algo)
    section = plugin_loss_config(cfg.algo, cfg.weights, cfg.loss.weight_position)
    return {p + k: resolved.get(k, v) for k, v in section.items()}


def _rollout(cfg, memory: Mapping[str, Any] | None, hf_config: Mapping[str, Any]) -> dict[str, Any]:
    r = cfg.rollout
    if r.backend != "vllm":
        _refuse("rollout.backend", r.backend, "verl's rollouts here run on vLLM")
    if r.stop and not env_spec(cfg.env).verl.agent_loop:
        _refuse("rollout.stop", r.stop, "only an agent loop (search QA's) ends turns at strings")
    if r.max_turn_tokens:
        _refuse("rollout.max_turn_tokens", r.max_turn_tokens, "no per-turn budget on verl")
    if cfg.old_logprobs != "recompute":
        _refuse("old_logprobs", cfg.old_logprobs, "verl recomputes old log-probs")
    x = "actor_rollout_ref.rollout."
    out: dict[str, Any] = {
        x + "name": "vllm",
        x + "temperature": r.temperature,
        x + "top_p": r.top_p,
        x + "top_k": r.top_k if r.top_k > 0 else -1,
        "data.max_prompt_length": r.max_prompt_tokens,
        "data.max_response_length": r.max_response_tokens,
        x + "gpu_memory_utilization": (
            memory["gpu_memory_utilization"] if memory else r.vllm_gpu_memory_utilization
        ),
        x + "enforce_eager": r.vllm_enforce_eager,
        # Never null: verl would take the model's max_position_embeddings (1,010,000 for
        # Qwen2.5-7B-Instruct-1M; vllm_async_server.py ~1104), whose one sequence outgrows the KV
        # cache, and vLLM refuses to start. The native backend uses the same budget.
        x + "max_model_len": r.vllm_max_model_len or r.max_prompt_tokens + r.max_response_tokens,
        x + "free_cache_engine": r.vllm_sleep_mode,
        x + "tensor_model_parallel_size": r.tensor_parallel_size,
    }
    if memory and memory.get("optimizer_offload"):
        out["actor_rollout_ref.actor.fsdp_config.optimizer_offload"] = True
    overrides = hf_overrides(hf_config)
    if overrides:  # verl passes engine_kwargs.vllm to `vllm serve` (vllm_async_server.py ~287-346)
        out[x + "engine_kwargs.vllm.hf_overrides"] = overrides
    return out


def _validation(cfg, ecfg) -> dict[str, Any]:
    """Periodic validation: the setting's evaluation protocol (``ecfg``: an ``EvalConfig``)."""
    if ecfg.max_new_tokens != cfg.rollout.max_response_tokens:
        _refuse(
            "eval_max_new_tokens",
            ecfg.max_new_tokens,
            "verl validates with the training response length",
        )
    v = "actor_rollout_ref.rollout.val_kwargs."
    sampled = ecfg.k > 1 and ecfg.temperature > 0
    every = cfg.eval.every or (cfg.steps if cfg.eval.at_end else 0)
    return {
        v + "n": ecfg.k if sampled else 1,
        v + "do_sample": sampled,
        v + "temperature": ecfg.temperature if sampled else 0.0,
        v + "top_p": ecfg.top_p if sampled else 1.0,
        v + "top_k": -1,
        "trainer.test_freq": every or -1,
        # The native schedule evaluates after steps, never before the first (``eval.due``).
        "trainer.val_before_train": False,
    }


def _precision(cfg) -> dict[str, Any]:
    if cfg.dtype != "bfloat16":
        _refuse("dtype", cfg.dtype, "verl's FSDP engine trains in bfloat16 mixed precision")
    if cfg.device not in ("cuda", "auto"):
        _refuse("device", cfg.device, "verl runs on CUDA GPUs")
    if cfg.error_reward is not None:
        _refuse("error_reward", cfg.error_reward, "verl's reward loop has no error reward")
    if cfg.plugins:
        _refuse("plugins", cfg.plugins, "verl.main knows rlvr's built-in algorithms only")
    return {
        "actor_rollout_ref.model.path": cfg.model,
        # verl's model config defaults to flash_attention_2 (workers/config/model.py ~185), whose
        # flash-attn package only verl's fsdp extra brings (a CUDA build); torch's SDPA needs
        # nothing more and, on verl's packed (remove-padding) micro-batches, transformers masks
        # each sequence off the others from position_ids
        # (masking_utils.find_packed_sequence_indices).
        "actor_rollout_ref.model.override_config.attn_implementation": ATTN_IMPLEMENTATION,
        "actor_rollout_ref.model.enable_gradient_checkpointing": cfg.gradient_checkpointing,
        "actor_rollout_ref.actor.fsdp_config.dtype": "bfloat16",
        "actor_rollout_ref.rollout.dtype": "bfloat16",
        "trainer.device": "cuda",
        "data.seed": cfg.seed,
        "actor_rollout_ref.actor.data_loader_seed": cfg.seed,
        "actor_rollout_ref.rollout.seed": cfg.seed,
    }


def _rlvr_section(cfg, params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rlvr.algo": cfg.algo,
        "rlvr.params": resolved_fields(cfg.weights, cfg.algo),
        "rlvr.weight_position": cfg.loss.weight_position,
    }
    try:
        section = agent_loop_section(cfg.env, cfg.env_kwargs)
    except ValueError as e:
        raise VerlTranslationError(str(e)) from None
    if section:
        out[f"rlvr.{section[0]}"] = section[1]
        out["rlvr.max_tool_failure_rate"] = cfg.max_tool_failure_rate
    return out


def translate(
    cfg,
    ecfg,
    *,
    gpus: int,
    run_name: str,
    train_files: list[str],
    val_files: list[str],
    memory: Mapping[str, Any] | None = None,
    hf_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Flat ``dotted.key -> value`` overrides of verl's ``ppo_trainer`` for one native run.

    ``cfg``: the run's ``TrainConfig``; ``ecfg``: the setting's ``EvalConfig`` (validation
    protocol); ``gpus``: the run's GPUs (``gpu_plan.verl_gpus``); paths as the run sees them;
    ``memory``: the rollout memory plan (``gpu_plan.verl_rollout_memory(...).record()``:
    ``gpu_memory_utilization``, ``optimizer_offload``; None: the profile's value);
    ``hf_config``: what is known of the model's ``config.json`` (keys vLLM cannot serve get
    ``hf_overrides``, ``rlvr.agents.rollout.vllm.hf_overrides``).
    """
    n_gpus_per_node, nnodes = gpu_layout(gpus)
    params = cfg.weights.params(cfg.algo)
    flat: dict[str, Any] = {}
    flat.update(_precision(cfg))
    flat.update(_batches(cfg, gpus))
    flat.update(_optimizer(cfg))
    flat.update(_loss(cfg))
    flat.update(_policy_loss(cfg, params))
    flat.update(_rollout(cfg, memory, hf_config or {}))
    flat.update(_validation(cfg, ecfg))
    flat.update(
        {
            "data.train_files": list(train_files),
            "data.val_files": list(val_files),
            "reward.custom_reward_function.path": REWARD_PATH,
            "reward.custom_reward_function.name": "compute_score",
            "trainer.total_training_steps": cfg.steps,
            "trainer.total_epochs": cfg.steps,
            "trainer.save_freq": cfg.save_every or -1,
            "trainer.max_actor_ckpt_to_keep": cfg.keep_checkpoints,
            "actor_rollout_ref.actor.checkpoint.save_contents": list(SAVE_CONTENTS),
            "trainer.n_gpus_per_node": n_gpus_per_node,
            "trainer.nnodes": nnodes,
            "trainer.logger": ["console", "file"],
            "trainer.project_name": "rlvr",
            "trainer.experiment_name": run_name,
            "trainer.default_local_dir": "checkpoints",
            "trainer.resume_mode": "auto",
        }
    )
    flat.update(agent_loop_overrides(cfg.env))
    flat.update(_rlvr_section(cfg, params))
    return flat


def config_document(flat: dict[str, Any]) -> dict[str, Any]:
    """The run's Hydra primary config: verl's packaged ``ppo_trainer`` first, then these values
    (``_self_`` last, so they win), with verl's config package on the search path so the file
    composes from any folder."""
    return {
        "hydra": {"searchpath": ["pkg://verl.trainer.config"]},
        "defaults": ["ppo_trainer", "_self_"],
        **nest(flat),
    }


__all__ = [
    "ATTN_IMPLEMENTATION",
    "GPUS_PER_NODE",
    "VERL_VERSION",
    "VerlTranslationError",
    "config_document",
    "gpu_layout",
    "plugin_loss_config",
    "translate",
]
