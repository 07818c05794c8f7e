"""Reproduction profiles: ``tiny`` (CPU, built locally, the default) and ``paper`` (GPUs).

A profile lists *settings* (a task with a base model, training overrides and an evaluation
protocol). Every training run is ``rlvr train`` with the profile's overrides plus
``env``/``algo``/``seed``; evaluation uses the run's own prompt format and temperature.

The paper profile: the paper's exact training settings are not published in any copy we could
find; its configs are the public recipes the paper builds on (the Logic-RL / AR-Lopti scripts for
K&K and math, verl-tool's search recipe for QA; DESIGN section 6), which reviewers say the
paper's code followed. Values that no recipe fixes are marked ``chosen`` in ``PAPER_CHOICES``.
On a machine without GPUs ``rlvr reproduce ... --profile paper`` validates every config and
prints the plan (GPUs, memory, steps) instead of training.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from rlvr.config import ConfigError

#: The six methods of the K&K table (DESIGN section 5), in the paper's order.
KK_METHODS = ("grpo", "entropy_top", "ar", "lopti", "reverse", "grpo_sg")


@dataclass
class Setting:
    """One task of a profile: base model, training overrides, evaluation protocol.

    ``eval_sets`` maps a column name to env keyword arguments (e.g. one benchmark file each);
    empty means one set, grouped by ``group_by`` over ``group_values``. Evaluation runs greedy
    plus ``k`` samples at the training temperature over ``n_items`` items per group.
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


@dataclass
class Profile:
    name: str
    settings: dict[str, Setting]
    seeds: int = 3
    #: GRPO-SG sensitivity sweep on K&K: parameter -> values (others at their defaults).
    sweep: dict[str, list[float]] = field(default_factory=dict)
    #: Seeds per non-default sweep point (0: all); the default point reuses table_kk's runs.
    sweep_seeds: int = 0
    #: Needs GPUs to train (the paper profile); without them the plan is printed instead.
    needs_gpu: bool = False
    #: Margin (absolute accuracy) within which "Reverse is close to GRPO" counts as held.
    close_margin: float = 0.05
    #: Steps of continued SFT are matched to the RL run's wall time (issue 6: "equal compute").
    sft_reference: bool = True

    def setting(self, env: str) -> Setting:
        """The first setting of ``env`` (fig3/fig4 use one model per task)."""
        for s in self.settings.values():
            if s.env == env:
                return s
        raise KeyError(f"profile {self.name!r} has no setting for env {env!r}")


# -- tiny ----------------------------------------------------------------------------------------
def tiny_profile(smoke: bool = False) -> Profile:
    """CPU profile on the locally built tiny bases (``--smoke``: the micro model, 2 steps)."""
    if smoke:
        micro_train = {"profile": "micro", "steps": 2, "save_every": 1, "progress": False,
                       "eval.every": 0}
        common = dict(n_items=2, k=2, eval_max_new_tokens=12, eval_batch_size=16)
        settings = {
            "kk": Setting("kk", "micro", dict(micro_train), group_by="n_people",
                          group_values=[3, 4], **common),
            "math": Setting("math", "micro", dict(micro_train), group_by=MATH_GROUP,
                            group_values=MATH_GROUP_VALUES[:2], **common),
            "searchqa": Setting("searchqa", "micro", dict(micro_train), group_by=QA_GROUP,
                                group_values=QA_GROUP_VALUES, **common),
        }
        return Profile("tiny", settings, seeds=1,
                       sweep={"tau": [0.25], "mu": [0.4], "alpha": [2.0]}, close_margin=0.05)
    settings = {
        # The size the tiny profile trains on (issue 6: train on every size you evaluate): 3
        # people, the one held-out size where the tiny-kk base is within issue 6's 0.1-0.8 greedy
        # band (2-person puzzles are not held out, ~588 exist; 4 people: 0.06; see tiny_kk.yaml).
        # k=4 samples per item keep the 3-seed reproduction within its CPU budget.
        "kk": Setting("kk", "tiny-kk", {"profile": "tiny"}, group_by="n_people",
                      group_values=[3], n_items=100, k=4),
        "math": Setting("math", "tiny-math", {"profile": "tiny"}, group_by=MATH_GROUP,
                        group_values=MATH_GROUP_VALUES, n_items=100, k=4),
        "searchqa": Setting("searchqa", "tiny-searchqa", {"profile": "tiny"}, group_by=QA_GROUP,
                            group_values=QA_GROUP_VALUES, n_items=100, k=4),
    }
    return Profile("tiny", settings, seeds=3,
                   sweep={"tau": [0.25, 1.0], "mu": [0.4, 0.6], "alpha": [2.0, 4.0]})


#: How the synthetic tasks are grouped in the tiny tables (the env keyword and its values).
MATH_GROUP = "difficulty"
MATH_GROUP_VALUES = [1, 2, 3, 4, 5]
QA_GROUP = "hops"
QA_GROUP_VALUES = [1, 2]


