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

``python -m rlvr.integrations.verl.scripts count ENV --split S --cap N [--env-arg k=v...]`` prints
``min(N, tasks in the split)``: run.sh exports that many tasks (a dataset smaller than the run's
``steps x prompts_per_step`` is exported whole and verl cycles over it in epochs, as the native
trainer does). ``... model-view MODEL --out DIR --drop FILE`` writes the model folder a run reads
when vLLM must not find some of its files (``model_view``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml

from rlvr.agents.algorithms import get_algorithm
from rlvr.agents.rollout.vllm import UNSUPPORTED_CONFIG_KEYS, unsupported_files
from rlvr.envs import env_spec
from rlvr.integrations.verl.config import (
    ATTN_IMPLEMENTATION,
    VERL_VERSION,
    VerlTranslationError,
    config_document,
    translate,
)
from rlvr.integrations.verl.data import parse_env_args
from rlvr.integrations.verl.results import folder_name
from rlvr.reproduce import figures
from rlvr.reproduce.common import Context, markdown_table
from rlvr.reproduce.grid import param_count, verl_gpus, verl_rollout_memory
from rlvr.reproduce.plan import Need, PlannedRun, build_plan
from rlvr.reproduce.runs import eval_config

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


RUN_SH = """#!/usr/bin/env bash
# {run_key}: {title}
# Generated by `{command}` from the native paper recipe ({native_hash}).
#   one node:     bash run.sh [extra Hydra overrides]   (--check: prepare and validate only)
#   Ray cluster:  ray job submit --address http://<head>:8265 -- bash {here_from_root}/run.sh
#                 (DIR on a filesystem every node shares; see ../../README.md)
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${{PYTHON:-python3}}"
cd "$HERE"

prepare() {{  # OUT ENV SPLIT CAP [KEY=VALUE...]: rlvr prepare-verl, min(CAP, tasks) tasks
  local out="$1" env="$2" split="$3" cap="$4" n tmp
  shift 4
  [[ -f "$out" ]] && return 0
  local args=()
  for kv in "$@"; do args+=(--env-arg "$kv"); done
  n="$("$PYTHON" -m rlvr.integrations.verl.scripts count "$env" --split "$split" --cap "$cap" \\
    ${{args[@]+"${{args[@]}}"}})"
  mkdir -p "$(dirname "$out")"
  tmp="$out.$$.tmp"
  "$PYTHON" -m rlvr.cli prepare-verl "$env" --split "$split" --n "$n" --out "$tmp" \\
    ${{args[@]+"${{args[@]}}"}}
  mv -f "$tmp" "$out"
}}

{prepare}
OVERRIDES=()
{retrieval}{model_view}
# verl's file logger truncates its file: keep an earlier attempt's lines (--from-verl reads
# metrics.NNN.jsonl first, in name order; a resumed run re-logs the steps since its checkpoint).
if [[ -s "$HERE/metrics.jsonl" ]]; then
  n=1
  while [[ -e "$(printf '%s/metrics.%03d.jsonl' "$HERE" "$n")" ]]; do n=$((n + 1)); done
  mv "$HERE/metrics.jsonl" "$(printf '%s/metrics.%03d.jsonl' "$HERE" "$n")"
fi
export VERL_FILE_LOGGER_PATH="$HERE/metrics.jsonl"
"$PYTHON" -m rlvr.integrations.verl.main --config-path "$HERE" --config-name config \\
  "data.train_files=[{train}]" \\
  "data.val_files=[{val}]" \\
  "trainer.default_local_dir='$HERE/checkpoints'" \\
  "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='$VERL_FILE_LOGGER_PATH'" \\
  ${{OVERRIDES[@]+"${{OVERRIDES[@]}}"}} "$@"
# --check (verl.main) composes and validates without training: not a finished run.
for arg in "$@"; do [[ "$arg" == --check ]] && exit 0; done
touch "$HERE/DONE"
"""

RETRIEVAL = """# Search QA: the retrieval service (Search-R1's POST /retrieve) for the agent loop.
# verl runs agent-loop workers on every node of its Ray cluster: a loopback URL, which reaches
# this node only, is refused (one line, exit 2) when the cluster has several nodes.
"$PYTHON" -m rlvr.integrations.verl.cluster --url "${{RLVR_RETRIEVAL_URL:-{url}}}" || exit 2
if [[ -n "${{RLVR_RETRIEVAL_URL:-}}" ]]; then
  OVERRIDES+=("rlvr.searchqa.retrieval_url=$RLVR_RETRIEVAL_URL")
else
  : "${{RLVR_INDEX:?set RLVR_INDEX to a folder written by rlvr index (e5 over wiki-18), or \\
RLVR_RETRIEVAL_URL to a running service}}"
  "$PYTHON" -m rlvr.cli retrieval-serve --index "$RLVR_INDEX" --host {host} --port {port} \\
    --topk {topk} &
  SERVER_PID=$!
  trap 'kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true' EXIT
  deadline=$((SECONDS + ${{RLVR_RETRIEVAL_WAIT_S:-3600}}))
  until "$PYTHON" -c "import urllib.request as u; u.urlopen('{health}', timeout=5)" \\
      2>/dev/null; do
    kill -0 "$SERVER_PID" 2>/dev/null || {{ echo "rlvr retrieval-serve exited" >&2; exit 1; }}
    (( SECONDS < deadline )) || {{ echo "retrieval service not healthy in time" >&2; exit 1; }}
    sleep 5
  done
fi
"""


MODEL_VIEW = """# {model}: hf_overrides remove {keys} for vLLM, which must then not find {files}
# in the model folder (rlvr.agents.rollout.vllm.UNSUPPORTED_FILES): the actor and vLLM read a view
# of the hub snapshot without them (links into this node's Hugging Face cache: on several nodes,
# keep HF_HOME on the shared filesystem).
MODEL_VIEW="${{RLVR_MODEL_VIEWS:-$ROOT/models}}/{slug}"
"$PYTHON" -m rlvr.integrations.verl.scripts model-view {model} --out "$MODEL_VIEW" {drop}
OVERRIDES+=("actor_rollout_ref.model.path=$MODEL_VIEW")
"""


def model_view(source: str, out: Path, drop: list[str]) -> Path:
    """``out``: a folder of links to every top-level entry of the model ``source`` (a local
    folder, or a hub id, downloaded with ``huggingface_hub.snapshot_download``) except ``drop``,
    with ``rlvr_model_view.json`` saying what it is. Reused when it exists for the same source
    and drops; written through a temporary folder and a rename, so a killed run leaves none."""
    out = Path(out)
    meta = {"source": source, "dropped": sorted(drop)}
    record = out / "rlvr_model_view.json"
    if record.exists():
        found = json.loads(record.read_text())
        if {k: found.get(k) for k in meta} != meta:
            raise SystemExit(f"{out}: a model view of {found.get('source')} already; remove it")
        return out
    if Path(source).is_dir():
        snapshot = Path(source).resolve()
    else:
        from huggingface_hub import snapshot_download

        snapshot = Path(snapshot_download(source)).resolve()
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True)
    for entry in sorted(snapshot.iterdir()):
        if entry.name not in drop:
            (tmp / entry.name).symlink_to(entry.resolve())
    (tmp / record.name).write_text(json.dumps({**meta, "snapshot": str(snapshot)}, indent=2))
    try:
        tmp.rename(out)
    except OSError:  # another run wrote it meanwhile: keep that one
        shutil.rmtree(tmp)
        if not record.exists():
            raise
    return out


