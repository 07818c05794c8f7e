"""The run cache shared by every reproduce script.

A training run is identified by the hash of its full ``TrainConfig`` (``rlvr.config.config_hash``,
with the output folder, ``resume`` and display-only fields blanked) and lives in
``<cache>/runs/<hash>/`` (``<cache>`` defaults to ``rlvr_home()``). ``ensure_run`` returns a
finished run at once, resumes an interrupted one from its last checkpoint (the trainer's
``resume``), and trains a missing one. Evaluations of a model are cached the same way under
``<cache>/evals/<hash>/``, so fig2, table_kk and the report share one evaluation of each
checkpoint, and figures are redrawn from the saved responses without touching a model.

``run.json`` records what produced a run: its steps, its work in tokens, the SHA-256 of its
final weights (``rlvr.repro.weights_sha256``) and the machine (``rlvr.repro.machine_info``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.agents.algorithms import get_algorithm
from rlvr.config import config_hash, nest
from rlvr.eval.metrics import summarize_by_group
from rlvr.eval.runner import EvalConfig, EvalResult, evaluate, read_jsonl, save_result
from rlvr.integrations.verl.checkpoints import checkpoint_identity, is_verl_checkpoint
from rlvr.locks import LOCK_FILE, hold
from rlvr.prompt_format import write_format
from rlvr.reproduce.grid import Setting, setting_overrides

DONE = "run.json"

#: Fields that do not change what a run computes (blanked before hashing).
_NEUTRAL = {"out": "", "resume": False, "progress": True, "tensorboard": False}
#: Fields that change nothing a run computes, added after runs were cached: left out of the key,
#: so that cached runs keep theirs.
_UNKEYED = ("max_tool_failure_rate", "report_to")


@dataclass
class Run:
    key: str
    path: Path
    config: Any  # TrainConfig
    metrics: list[dict[str, Any]]
    compute_seconds: float

    @property
    def final(self) -> Path:
        return self.path / "final"

    @property
    def base_seed(self) -> int:
        return base_seed_of(self.config.model)

    @property
    def update_tokens(self) -> int:
        """Forward-backward tokens of the run's updates (``update_tokens``)."""
        return update_tokens(self.metrics, self.config)

    @property
    def info(self) -> dict[str, Any]:
        done = self.path / DONE
        return json.loads(done.read_text()) if done.exists() else {}

    @property
    def weights_sha256(self) -> str:
        """SHA-256 of the final weights (from ``run.json``; computed for runs that predate it)."""
        return self.info.get("weights_sha256") or _hash_if_present(self.final)


def train_config(
    setting: Setting, algo: str, seed: int, extra: dict[str, Any] | None = None, base_seed: int = 0
):
    """The ``TrainConfig`` of one run (the setting's overrides + env/algo/seed + ``extra``), from
    base build ``base_seed`` of the setting's model (``tiny-kk@1``; 0 is the model itself)."""
    from rlvr.agents.train_config import load_train_config
    from rlvr.models.presets import base_spec, parse_spec

    more: dict[str, Any] = {}
    if base_seed:
        if parse_spec(setting.model) is None:
            raise ValueError(
                f"base seed {base_seed}: model {setting.model!r} is not a tiny "
                "preset, whose base can be built from another seed"
            )
        more["model"] = base_spec(setting.model, base_seed)
    flat = setting_overrides(setting, algo, seed, {**(extra or {}), **more, "out": "pending"})
    return load_train_config(nest(flat))


def model_identity(model: str) -> str:
    """What ``model`` names, as hashed into run and evaluation keys.

    A tiny preset (``tiny-kk``) stands for its build directory name, ``<preset>-<hash of its
    BuildConfig and training data>``: a changed preset then gives new keys instead of reusing
    runs and evaluations of the old base. A model inside a run cache stands for its place in the
    cache (``runs/<key>/final``, ``sft/<key>``), so evaluation keys do not depend on where the
    cache lives. A checkpoint verl saved (``.../checkpoints/global_step_<N>/actor/huggingface``
    of a generated run folder) stands for its weights' hash
    (``rlvr.integrations.verl.checkpoints.checkpoint_identity``). Any other name or path is used as
    given.
    """
    from rlvr.models.presets import parse_spec

    if parse_spec(model) is None:
        p = Path(model)
        if p.name == "final" and p.parent.parent.name == "runs":
            return f"runs/{p.parent.name}/final"
        if p.parent.name == "sft" and (p / "sft.json").exists():
            return f"sft/{p.name}"
        if p.name == "huggingface" and is_verl_checkpoint(p):
            return checkpoint_identity(p)
        return model
    return _preset_build_key(model)