# -- paper ---------------------------------------------------------------------------------------
#: Public architecture facts (the models' ``config.json`` on the Hugging Face hub), for the plan.
QWEN_ARCH = {
    "Qwen/Qwen2.5-3B-Instruct": dict(hidden=2048, layers=36, heads=16, kv_heads=2, inter=11008, vocab=151936, tied=1),
    "Qwen/Qwen2.5-7B-Instruct-1M": dict(hidden=3584, layers=28, heads=28, kv_heads=4, inter=18944, vocab=152064),
    "Qwen/Qwen2.5-7B": dict(hidden=3584, layers=28, heads=28, kv_heads=4, inter=18944, vocab=152064),
    "Qwen/Qwen2.5-3B": dict(hidden=2048, layers=36, heads=16, kv_heads=2, inter=11008, vocab=151936, tied=1),
}

#: K&K recipe (Logic-RL / AR-Lopti scripts, DESIGN section 6).
_KK_RECIPE = {
    "profile": "default", "dtype": "bfloat16", "device": "cuda", "gradient_checkpointing": True,
    "prompts_per_step": 64, "group_size": 8, "mini_batch_size": 256, "ppo_epochs": 1,
    # 5 epochs over Logic-RL's 3-7-people train sets (5 x 900 puzzles) at 64 prompts a step.
    "steps": math.ceil(5 * 5 * 900 / 64),
    "rollout.backend": "vllm", "rollout.temperature": 0.7, "rollout.max_prompt_tokens": 400,
    "rollout.max_response_tokens": 4096, "optim.lr": 1e-6, "optim.grad_clip": 1.0,
    "loss.clip_low": 0.2, "loss.clip_high": 0.24, "loss.dual_clip": 10.0, "loss.kl_coef": 0.001,
    "loss.agg": "token-mean", "eval.every": 20, "eval.n_prompts": 100, "save_every": 20,
    "env_kwargs.dataset": "K-and-K/knights-and-knaves", "env_kwargs.n_people": [3, 4, 5, 6, 7],
    "env_kwargs.template": "qwen", "env_kwargs.prefill_think": True,
}
_MATH_RECIPE = {
    **{k: v for k, v in _KK_RECIPE.items() if not k.startswith(("env_kwargs.", "steps", "eval."))},
    "rollout.temperature": 1.0, "env_kwargs.dataset": "agentica-org/DeepScaleR-Preview-Dataset",
    "steps": 500, "eval.every": 50, "eval.n_prompts": 100,
}
_QA_RECIPE = {
    **{k: v for k, v in _KK_RECIPE.items() if not k.startswith(("env_kwargs.", "steps", "eval."))},
    "group_size": 16, "rollout.temperature": 1.0, "rollout.stop": ["</search>", "</answer>"],
    "rollout.max_response_tokens": 2048, "steps": 1000, "eval.every": 100, "eval.n_prompts": 100,
    "env_kwargs.max_turns": 2, "env_kwargs.topk": 3,
}

#: Values of the paper profile that no public recipe fixes (our choices, stated in docs).
PAPER_CHOICES = {
    "math.steps": "500 (the math recipe's step count is not published)",
    "math.rollout.max_response_tokens": "4096, as the K&K recipe",
    "searchqa.prompts_per_step": "64, as the K&K recipe",
    "searchqa.rollout.max_response_tokens": "2048 (observations included)",
    "paper.seeds": "3",
}

#: Column -> the math env's dataset name (``rlvr.envs.math.data.DATASETS``).
PAPER_MATH_SETS = {"MATH-500": "math500", "Minerva": "minerva", "OlympiadBench": "olympiadbench",
                   "AIME24": "aime24", "AMC23": "amc23"}
PAPER_QA_SETS = {"NQ": "nq_open/NQ-open.dev.jsonl", "TriviaQA": "trivia_qa",
                 "PopQA": "akariasai/PopQA", "HotpotQA": "hotpotqa/hotpotqa_500.jsonl",
                 "2Wiki": "2wikimultihopqa/2wiki_500.jsonl", "MuSiQue": "musique/musique_500.jsonl",
                 "Bamboogle": "bamboogle/bamboogle.jsonl"}