def _prepare_lines(folder: str, files) -> str:
    lines = []
    for f in files:
        out = f'"$ROOT/data/{folder}/{f.label}.parquet"'
        args = " ".join(shlex.quote(a) for a in f.env_args())
        lines.append(f"prepare {out} {f.env} {f.split} {f.cap} {args}".rstrip())
    return "\n".join(lines)


def run_sh(files: dict[str, Any], command: str) -> str:
    rec = files["record"]
    train, *vals = files["data"]
    folder = files["folder"]
    retrieval = ""
    if "searchqa" in files["config"].get("rlvr", {}):  # the search-QA agent loop's service
        from urllib.parse import urlsplit

        sq = files["config"]["rlvr"]["searchqa"]
        url = urlsplit(sq["retrieval_url"])
        retrieval = RETRIEVAL.format(
            url=sq["retrieval_url"],
            host=url.hostname,
            port=url.port or 80,
            topk=sq["topk"],
            health=f"{url.scheme}://{url.hostname}:{url.port or 80}/health",
        )
    view = ""
    drop = unsupported_files(rec["hf_overrides"])
    if drop:
        view = MODEL_VIEW.format(
            model=shlex.quote(rec["model"]),
            keys=", ".join(rec["hf_overrides"]),
            files=", ".join(drop),
            slug=rec["model"].replace("/", "--"),
            drop=" ".join(f"--drop {shlex.quote(f)}" for f in drop),
        )
    return RUN_SH.format(
        run_key=rec["run_key"],
        model_view=view,
        title=f"{rec['setting']} {rec['tag']} seed {rec['seed']} on {rec['model']}, "
        f"{rec['gpus']} GPU(s)",
        command=command,
        native_hash=f"native run key {rec['native_config_hash']}",
        here_from_root=f"runs/{rec['run_key']}",
        prepare=_prepare_lines(folder, files["data"]),
        retrieval=retrieval,
        train=f"'$ROOT/data/{folder}/{train.label}.parquet'",
        val=",".join(f"'$ROOT/data/{folder}/{v.label}.parquet'" for v in vals),
    )


