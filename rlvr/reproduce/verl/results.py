"""Runs trained by verl, read back: ``rlvr reproduce <name> --from-verl DIR``.

``rlvr reproduce ... --engine verl --out DIR`` writes one folder per training run,
``DIR/runs/<run_key>/`` (``<setting>__<algo>__seed<seed>``), that verl fills in:

- ``rlvr_run.json``: what the run stands for (``setting``, ``algo``, ``seed``, ``model``,
  ``params``, ``native_config_hash``: ``rlvr.reproduce.keys.run_key`` of the native
  ``TrainConfig`` the verl config was generated from);
- ``metrics.jsonl``: verl 0.9.1's file logger (``verl/utils/tracking.py`` ``FileLogger``,
  path from ``VERL_FILE_LOGGER_PATH``): one line per ``logger.log`` call,
  ``orjson.dumps({"step": N, "data": {metric: value}}, OPT_SERIALIZE_NUMPY)``; orjson writes
  NaN as ``null``. ``RayPPOTrainer.fit`` logs validation alone at step 0 (``val_before_train``)
  and the training metrics of step N >= 1 in one line;
- ``checkpoints/global_step_<N>/actor/huggingface/``: the Hugging Face weights
  (``rlvr.integrations.verl.checkpoints``).

A figure script asks for a run of the plan (``collect.runs_for``); ``VerlRuns`` finds
the folder whose ``native_config_hash`` is that config's hash (or, when the hash differs because
the config gained a field since the folder was generated, the folder with the same setting,
algorithm, seed, model and weight parameters; the result notes it) and returns a ``VerlRun``: the
native ``Run`` with verl's metrics renamed to the native names (``METRIC_NAMES``) and ``final``
pointing at the last checkpoint's weights, which ``ensure_eval`` evaluates like any native model.
A run is complete when its metrics cover steps 1..T and a checkpoint of step T holds weights
(T: ``trainer.total_training_steps`` of its ``config.yaml``, else the native config's
``steps``); anything less is refused in one line listing every missing or incomplete folder,
never drawn as a partial figure.

verl's file logger truncates ``metrics.jsonl`` when a run restarts (it opens the file with
``"wb"``): rotated copies ``metrics.<n>.jsonl`` of earlier attempts, when present, are read first
(in name order) and later lines of a step replace earlier ones.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from rlvr.files import RecordError, read_json_object, read_text
from rlvr.integrations.verl.checkpoints import (
    RUN_FILE,
    checkpoint_dirs,
    checkpoint_sha256,
    has_weights,
)
from rlvr.reproduce.keys import run_key
from rlvr.reproduce.runs import Run, compute_seconds, run_summary

ENGINE = "verl"
METRICS_FILE = "metrics.jsonl"

#: verl 0.9.1 metric name -> the native metric name (``rlvr.agents.metrics``,
#: ``rlvr.training.update``, ``rlvr.training.trainer``) that the figures read. Sources in verl:
#: ``trainer/ppo/metric_utils.py`` (``compute_data_metrics``, ``compute_timing_metrics``,
#: ``compute_throughout_metrics``), ``trainer/ppo/ray_trainer.py`` (``actor/entropy``: the
#: entropy of the rollout policy from the old-log-prob pass, as the native ``entropy``; the
#: update's metrics prefixed ``actor/``), ``workers/utils/losses.py`` and
#: ``rlvr.integrations.verl.actor`` / ``verl.plugin`` (the policy-loss metrics).
METRIC_NAMES: dict[str, str] = {
    "critic/score/mean": "reward/mean",  # sequence score = the verifier's reward of a response
    "critic/score/max": "reward/max",
    "critic/score/min": "reward/min",
    "actor/grad_norm": "grad_norm",  # before clipping (verl's clip_grad_norm_ return value)
    "actor/entropy": "entropy",
    "response_length/mean": "response_length",
    "response_length/max": "response_length/max",
    "response_length/clip_ratio": "finish/length",
    "prompt_length/mean": "prompt_length",
    "num_turns/mean": "turns/mean",
    "actor/pg_loss": "pg_loss",
    "actor/kl_loss": "kl_loss",
    "actor/pg_clipfrac": "clip_frac",
    "actor/pg_clipfrac_lower": "dual_clip_frac",
    "actor/ppo_kl": "ppo_kl",
    "actor/lr": "lr",
    "actor/rlvr_weight_mean": "weight/mean",
    "actor/rlvr_weight_min": "weight/min",
    "actor/rlvr_weight_max": "weight/max",
    "perf/total_num_tokens": "tokens/update",  # attention-mask tokens of the batch, as native
    "timing_s/gen": "time/rollout_s",
    "timing_s/update_actor": "time/update_s",
    "timing_s/step": "time/step_s",
}
#: A line with one of these is a training step (step 0 of ``val_before_train`` has none).
TRAINING_KEYS = ("critic/score/mean", "actor/grad_norm")


class VerlRunsMissing(RuntimeError):
    """Runs a script needs are missing or incomplete in the verl folder (a one-line message)."""


# -- the file logger's JSONL -------------------------------------------------------------------
def read_file_logger(path: str | Path) -> dict[int, dict[str, Any]]:
    """``step -> data`` of one ``FileLogger`` file; lines of the same step are merged, later
    values winning. A last line without its newline (a run killed mid-write) is skipped."""
    path = Path(path)
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    steps: dict[int, dict[str, Any]] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if i == len(lines):  # torn final line
                break
            raise ValueError(f"{path}:{i}: not a verl file-logger line (not JSON)") from None
        if not (isinstance(rec, dict) and isinstance(rec.get("data"), dict)):
            raise ValueError(f'{path}:{i}: not a verl file-logger line ({{"step", "data"}})')
        try:
            step = int(rec["step"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}:{i}: step {rec.get('step')!r} is not an integer") from None
        steps.setdefault(step, {}).update(rec["data"])
    return steps


def metric_files(folder: Path) -> list[Path]:
    """Rotated ``metrics.<n>.jsonl`` of earlier attempts (name order), then ``metrics.jsonl``."""
    rotated = sorted(p for p in folder.glob("metrics.*.jsonl") if p.name != METRICS_FILE)
    current = folder / METRICS_FILE
    return rotated + ([current] if current.exists() else [])


def _number(v: Any) -> float:
    if v is None:  # orjson writes NaN and infinities as null
        return math.nan
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
        return float(sum(v) / len(v))  # per-micro-batch values verl did not reduce
    return math.nan


def native_record(step: int, data: dict[str, Any]) -> dict[str, Any]:
    """One training step as the native trainer logs it: ``{"step", native names...}``, with
    verl's own names kept beside them."""
    rec: dict[str, Any] = {"step": step, **data}
    for verl_name, native in METRIC_NAMES.items():
        if verl_name in data:
            rec[native] = _number(data[verl_name])
    return rec