@functools.lru_cache(maxsize=None)
def _preset_build_key(name: str) -> str:
    from rlvr.models.build import build_key
    from rlvr.models.presets import preset_config

    return build_key(preset_config(name))


def base_seed_of(model: str) -> int:
    """The base seed a model name carries (``tiny-kk@2`` -> 2; 0 for anything else)."""
    from rlvr.models.presets import parse_spec

    parsed = parse_spec(model)
    return parsed[1] if parsed else 0


def run_key(cfg) -> str:
    return config_hash(
        dataclasses.replace(cfg, **_NEUTRAL, model=model_identity(cfg.model)), leave_out=_UNKEYED
    )


def eval_key(ecfg: EvalConfig) -> str:
    return config_hash(dataclasses.replace(ecfg, out="", model=model_identity(ecfg.model)))


def run_summary(cfg, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """What a finished run's record says of it, whichever engine trained it."""
    return {
        "env": cfg.env,
        "algo": cfg.algo,
        "seed": cfg.seed,
        "model": cfg.model,
        "base_seed": base_seed_of(cfg.model),
        "steps": len(metrics),
    }


def compute_seconds(metrics: list[dict[str, Any]]) -> float:
    """Seconds a run spent in rollouts and updates (a record of speed on one machine; equal
    compute is measured in tokens, ``update_tokens``, which do not depend on the machine)."""
    return float(
        sum(
            float(m.get("time/rollout_s", 0.0)) + float(m.get("time/update_s", 0.0))
            for m in metrics
        )
    )


def update_tokens(metrics: list[dict[str, Any]], cfg=None) -> int:
    """Tokens that went through forward and backward passes in a run's policy updates.

    Per step: the real (attention-mask) tokens of the rollout batch, prompts included, times
    the passes over it (``ppo_epochs`` times the algorithm's stages: twice for Lopti). The
    trainer logs the batch's size as a rate, ``perf/update_tokens_s = tokens / time/update_s``,
    so the product recovers the integer count (rounded: the quotient and product are exact to
    ~1e-16).
    """
    passes = 1 if cfg is None else cfg.ppo_epochs * get_algorithm(cfg.algo).n_stages
    total = 0
    for m in metrics:
        if "tokens/update" in m:
            total += int(m["tokens/update"])
        else:
            total += int(
                round(
                    float(m.get("perf/update_tokens_s", 0.0)) * float(m.get("time/update_s", 0.0))
                )
            )
    return total * passes


def _hash_if_present(path: Path) -> str:
    from rlvr.repro import weights_sha256

    try:
        return weights_sha256(path)
    except FileNotFoundError:
        return ""


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _train_run(cfg, key: str, path: Path, *, say, progress: bool) -> None:
    from rlvr.agents.trainer import Trainer

    resuming = (path / "checkpoints").exists()
    say(
        f"[reproduce] {'resuming' if resuming else 'training'} {cfg.env}/{cfg.algo} "
        f"seed {cfg.seed} -> {path}"
    )
    run_cfg = dataclasses.replace(cfg, out=str(path), resume=True, progress=progress)
    start = time.perf_counter()
    Trainer(run_cfg).train()
    metrics = _read_metrics(path / "metrics.jsonl")
    from rlvr.repro import machine_info, weights_sha256

    (path / DONE).write_text(
        json.dumps(
            {
                "key": key,
                **run_summary(cfg, metrics),
                "update_tokens": update_tokens(metrics, cfg),
                "compute_seconds": round(compute_seconds(metrics), 2),
                "last_invocation_seconds": round(time.perf_counter() - start, 2),
                "weights_sha256": weights_sha256(path / "final"),
                "machine": machine_info(),
            },
            indent=2,
        )
    )


def run_path(cache: str | Path, key: str) -> Path:
    """Where the run cache keeps run ``key`` (its ``final`` weights, metrics, ``run.json``)."""
    return Path(cache) / "runs" / key


def ensure_run(cfg, cache: Path, *, say=print, progress: bool = True) -> Run:
    """The finished run of ``cfg`` from the cache, trained (or resumed) first when needed."""
    key = run_key(cfg)
    path = run_path(cache, key)
    done = path / DONE
    if not done.exists():  # another process training the same run is waited for, not joined
        with hold(path / LOCK_FILE, wait=True, what=f"run {path}", say=say):
            if not done.exists():
                _train_run(cfg, key, path, say=say, progress=progress)
    metrics = _read_metrics(path / "metrics.jsonl")
    return Run(key, path, cfg, metrics, compute_seconds(metrics))


# -- evaluations -------------------------------------------------------------------------------
def eval_config(
    setting: Setting, cfg, model: str, *, eval_set: dict[str, Any] | None = None, seed: int = 0
) -> EvalConfig:
    """How to evaluate ``model`` on ``setting``: the training run's prompt format, temperature
    and response budget, the setting's groups (or ``eval_set``), greedy + ``k`` samples."""
    env_kwargs = {k: v for k, v in cfg.env_kwargs.items() if k not in ("split", setting.group_by)}
    env_kwargs.update(setting.eval_env_kwargs)
    group_by, group_values = setting.group_by, list(setting.group_values)
    if eval_set is not None:
        env_kwargs.update(eval_set)
        group_by, group_values = "", []
    k = setting.k
    return EvalConfig(
        model=model,
        env=setting.env,
        env_kwargs=env_kwargs,
        split="test",
        group_by=group_by,
        group_values=group_values,
        n_items=setting.n_items,
        greedy=True,
        k=k,
        temperature=setting.eval_temperature or cfg.rollout.temperature or 1.0,
        top_p=cfg.rollout.top_p,
        max_new_tokens=setting.eval_max_new_tokens or cfg.rollout.max_response_tokens,
        stop=list(cfg.rollout.stop),
        batch_size=setting.eval_batch_size,
        pass_ks=sorted({1, k}) if k else [1],
        seed=seed,
        device="cuda" if cfg.device == "cuda" else "cpu",
    )


@dataclass
class Evaluation:
    key: str
    path: Path
    records: list[dict[str, Any]]
    summary: dict[Any, dict[str, float]]
    #: (base seed, RL seed) of the draw evaluated, set by the reproduce scripts.
    unit: tuple[int, int] = (0, 0)


def ensure_eval(ecfg: EvalConfig, cache: Path, *, say=print, progress: bool = True) -> Evaluation:
    """Responses and summary of ``ecfg`` from the cache, evaluated first when missing."""
    key = eval_key(ecfg)
    path = Path(cache) / "evals" / key
    if not (path / "summary.json").exists():
        with hold(path / LOCK_FILE, wait=True, what=f"evaluation {path}", say=say):
            if not (path / "summary.json").exists():
                say(f"[reproduce] evaluating {ecfg.model} on {ecfg.env} -> {path}")
                result: EvalResult = evaluate(ecfg, progress=progress)
                save_result(result, path)
    records = read_jsonl(path / "responses.jsonl")
    ks = sorted(set(ecfg.pass_ks) | ({ecfg.k} if ecfg.k else set()))
    return Evaluation(key, path, records, summarize_by_group(records, ks=ks))


# -- the continued-SFT reference (fig2) ----------------------------------------------------------
def ensure_sft_reference(
    setting: Setting,
    seed: int,
    budget_tokens: int,
    cache: Path,
    *,
    say=print,
    progress: bool = True,
    smoke: bool = False,
    model: str | None = None,
) -> Path:
    """The base ``model`` (default the setting's) after continued SFT on about
    ``budget_tokens`` forward-backward tokens: the equal-compute baseline of an RL run whose
    updates passed that many tokens (``update_tokens``). Cached by (base, SFT config, data).

    Work, not time: steps = ``budget_tokens`` / the base build's tokens per SFT step
    (``build.json``, a property of its data, the same on every machine), so the reference is a
    pure function of its configuration. The recipe is the base build's own SFT config
    restarted (warm-up, cosine decay) on fresh examples.
    """
    import hashlib

    from rlvr.models import traces
    from rlvr.models.sft import SFTConfig

    model = model or setting.model
    base_dir, build_cfg = _base_build(model)
    if build_cfg is None and model != "micro":
        from rlvr.config import ConfigError

        raise ConfigError(
            f"continued-SFT reference of {model!r}: only tiny presets have "
            "an SFT recipe to continue (their build's); set sft_reference=False"
        )
    if build_cfg is None:  # micro (smoke): no build record; two steps on the K&K traces
        sft_cfg = SFTConfig(steps=2, batch_size=2, warmup_steps=0, seed=seed, max_length=2048)
        task, data = setting.env, dict(traces.TINY_SETTINGS.get(setting.env, {}))
    else:
        record = json.loads((base_dir / "build.json").read_text())
        tokens_per_step = record["sft"]["tokens"] / max(record["sft"]["steps"], 1)
        steps = max(1, int(round(budget_tokens / tokens_per_step)))
        sft_cfg = dataclasses.replace(
            build_cfg.sft,
            steps=steps,
            seed=10_000 + seed,
            warmup_steps=min(build_cfg.sft.warmup_steps, steps // 10),
            max_seconds=0.0,
        )
        task, data = build_cfg.task, dict(build_cfg.data)
    blob = json.dumps(
        {
            "base": base_dir.name if base_dir else model,
            "sft": dataclasses.asdict(sft_cfg),
            "task": task,
            "data": data,
        },
        sort_keys=True,
        default=str,
    )
    path = Path(cache) / "sft" / hashlib.sha256(blob.encode()).hexdigest()[:12]
    if (path / "sft.json").exists():
        return path
    # renamed into place when complete, so the lock sits beside the folder
    with hold(path.with_name(f"{path.name}.lock"), wait=True, what=f"SFT {path}", say=say):
        if not (path / "sft.json").exists():
            _continued_sft(model, seed, budget_tokens, sft_cfg, task, data, path, say, progress)
    return path


def _continued_sft(model, seed, budget_tokens, sft_cfg, task, data, path, say, progress) -> None:
    from rlvr.models import traces
    from rlvr.models.sft import sft

    say(f"[reproduce] continued SFT of {model} for {sft_cfg.steps} steps -> {path}")
    from rlvr.models import load_model
    from rlvr.repro import machine_info, weights_sha256

    net, tokenizer = load_model(model, seed=seed)
    stats = sft(
        net,
        tokenizer,
        traces.example_stream(task, data, seed=sft_cfg.seed),
        sft_cfg,
        progress=progress,
        desc="continued sft",
    )
    import os
    import shutil

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")  # renamed into place when complete
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    net.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_format(tmp, task, traces.env_kwargs(task, data), base=model)
    (tmp / "sft.json").write_text(
        json.dumps(
            {
                "budget_tokens": budget_tokens,
                **stats,
                "weights_sha256": weights_sha256(tmp),
                "machine": machine_info(),
            },
            indent=2,
            default=str,
        )
    )
    shutil.rmtree(path, ignore_errors=True)  # a reference left incomplete by a killed process
    tmp.rename(path)


def _base_build(model: str):
    """``(directory, BuildConfig)`` of a tiny preset, or ``(None, None)`` for anything else."""
    from rlvr.models.build import ensure_built
    from rlvr.models.presets import preset_config

    cfg = preset_config(model)
    if cfg is None:
        return None, None
    return ensure_built(cfg, progress=False), cfg


def base_weights(model: str) -> dict[str, str]:
    """``{"build": <build dir name>, "weights_sha256": ...}`` of a preset base (the hash empty
    when it is not built here: nothing is built to record it), with the seed of the draw kept
    and those rejected when its acceptance check drew again; ``{}`` for other models."""
    from rlvr.models.build import models_dir
    from rlvr.models.presets import parse_spec

    if parse_spec(model) is None:
        return {}
    base_dir = models_dir() / _preset_build_key(model)
    if not (base_dir / "build.json").exists():
        return {"build": base_dir.name, "weights_sha256": ""}
    record = json.loads((base_dir / "build.json").read_text())
    out = {
        "build": base_dir.name,
        "weights_sha256": record.get("weights_sha256") or _hash_if_present(base_dir),
    }
    if record.get("rejected"):  # the draw kept after the acceptance check (rlvr.models.accept)
        out.update(seed=record["config"]["seed"], rejected=[t["seed"] for t in record["rejected"]])
    return out


__all__ = [
    "Evaluation",
    "Run",
    "base_seed_of",
    "base_weights",
    "compute_seconds",
    "ensure_eval",
    "ensure_run",
    "ensure_sft_reference",
    "eval_config",
    "eval_key",
    "model_identity",
    "run_key",
    "run_path",
    "train_config",
    "update_tokens",
]