RUN_ALL = """#!/usr/bin/env bash
# Every run of this folder, one after another on this node (a run with a DONE file is skipped).
# PYTHON, RLVR_INDEX / RLVR_RETRIEVAL_URL (search QA) are passed through to each run.sh.
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
for run in {runs}; do
  if [[ -f "$HERE/runs/$run/DONE" ]]; then echo "== $run: done"; continue; fi
  echo "== $run"
  bash "$HERE/runs/$run/run.sh"
done
"""


def memory_cell(m: dict[str, Any]) -> str:
    """``0.43, KV 16.0 GiB/GPU (64/64)``: a run's vLLM memory plan in one cell."""
    offload = ", AdamW offloaded" if m["optimizer_offload"] else ""
    held = min(m["kv_sequences"], m["sequences_per_engine"])
    return (
        f"{m['gpu_memory_utilization']:.2f}, KV {m['kv_cache_GiB']:.1f} GiB/GPU "
        f"({held}/{m['sequences_per_engine']}){offload}"
    )


def readme(rows: list[dict[str, Any]], command: str) -> str:
    header = ["run", "model", "GPUs", "vLLM memory", "steps", "bound (h)", "used by", "native grid"]
    body = [
        [
            f"`{r['run_key']}`",
            r["model"],
            f"{r['gpus']}x {r['gpu']}",
            memory_cell(r["memory"]),
            r["steps"],
            f"{r['hours']:.0f}",
            ", ".join(r["fig_or_table"]),
            "yes" if r["in_native_grid"] else "no",
        ]
        for r in rows
    ]
    gpu_h = sum(r["hours"] * r["gpus"] for r in rows)
    return "\n".join(
        [
            "# verl launch folder for the paper's runs",
            "",
            f"Generated by `{command}` for verl {VERL_VERSION}. Each `runs/<run>/` holds "
            "`config.yaml` (verl's `ppo_trainer` plus the run's values and the `rlvr:` "
            "section), `run.sh` and `rlvr_run.json` (what the run is, for `--from-verl`). "
            "The values are the native paper recipe's (`rlvr/profiles/paper*.yaml`), "
            "translated by `rlvr/integrations/verl/config.py`; see docs/paper/ for each "
            "experiment.",
            "",
            "## What to run, in order",
            "",
            "1. A GPU node with verl 0.9.1 (its vLLM extra, `pip install 'verl[vllm]==0.9.1'`) "
            "and rlvr installed in one environment (docs/integrations_verl.md, Install); "
            "`PYTHON` names its interpreter (default `python3`). Models and datasets "
            "download from the Hugging Face hub on first use. The actor trains with torch's "
            f"`{ATTN_IMPLEMENTATION}` attention "
            "(`actor_rollout_ref.model.override_config.attn_implementation`), so flash-attn "
            "(verl's default, only in its `fsdp` extra, a CUDA build) is not needed.",
            "2. Search QA only: an index built with `rlvr index` (e5 over wiki-18), named by "
            "`RLVR_INDEX`; run.sh serves it on 127.0.0.1 for the run and stops it on exit. "
            "On several nodes, start `rlvr retrieval-serve --host <address>` where every node "
            "reaches it and set `RLVR_RETRIEVAL_URL` instead: verl runs agent-loop workers on "
            "every node, and run.sh (and the trainer) refuse a loopback URL on a cluster of more "
            "than one node.",
            "3. One run: `bash runs/<run>/run.sh` (it writes its data under `data/` when "
            "missing). Every run: `bash run_all.sh` (runs with a `DONE` file are skipped). "
            "Extra arguments of run.sh are Hydra overrides (e.g. "
            "`trainer.n_gpus_per_node=4`); `bash runs/<run>/run.sh --check` prepares the data "
            "and validates the composed config (rlvr section included) without training. "
            "Without GPUs, `RLVR_VERL_CPU=1` runs verl's trainer on the CPU with vLLM's CPU "
            "build, to check the wiring with a small model (docs/integrations_verl.md).",
            "4. On a Ray cluster: put this folder on a filesystem every node mounts, start "
            "Ray (`ray start --head` on one node, `ray start --address <head>:6379` on the "
            "others), then from the head node `ray job submit --address "
            "http://127.0.0.1:8265 -- bash $PWD/runs/<run>/run.sh trainer.nnodes=<N> "
            "trainer.n_gpus_per_node=<G>` (verl joins the running cluster; its FSDP "
            "workers spread over `nnodes x n_gpus_per_node` GPUs).",
            "5. Read back: `rlvr reproduce all --from-verl <this folder>` (figures, tables, "
            "claims, REPORT.md from each run's `metrics.jsonl` and last "
            "`checkpoints/global_step_*/actor/huggingface`).",
            "",
            "Each run writes `metrics.jsonl` (verl's file logger: one "
            '`{"step": N, "data": {...}}` line per step) and `checkpoints/`. Rerunning '
            "run.sh resumes from the last checkpoint (`trainer.resume_mode=auto`) and keeps "
            "the earlier `metrics.jsonl` as `metrics.NNN.jsonl` (verl's logger would truncate "
            "it); `--from-verl` reads them in order.",
            "",
            f"## Runs ({len(rows)}; bound: {gpu_h:,.0f} GPU-hours in all)",
            "",
            "`vLLM memory`: `gpu_memory_utilization` and the KV cache it leaves per GPU, and "
            "how many full-length rollouts that cache holds of each engine's share "
            "(`rlvr.reproduce.grid.verl_rollout_memory`; `rlvr_run.json`, `memory`). "
            "`max_model_len` is each run's prompt + response budget. Model config keys vLLM "
            "cannot serve are removed through `engine_kwargs.vllm.hf_overrides` "
            "(`rlvr_run.json`, `removed_config_keys`; Qwen2.5-7B-Instruct-1M's "
            "`dual_chunk_attention_config`); such a run.sh first writes a view of the hub "
            "snapshot without `sparse_attention_config.json` under `models/` "
            "(`RLVR_MODEL_VIEWS`) and trains from it (docs/integrations_verl.md, vLLM "
            "settings).",
            "",
            "`bound (h)`: an upper bound on wall time, every response at the full budget "
            f"at {ASSUMED_MFU:.0%} of the GPUs' bf16 peak "
            "(`rlvr.integrations.verl.scripts.estimate_hours`).",
            "",
            markdown_table(header, body),
            "",
        ]
    )