def read_metrics(folder: str | Path) -> list[dict[str, Any]]:
    """The training steps of a verl run folder, in step order, as native records."""
    steps: dict[int, dict[str, Any]] = {}
    for f in metric_files(Path(folder)):
        for step, data in read_file_logger(f).items():
            steps.setdefault(step, {}).update(data)
    return [
        native_record(s, d)
        for s, d in sorted(steps.items())
        if s >= 1 and any(k in d for k in TRAINING_KEYS)
    ]


# -- runs ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class VerlRun(Run):
    """A native ``Run`` backed by a verl run folder (``path``); ``final`` is its last checkpoint."""

    checkpoint: Path
    record: dict[str, Any]

    @property
    def final(self) -> Path:
        return self.checkpoint

    @property
    def info(self) -> dict[str, Any]:
        return self.record

    @property
    def weights_sha256(self) -> str:
        return self.record["weights_sha256"]


def folder_name(setting_key: str, algo: str, seed: int) -> str:
    """The generated folder of a run (``<setting>/<algo>/seed<seed>`` with ``/`` -> ``__``)."""
    return f"{setting_key}/{algo}/seed{seed}".replace("/", "__")


class VerlRuns:
    """The runs of a generated verl folder, looked up by the native config they stand for."""

    engine = ENGINE

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        runs = self.root / "runs"
        if not runs.is_dir():
            raise VerlRunsMissing(
                f"--from-verl {root}: no runs/ folder (generate one with `rlvr reproduce <name> "
                "--grid paper --engine verl --out DIR`)"
            )
        self.folders: dict[str, dict[str, Any]] = {}
        for f in sorted(runs.glob(f"*/{RUN_FILE}")):
            try:
                self.folders[f.parent.name] = read_json_object(f)
            except RecordError as e:
                raise VerlRunsMissing(f"--from-verl {root}: {e}") from None
        self._loaded: dict[str, VerlRun] = {}

    # -- lookup ---------------------------------------------------------------------------------
    def find(self, cfg, setting_key: str) -> tuple[str | None, str]:
        """``(folder name, note)`` of the run of ``cfg``; ``(None, why)`` when there is none."""
        key = run_key(cfg)
        same = [n for n, rec in self.folders.items() if rec.get("native_config_hash") == key]
        for name in same:  # two settings may train the same config: the setting's own first
            if self.folders[name].get("setting") == setting_key:
                return name, ""
        if same:
            return same[0], ""
        params = cfg.weights.params(cfg.algo)
        for name, rec in self.folders.items():
            same = (
                rec.get("setting") == setting_key
                and rec.get("algo") == cfg.algo
                and rec.get("seed") == cfg.seed
                and rec.get("model") == cfg.model
                and all(
                    rec.get("params", {}).get(k) in (None, v)
                    for k, v in params.items()
                    if k in rec.get("params", {})
                )
            )
            if same:
                return name, (
                    f"{name}: generated from native config {rec.get('native_config_hash')}, "
                    f"this checkout's is {key}; matched by setting, algorithm, seed, model and "
                    "weight parameters"
                )
        rec = self.folders.get(folder_name(setting_key, cfg.algo, cfg.seed))
        if rec is not None and rec.get("model") != cfg.model:
            return None, (
                f"its folder was generated for model {rec.get('model')!r}, native config "
                f"{rec.get('native_config_hash')}, not {cfg.model!r}, {key}: pass the "
                "--grid/--smoke it was generated with"
            )
        return None, "no run folder"

    def problem(self, name: str, cfg) -> str:
        """Why the run in folder ``name`` cannot be used yet ("" when it is complete)."""
        folder = self.root / "runs" / name
        want = self.expected_steps(folder, cfg)
        if not metric_files(folder):
            return f"no {METRICS_FILE}"
        try:
            metrics = read_metrics(folder)
        except ValueError as e:
            return str(e)
        steps = [m["step"] for m in metrics]
        if steps != list(range(1, len(steps) + 1)):
            gaps = sorted(set(range(1, max(steps, default=0) + 1)) - set(steps))
            return (
                f"{METRICS_FILE} lacks steps {_ranges(gaps)} (verl's file logger truncates it "
                "when a run restarts: keep earlier attempts as metrics.<n>.jsonl)"
            )
        if len(steps) < want:
            return f"metrics reach step {len(steps)} of {want}"
        ckpts = checkpoint_dirs(folder)
        if want not in ckpts:
            last = max(ckpts, default=None)
            return f"no checkpoint of step {want}" + (f" (last: {last})" if last else "")
        if not has_weights(ckpts[want]):
            return (
                f"checkpoints/global_step_{want}/actor/huggingface has no weights "
                "(actor.checkpoint.save_contents must include hf_model)"
            )
        return ""

    @staticmethod
    def expected_steps(folder: Path, cfg) -> int:
        """``trainer.total_training_steps`` of the run's last launch: the configuration Hydra
        composed for it, with run.sh's arguments (``outputs/<date>/<time>/.hydra/config.yaml``,
        in the run folder, where run.sh starts verl), else the run's ``config.yaml``, else
        ``cfg.steps``."""
        import yaml

        composed = sorted(folder.glob("outputs/*/*/.hydra/config.yaml"))
        for path in [*composed[-1:], folder / "config.yaml"]:
            try:
                doc = yaml.safe_load(read_text(path)) or {}  # capped: no FIFO or /dev/zero
                steps = doc.get("trainer", {}).get("total_training_steps")
            except (OSError, RecordError, yaml.YAMLError, AttributeError):
                continue
            if isinstance(steps, int) and steps > 0:
                return steps
        return int(cfg.steps)

    def run(self, planned) -> VerlRun:
        """The finished run of a ``PlannedRun`` (raises ``VerlRunsMissing`` naming the folder)."""
        cfg, setting_key = planned.config, planned.setting
        name, note = self.find(cfg, setting_key)
        if name is None:
            raise VerlRunsMissing(self.message([(self.expected_name(cfg, setting_key), note)]))
        if name in self._loaded:
            return self._loaded[name]
        why = self.problem(name, cfg)
        if why:
            raise VerlRunsMissing(self.message([(name, why)]))
        folder = self.root / "runs" / name
        metrics = read_metrics(folder)
        want = self.expected_steps(folder, cfg)
        hf = checkpoint_dirs(folder)[want]
        rec = self.folders[name]
        record = {
            "key": name,
            "engine": ENGINE,
            "verl_version": rec.get("verl_version", ""),
            "folder": str(folder),
            "checkpoint": str(hf.relative_to(folder)),
            "native_config_hash": rec.get("native_config_hash", ""),
            **run_summary(cfg, metrics),
            "compute_seconds": round(compute_seconds(metrics), 2),
            "weights_sha256": checkpoint_sha256(hf),
            **({"note": note} if note else {}),
        }
        run = VerlRun(name, folder, cfg, metrics, compute_seconds(metrics), hf, record)
        record["update_tokens"] = run.update_tokens
        self._loaded[name] = run
        return run

    @staticmethod
    def expected_name(cfg, setting_key: str) -> str:
        return folder_name(setting_key, cfg.algo, cfg.seed)

    def message(self, problems: list[tuple[str, str]], total: int | None = None) -> str:
        what = ", ".join(f"{n} ({why})" for n, why in problems)
        count = f"{len(problems)} of {total}" if total else str(len(problems))
        return (
            f"--from-verl {self.root}: {count} run(s) missing or incomplete in runs/: {what}; "
            "their run.sh finishes them (and pass the --grid/--smoke DIR was generated with)"
        )

    def check(self, plan) -> None:
        """Raise one ``VerlRunsMissing`` listing every run of ``plan`` that is missing or
        incomplete, before anything is evaluated."""
        problems = []
        for planned in plan.runs.values():
            cfg = planned.config
            name, note = self.find(cfg, planned.setting)
            if name is None:
                label = self.expected_name(cfg, planned.setting)
                if planned.extra:
                    label += " with " + ",".join(f"{k}={v}" for k, v in planned.extra.items())
                problems.append((label, note))
            elif why := self.problem(name, cfg):
                problems.append((name, why))
        if problems:
            raise VerlRunsMissing(self.message(problems, len(plan.runs)))

    # -- what the outputs record ----------------------------------------------------------------
    def record(self, out, label: str, run: VerlRun) -> None:
        """Record on ``out`` (a ``common.Output``) where run ``label`` came from; a folder matched
        without its config hash becomes a note of the output."""
        out.run_records[label].update(engine=ENGINE, run=run.info)
        note = run.info.get("note")
        if note and note not in out.notes:
            out.notes.append(note)

    def folder(self, key: str) -> Path:
        return self.root / "runs" / key

    def info(self, key: str) -> dict[str, Any]:
        """The record of run ``key`` (``runs.csv``); for a run an earlier invocation used and this
        one did not load, rebuilt from its folder (its last checkpoint with weights)."""
        if key in self._loaded:
            return dict(self._loaded[key].record)
        rec, folder = self.folders.get(key, {}), self.folder(key)
        keep = ("algo", "seed", "model", "verl_version", "native_config_hash")
        out = {"key": key, "engine": ENGINE, "env": rec.get("task", "")}
        out |= {k: rec[k] for k in keep if k in rec}
        try:
            metrics = read_metrics(folder)
        except (OSError, ValueError):
            return out
        out |= {"steps": len(metrics), "compute_seconds": round(compute_seconds(metrics), 2)}
        done = [hf for hf in checkpoint_dirs(folder).values() if has_weights(hf)]
        if done:
            out["checkpoint"] = str(done[-1].relative_to(folder))
            out["weights_sha256"] = checkpoint_sha256(done[-1])
        return out

    def provenance(self) -> dict[str, Any]:
        """What every output records about where its runs come from."""
        versions = sorted({str(r.get("verl_version", "")) for r in self.folders.values()} - {""})
        return {"engine": ENGINE, "verl_dir": str(self.root), "verl_versions": versions}


def _ranges(xs: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``1-3, 7``."""
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


__all__ = [
    "ENGINE",
    "METRIC_NAMES",
    "VerlRun",
    "VerlRuns",
    "VerlRunsMissing",
    "folder_name",
    "native_record",
    "read_file_logger",
    "read_metrics",
]