def paper_profile() -> Profile:
    kk = dict(group_by="n_people", group_values=[3, 4, 5, 6, 7], n_items=100, k=8,
              eval_env_kwargs={"dataset": "K-and-K/knights-and-knaves", "template": "qwen"})
    settings = {
        "kk": Setting("kk", "Qwen/Qwen2.5-3B-Instruct", dict(_KK_RECIPE), **kk,
                      arch=QWEN_ARCH["Qwen/Qwen2.5-3B-Instruct"]),
        "kk-7b": Setting("kk", "Qwen/Qwen2.5-7B-Instruct-1M", dict(_KK_RECIPE), **kk,
                         arch=QWEN_ARCH["Qwen/Qwen2.5-7B-Instruct-1M"]),
        # AIME/AMC sampled 16 times at temperature 1.0 (avg@16, pass@16).
        "math": Setting("math", "Qwen/Qwen2.5-7B", dict(_MATH_RECIPE), k=16, eval_temperature=1.0,
                        eval_sets={n: {"dataset": p} for n, p in PAPER_MATH_SETS.items()},
                        n_items=100_000, arch=QWEN_ARCH["Qwen/Qwen2.5-7B"]),
        "searchqa": Setting("searchqa", "Qwen/Qwen2.5-3B", dict(_QA_RECIPE), k=1,
                            eval_sets={n: {"dataset": p} for n, p in PAPER_QA_SETS.items()},
                            n_items=100_000, arch=QWEN_ARCH["Qwen/Qwen2.5-3B"]),
    }
    return Profile("paper", settings, seeds=3, needs_gpu=True,
                   sweep={"tau": [0.25, 1.0], "mu": [0.4, 0.6], "alpha": [2.0, 4.0]})


def get_profile(name: str, smoke: bool = False) -> Profile:
    if name == "tiny":
        return tiny_profile(smoke)
    if name == "paper":
        if smoke:
            raise ConfigError("--smoke runs the tiny profile's code path; use --profile tiny")
        return paper_profile()
    raise ConfigError(f"--profile: {name!r} is not one of ['tiny', 'paper']")


# -- validation and the GPU plan -----------------------------------------------------------------
def setting_overrides(setting: Setting, algo: str, seed: int, extra: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
    """Flat ``key=value`` overrides of one training run of ``setting``."""
    return {**setting.train, "env": setting.env, "algo": algo, "model": setting.model,
            "seed": seed, **(extra or {})}


def flat_to_nested(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def param_count(arch: dict[str, int]) -> int:
    """Parameters of a Qwen2 decoder (attention with biases on q/k/v, SwiGLU MLP; the output head
    is tied to the embeddings when ``arch["tied"]``, as in Qwen2.5-3B)."""
    h, L, inter, vocab = arch["hidden"], arch["layers"], arch["inter"], arch["vocab"]
    head_dim = h // arch["heads"]
    kv = arch["kv_heads"] * head_dim
    attn = h * h + 2 * h * kv + (h + 2 * kv) + h * h
    mlp = 3 * h * inter
    return L * (attn + mlp + 2 * h) + (1 if arch.get("tied") else 2) * vocab * h + h


def plan_rows(profile: Profile, gpu_gib: float = 80.0) -> list[dict[str, Any]]:
    """One row per setting: parameters, estimated memory, minimum GPUs, steps, rollouts.

    Memory (bf16 weights, fp32 AdamW states sharded by FSDP across GPUs): 2 B/param weights +
    2 B/param gradients + 12 B/param fp32 master weights and Adam moments (the 16 B/param of
    mixed-precision Adam, Rajbhandari et al. 2020, ZeRO §3) + 2 B/param reference model + 2 B/param
    for the vLLM copy; the KV cache of one rollout batch and checkpointed activations of a
    micro-batch of 4 rows come on top. GPUs: the smallest count whose ``gpu_gib`` at 85% holds
    it, at least 1.
    """
    rows = []
    for key, s in profile.settings.items():
        if not s.arch:
            continue
        from rlvr.agents.train_config import load_train_config

        cfg = load_train_config(flat_to_nested(setting_overrides(s, "grpo", 0, {"out": "plan"})))
        n = param_count(s.arch)
        length = cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
        head_dim = s.arch["hidden"] // s.arch["heads"]
        kv_cache = 2 * cfg.prompts_per_step * cfg.group_size * length * s.arch["layers"] \
            * s.arch["kv_heads"] * head_dim * 2
        acts = 4 * length * s.arch["hidden"] * s.arch["layers"] * 2 * 2
        total = n * (16 + 2 + 2) + kv_cache + acts
        gpus = max(1, math.ceil(total / (0.85 * gpu_gib * 2 ** 30)))
        rows.append({
            "setting": key, "model": s.model, "params_B": round(n / 1e9, 2),
            "memory_GiB": round(total / 2 ** 30, 1), f"min_gpus_{int(gpu_gib)}GB": gpus,
            "steps": cfg.steps, "rollouts_per_step": cfg.prompts_per_step * cfg.group_size,
            "max_tokens_per_rollout": length, "seeds": profile.seeds,
        })
    return rows


def validate(profile: Profile, algos: tuple[str, ...] = KK_METHODS) -> int:
    """Load every training config of ``profile`` through the trainer's typed config (errors name
    the bad key); returns how many configs were checked."""
    from rlvr.agents.train_config import load_train_config

    count = 0
    for key, s in profile.settings.items():
        for algo in algos:
            try:
                load_train_config(flat_to_nested(setting_overrides(s, algo, 0, {"out": "validate"})))
            except ConfigError as e:
                raise ConfigError(f"profile {profile.name}, setting {key}, algo {algo}: {e}") from e
            count += 1
    return count


def replace(setting: Setting, **changes) -> Setting:
    return dataclasses.replace(setting, **changes)