def write(g, names: list[str], seeds: list[int], out: Path, command: str) -> list[dict]:
    """Write the launch folder (module docstring); returns the runs' records."""
    out = Path(out)
    layout = DataLayout()
    rows = []
    for launch in grid(g, names, seeds):
        files = run_files(g, launch, layout)
        folder = out / "runs" / launch.run_key
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.yaml").write_text(
            f"# {launch.run_key}: verl {VERL_VERSION} ppo_trainer + the native paper recipe "
            f"(generated by `{command}`)\n"
            + yaml.safe_dump(files["config"], sort_keys=False, width=100)
        )
        (folder / "rlvr_run.json").write_text(json.dumps(files["record"], indent=2) + "\n")
        script = folder / "run.sh"
        script.write_text(run_sh(files, command))
        script.chmod(0o755)
        gpus = files["record"]["gpus"]
        val_tasks = sum(f.cap for f in files["data"][1:])
        hours = estimate_hours(files["setting"], files["cfg"], gpus, files["flat"], val_tasks)
        rows.append({**files["record"], "hours": hours})
    (out / "README.md").write_text(readme(rows, command))
    runs = " ".join(shlex.quote(r["run_key"]) for r in rows)
    run_all = out / "run_all.sh"
    run_all.write_text(RUN_ALL.format(runs=runs))
    run_all.chmod(0o755)
    return rows


# -- run.sh helper: how many tasks to export -----------------------------------------------------
def task_count(env: str, split: str, env_kwargs: dict[str, Any]) -> int | None:
    """Tasks in ``env``'s ``split`` (None: a procedural, unbounded stream)."""
    handle = gym.make(env_spec(env).id, **{**env_kwargs, "split": split})
    try:
        u = handle.unwrapped
        if hasattr(u, "num_tasks"):
            return u.num_tasks
        if hasattr(type(u), "__len__"):
            return len(u)
        return len(u.items)
    finally:
        handle.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlvr.integrations.verl.scripts")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("count", help="print min(--cap, tasks in the split)")
    c.add_argument("env")
    c.add_argument("--split", required=True)
    c.add_argument("--cap", type=int, required=True)
    c.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    v = sub.add_parser("model-view", help="a model folder of links without --drop files")
    v.add_argument("source", help="a hub id or a local model folder")
    v.add_argument("--out", required=True, type=Path)
    v.add_argument("--drop", action="append", default=[], metavar="FILE")
    args = p.parse_args(argv)
    if args.cmd == "model-view":
        print(model_view(args.source, args.out, args.drop))
        return 0
    if args.cap < 1:
        p.error(f"--cap must be >= 1, got {args.cap}")
    n = task_count(args.env, args.split, parse_env_args(args.env_arg))
    print(args.cap if n is None else min(args.cap, n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
