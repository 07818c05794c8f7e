"""``rlvr reproduce <fig|table|all> --grid paper --engine verl --out DIR``: one verl launch
folder per training run of the paper's grid.

Which runs: exactly those the named figures need (their plan, ``rlvr.reproduce.figures``, which
``--jobs`` prefetches too), plus the variants the algorithms declare beside every default-point
run (``Algorithm.variants``: GRPO-SG in its logit form, ``weights.shaping_input=logit``, Eq. 20),
which the native grid does not train. Each run's values are its native ``TrainConfig`` (the
plan's) translated by ``rlvr.integrations.verl.config``.

Layout (the verl contract, §4)::

    DIR/README.md  DIR/run_all.sh
    DIR/data/<task>/{train,test...}.parquet      written by run.sh when missing
    DIR/runs/<run_key>/{run.sh,config.yaml,rlvr_run.json}

The text of the folder (run.sh, run_all.sh, README.md) is ``rlvr.reproduce.verl.run_script``;
what run.sh runs before verl is ``rlvr.reproduce.verl.run_tools``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlvr.agents.algorithms import get_algorithm
from rlvr.agents.rollout.vllm import UNSUPPORTED_CONFIG_KEYS
from rlvr.files import write_text_atomic
from rlvr.integrations.verl.config import (
    ATTN_IMPLEMENTATION,
    VERL_VERSION,
    VerlTranslationError,
    config_document,
    translate,
)
from rlvr.reproduce import figures
from rlvr.reproduce.common import Context
from rlvr.reproduce.gpu_plan import param_count, verl_gpus, verl_rollout_memory
from rlvr.reproduce.plan import Need, PlannedRun, build_plan
from rlvr.reproduce.runs import eval_config
from rlvr.reproduce.verl.results import folder_name
from rlvr.reproduce.verl.run_script import RUN_ALL, readme, run_sh

#: bf16 dense peak of one GPU (NVIDIA H100/H200 SXM datasheets: 989 TFLOP/s without sparsity).
PEAK_FLOPS = {"H200-141GB": 989e12, "H100-80GB": 989e12}
#: Assumed end-to-end model-FLOP utilisation of an RL step (generation is memory-bound, so RL
#: loops run well below training MFU); an assumption for the wall-time bound, not a measurement.
ASSUMED_MFU = 0.15


@dataclass
class Launch:
    """One run of the launch folder: a run of the plan, and whether the native grid trains it
    (False: an algorithm's variant)."""

    run: PlannedRun
    native: bool = True

    @property
    def tag(self) -> str:
        """``grpo_sg``, ``grpo_sg-logit``, ``grpo_sg-tau0.25``: the algorithm and its variant."""
        parts = [self.run.algo]
        for key, value in sorted(self.run.extra.items()):
            name = key.split(".")[-1]
            parts.append(
                "logit" if (name, value) == ("shaping_input", "logit") else f"{name}{value:g}"
            )
        return "-".join(parts)

    @property
    def run_key(self) -> str:
        return folder_name(self.run.setting, self.tag, self.run.seed)


def grid(g, names: list[str], seeds: list[int]) -> list[Launch]:
    """Every run the figures ``names`` use, then the algorithms' variants of each default-point
    run (module docstring), each once."""
    ctx = Context(g, Path("."), Path("."), list(seeds))
    needs = figures.needs(ctx, names)
    native = build_plan(ctx, needs).runs
    for run in native.values():
        if run.base_seed:
            raise ValueError(f"base seed {run.base_seed}: verl runs start from hub models")
    variants = [
        Need.of(r.setting, r.algo, extra, units=((r.base_seed, r.seed),), figure=figure)
        for r in native.values()
        if not r.extra
        for extra in get_algorithm(r.algo).variants.values()
        for figure in r.figures
    ]
    plan = build_plan(ctx, needs + variants)
    return [Launch(run, native=key in native) for key, run in plan.runs.items()]


# -- data ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataFile:
    """One parquet file: ``rlvr prepare-verl ENV --split SPLIT --n min(cap, size)``."""

    env: str
    split: str
    cap: int
    env_kwargs: tuple[tuple[str, str], ...]
    label: str

    def env_args(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.env_kwargs]


def _kwargs(kwargs: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Environment keyword arguments as ``--env-arg`` YAML values (``verl.data`` reads YAML)."""
    out = []
    for k, v in sorted(kwargs.items()):
        if k == "split":
            continue
        text = yaml.safe_dump(v, default_flow_style=True, width=10_000).strip()
        out.append((k, text.removesuffix("\n...").strip()))
    return tuple(out)


def data_files(setting, cfg) -> tuple[DataFile, list[DataFile]]:
    """The train file (the tasks the native run visits: ``steps x prompts_per_step``) and the
    validation files: one per evaluation set or group of the setting's protocol, which share the
    native periodic evaluation's ``eval.n_prompts`` tasks (at least one each)."""
    train = DataFile(
        cfg.env, "train", cfg.steps * cfg.prompts_per_step, _kwargs(cfg.env_kwargs), "train"
    )
    parts = []  # (label, env kwargs, items in the set or group)
    for name, eval_set in list(setting.eval_sets.items()) or [(None, None)]:
        ecfg = eval_config(setting, cfg, cfg.model, eval_set=eval_set)
        if name is not None:
            parts.append((f"test_{name}", dict(ecfg.env_kwargs), ecfg.n_items))
            continue
        for value in ecfg.group_values or [None]:
            kw = dict(ecfg.env_kwargs)
            if value is not None:
                kw[ecfg.group_by] = value
            label = "test" if value is None else f"test_{ecfg.group_by}{value}"
            parts.append((label, kw, ecfg.n_items))
    share = max(1, -(-cfg.eval.n_prompts // len(parts)))
    vals = [DataFile(cfg.env, "test", min(n, share), _kwargs(kw), label) for label, kw, n in parts]
    return train, vals


class DataLayout:
    """``DIR/data/<task>/``: one folder per task, another only where data of the same task
    differ (a setting with other steps, sizes or datasets)."""

    def __init__(self) -> None:
        self.folders: dict[tuple, str] = {}

    def folder(self, setting_key: str, files: tuple) -> str:
        env = files[0].env
        if files not in self.folders:
            taken = set(self.folders.values())
            self.folders[files] = env if env not in taken else f"{env}-{setting_key}"
        return self.folders[files]


# -- files of one run ----------------------------------------------------------------------------
def eval_protocol(setting, cfg):
    first = next(iter(setting.eval_sets.values()), None)
    return eval_config(setting, cfg, cfg.model, eval_set=first)


def run_files(g, launch: Launch, layout: DataLayout) -> dict[str, Any]:
    """``config`` (the Hydra document), ``flat`` overrides, ``record`` (rlvr_run.json), data."""
    run = launch.run
    setting, cfg = g.settings[run.setting], run.config
    train, vals = data_files(setting, cfg)
    folder = layout.folder(run.setting, (train, *vals))
    rel = f"../../data/{folder}"
    gpus = verl_gpus(setting, cfg)
    plan = verl_rollout_memory(setting, cfg, gpus)
    if not plan.fits:
        raise VerlTranslationError(
            f"{launch.run_key}: vLLM's KV cache for {plan.sequences} rollouts per engine and the "
            f"FSDP shards do not fit {gpus}x {setting.gpu} ({plan.record()})"
        )
    flat = translate(
        cfg,
        eval_protocol(setting, cfg),
        gpus=gpus,
        run_name=launch.run_key,
        train_files=[f"{rel}/{train.label}.parquet"],
        val_files=[f"{rel}/{v.label}.parquet" for v in vals],
        memory=plan.record(),
        hf_config=setting.arch,
    )
    x = "actor_rollout_ref.rollout."
    record = {
        "task": setting.env,
        "setting": run.setting,
        "algo": run.algo,
        "seed": run.seed,
        "model": cfg.model,
        "params": cfg.weights.params(run.algo),
        "native_config_hash": run.key,
        "fig_or_table": list(run.figures),
        "run_key": launch.run_key,
        "engine": "verl",
        "verl_version": VERL_VERSION,
        "tag": launch.tag,
        "overrides": dict(run.extra),
        "in_native_grid": launch.native,
        "steps": cfg.steps,
        "gpus": gpus,
        "gpu": setting.gpu,
        # The rollout engine's memory plan and the model config keys removed for vLLM.
        "memory": plan.record(),
        "hf_overrides": flat.get(x + "engine_kwargs.vllm.hf_overrides", {}),
        "removed_config_keys": {
            k: UNSUPPORTED_CONFIG_KEYS[k]
            for k in flat.get(x + "engine_kwargs.vllm.hf_overrides", {})
        },
        "attn_implementation": ATTN_IMPLEMENTATION,
    }
    return {
        "cfg": cfg,
        "flat": flat,
        "config": config_document(flat),
        "record": record,
        "folder": folder,
        "data": (train, *vals),
        "setting": setting,
    }


def estimate_hours(setting, cfg, gpus: int, flat: dict[str, Any], val_tasks: int) -> float:
    """Upper bound on wall time: every response at the full budget; per token 2N FLOPs to
    generate, 2N each for the old and reference log-probs, 6N per update pass (Kaplan et al.
    2020, C = 6N per trained token), plus the validations' generation (``val_tasks`` tasks x
    ``val_kwargs.n`` at 2N), at ``ASSUMED_MFU`` of the GPUs' bf16 peak."""
    n = param_count(setting.arch)
    length = cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
    tokens = cfg.steps * cfg.prompts_per_step * cfg.group_size * length
    passes = cfg.ppo_epochs * get_algorithm(cfg.algo).n_stages
    flops = tokens * n * (2 + 2 + (2 if cfg.loss.kl_coef > 0 else 0) + 6 * passes)
    every = flat["trainer.test_freq"]
    if every > 0:  # every ``test_freq`` steps and after the last one
        validations = -(-cfg.steps // every)
        val_n = flat["actor_rollout_ref.rollout.val_kwargs.n"]
        flops += validations * val_tasks * val_n * length * 2 * n
    return flops / (gpus * PEAK_FLOPS[setting.gpu] * ASSUMED_MFU) / 3600


def write(g, names: list[str], seeds: list[int], out: Path, command: str) -> list[dict]:
    """Write the launch folder (module docstring); returns the runs' records."""
    out = Path(out)
    layout = DataLayout()
    rows = []
    for launch in grid(g, names, seeds):
        files = run_files(g, launch, layout)
        folder = out / "runs" / launch.run_key
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(
            folder / "config.yaml",
            f"# {launch.run_key}: verl {VERL_VERSION} ppo_trainer + the native paper recipe "
            f"(generated by `{command}`)\n"
            + yaml.safe_dump(files["config"], sort_keys=False, width=100),
        )
        write_text_atomic(folder / "rlvr_run.json", json.dumps(files["record"], indent=2) + "\n")
        script = folder / "run.sh"
        script.write_text(run_sh(files, command))
        script.chmod(0o755)
        gpus = files["record"]["gpus"]
        val_tasks = sum(f.cap for f in files["data"][1:])
        hours = estimate_hours(files["setting"], files["cfg"], gpus, files["flat"], val_tasks)
        rows.append({**files["record"], "hours": hours})
    (out / "README.md").write_text(readme(rows, command, ASSUMED_MFU))
    runs = " ".join(shlex.quote(r["run_key"]) for r in rows)
    run_all = out / "run_all.sh"
    run_all.write_text(RUN_ALL.format(runs=runs))
    run_all.chmod(0o755)
    return rows
