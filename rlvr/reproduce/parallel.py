"""``rlvr reproduce ... --jobs N``: train and evaluate everything a script needs in N processes.

The scripts themselves run one training run after another. With ``--jobs N`` (N > 1) the runs,
continued-SFT references and evaluations they will ask for are first computed by a pool of N
worker processes, each with ``cpu_count // N`` torch threads (a ~1M-parameter model does not
use two cores well, so two one-thread runs side by side finish sooner than two two-thread runs in
a row); then the scripts run as usual and find every result in the run cache. Results are the
same ones the serial path writes: the cache is keyed by configuration hash, and a worker calls
the same ``ensure_run`` / ``ensure_sft_reference`` / ``ensure_eval``.

On a machine with CUDA GPUs, when the runs train on CUDA, each worker owns one GPU (its
``CUDA_VISIBLE_DEVICES`` is one of the parent's visible devices): a colocated vLLM engine and a
training run per GPU, never several on GPU 0. ``--jobs`` above the number of GPUs is capped to it,
with a message.

``required_runs`` states which runs each script uses; it must follow the scripts (a test checks
that the scripts train nothing beyond it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from rlvr.reproduce.common import Context
from rlvr.reproduce.profiles import KK_METHODS
from rlvr.reproduce.runs import eval_config, run_key, train_config

#: (setting key, algorithm, config overrides) of a training run; one per draw is trained.
Need = tuple[str, str, dict[str, Any]]
#: (base seed, RL seed) of a draw.
Unit = tuple[int, int]


def required_runs(ctx: Context, names: Iterable[str]) -> list[tuple[Need, list[Unit]]]:
    """The training runs (and their draws) that the scripts ``names`` use, without duplicates."""
    from rlvr.reproduce import fig2, tables, trajectories

    names = set(names)
    if "all" in names:
        names |= {"fig1", "fig2", "fig3", "fig4", "table_kk", "table_math", "table_qa", "sweep"}
    envs = {s.env for s in ctx.profile.settings.values()}
    needs: list[tuple[Need, list[Unit]]] = []

    def add(
        key: str, algo: str, extra: dict[str, Any] | None = None, units: list[Unit] | None = None
    ):
        if key in ctx.profile.settings:
            draws = ctx.units() if units is None else units
            needs.append(((key, algo, dict(extra or {})), list(draws)))

    if "table_kk" in names:
        for m in KK_METHODS:
            add("kk", m)
    if "fig2" in names:
        for m in fig2.RL_METHODS:
            add("kk", m)
    if "fig1" in names:
        add("kk", "grpo", units=ctx.units()[:1])
    if names & {"fig3", "fig4"}:
        for env in trajectories.SETTINGS:
            if env in envs:
                for m in trajectories.METHODS:
                    add(env, m)
    for name, key in (("table_math", "math"), ("table_qa", "searchqa")):
        if name in names:
            for m in tables.METHODS:
                if m != "base":
                    add(key, m)
    if "sweep" in names:
        units = [(b, s) for b in ctx.base_seeds for s in sweep_seeds(ctx)]
        add("kk", "grpo_sg", units=units)
        for param, values in ctx.profile.sweep.items():
            for v in values:
                add("kk", "grpo_sg", {f"weights.{param}": float(v)}, units=units)
    merged: dict[str, tuple[Need, list[Unit]]] = {}
    for need, seeds in needs:
        k = repr(need)
        if k in merged:
            merged[k] = (need, sorted(set(merged[k][1]) | set(seeds)))
        else:
            merged[k] = (need, seeds)
    return list(merged.values())


def sweep_seeds(ctx: Context) -> list[int]:
    """Seeds of the sweep's non-default points (the profile's ``sweep_seeds`` first seeds)."""
    n = ctx.profile.sweep_seeds or len(ctx.seeds)
    return ctx.seeds[:n]


# -- one GPU per worker --------------------------------------------------------------------------
def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as ``CUDA_VISIBLE_DEVICES`` entries."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [x.strip() for x in env.split(",") if x.strip()][:n]
    return [str(i) for i in range(n)]


def worker_gpus(jobs: int, gpus: list[str], uses_gpu: bool) -> tuple[int, list[str], str]:
    """``(jobs, one GPU per worker, message)``: jobs capped to the GPUs when the runs use them."""
    if not uses_gpu or not gpus:
        return jobs, [], ""
    if jobs > len(gpus):
        msg = (
            f"[reproduce] --jobs {jobs} capped to {len(gpus)}: one GPU per worker, and "
            f"{len(gpus)} GPU(s) are visible (CUDA_VISIBLE_DEVICES={','.join(gpus)})"
        )
        return len(gpus), gpus, msg
    return jobs, gpus[:jobs], ""


# -- worker entry points (top level, so the spawn context can pickle them) ----------------------
def _init_worker(threads: int, gpu_queue=None) -> None:
    if gpu_queue is not None:  # before torch initialises CUDA in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_queue.get(timeout=60)
    from transformers.utils import logging as hf_logging

    from rlvr.repro import set_threads

    set_threads(threads)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _train(cfg, cache: str) -> str:
    from rlvr.reproduce.runs import ensure_run

    run = ensure_run(cfg, Path(cache), say=lambda m: None, progress=False)
    return (
        f"trained {cfg.env}/{cfg.algo} seed {cfg.seed} on {cfg.model} ({len(run.metrics)} "
        f"steps, {run.update_tokens} update tokens)"
    )


def _sft(setting, seed: int, budget: int, cache: str, smoke: bool, model: str) -> str:
    from rlvr.reproduce.runs import ensure_sft_reference

    path = ensure_sft_reference(
        setting,
        seed,
        budget,
        Path(cache),
        say=lambda m: None,
        progress=False,
        smoke=smoke,
        model=model,
    )
    return f"continued SFT seed {seed} of {model} ({budget} tokens) -> {path.name}"


def _build(model: str) -> str:
    from rlvr.models.build import ensure_built
    from rlvr.models.presets import preset_config

    return f"built {model} -> {ensure_built(preset_config(model), progress=False).name}"


def _eval(ecfg, cache: str) -> str:
    from rlvr.reproduce.runs import ensure_eval

    ev = ensure_eval(ecfg, Path(cache), say=lambda m: None, progress=False)
    return f"evaluated {ecfg.env} {Path(ecfg.model).parent.name or ecfg.model} -> {ev.key}"


def _pool_map(
    ctx: Context, jobs: int, tasks: list[tuple], label: str, gpus: list[str] | None = None
) -> None:
    """Run ``(fn, *args)`` tasks in ``jobs`` processes, longest first as given; report progress.
    With ``gpus`` (one per worker, ``len(gpus) >= jobs``) each worker sees only its own GPU."""
    if not tasks:
        return
    from tqdm.auto import tqdm

    threads = max(1, (os.cpu_count() or 1) // jobs)
    mp = get_context("spawn")
    queue = None
    if gpus:
        queue = mp.Queue()
        for g in gpus[:jobs]:
            queue.put(g)
    where = f" on GPUs {','.join(gpus[:jobs])}" if gpus else ""
    ctx.say(
        f"[reproduce] {label}: {len(tasks)} task(s) on {jobs} processes x {threads} "
        f"thread(s){where}"
    )
    with (
        ProcessPoolExecutor(
            max_workers=jobs, mp_context=mp, initializer=_init_worker, initargs=(threads, queue)
        ) as pool,
        tqdm(total=len(tasks), desc=label, disable=not ctx.progress) as bar,
    ):
        pending = {pool.submit(fn, *args) for fn, *args in tasks}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                ctx.log.append(f"[reproduce] {f.result()}")  # re-raises a worker's error here
                if not ctx.progress:
                    print(ctx.log[-1], flush=True)
                bar.update(1)


def _cost(setting_env: str) -> int:
    """Relative cost of a run, to start the slowest ones first (multi-turn QA >> K&K > math)."""
    return {"searchqa": 3, "kk": 2, "math": 1}.get(setting_env, 1)


def _build_bases(ctx: Context, models: Iterable[str], jobs: int) -> None:
    """Build the missing preset bases here, before any run needs one (workers would otherwise
    race to build the same base): one at a time in this process, or side by side in the pool
    when several are missing."""
    from rlvr.models.build import ensure_built, models_dir
    from rlvr.models.presets import parse_spec, preset_config
    from rlvr.reproduce.runs import model_identity

    missing = [
        m
        for m in dict.fromkeys(models)
        if parse_spec(m) is not None
        and not (models_dir() / model_identity(m) / "build.json").exists()
    ]
    if len(missing) > 1 and jobs > 1:
        _pool_map(ctx, jobs, [(_build, m) for m in missing], "base models")

    for m in missing:
        ensure_built(preset_config(m), progress=ctx.progress)


def prefetch(ctx: Context, names: Iterable[str], jobs: int) -> None:
    """Train, then evaluate, everything ``names`` need, in ``jobs`` processes (see module doc)."""
    from rlvr.reproduce import tables
    from rlvr.reproduce.runs import DONE, Run, ensure_run, ensure_sft_reference

    names = list(names)
    cache = str(ctx.cache)
    runs: list[tuple[str, Any]] = []
    for (key, algo, extra), units in required_runs(ctx, names):
        for base_seed, seed in units:
            runs.append(
                (
                    key,
                    train_config(ctx.profile.settings[key], algo, seed, extra, base_seed=base_seed),
                )
            )
    runs.sort(key=lambda kc: -_cost(ctx.profile.settings[kc[0]].env))
    from rlvr.agents.trainer import resolve_device

    uses_gpu = any(resolve_device(cfg.device).type == "cuda" for _, cfg in runs)
    jobs, gpus, msg = worker_gpus(jobs, visible_gpus(), uses_gpu)
    if msg:
        ctx.say(msg)
    _build_bases(ctx, [cfg.model for _, cfg in runs], jobs)
    todo = [
        (_train, cfg, cache)
        for _, cfg in runs
        if not (Path(cache) / "runs" / run_key(cfg) / DONE).exists()
    ]
    _pool_map(ctx, jobs, todo, "training runs", gpus)

    def finished(cfg) -> Run:  # a cache hit after the pool (trained here only if a worker failed)
        return ensure_run(cfg, ctx.cache, say=ctx.say, progress=ctx.progress)

    evals, sft = [], []
    for key, cfg in runs:
        setting = ctx.profile.settings[key]
        run = finished(cfg)
        for eval_set in list(setting.eval_sets.values()) or [None]:
            evals.append(
                eval_config(setting, cfg, str(run.final), seed=cfg.seed, eval_set=eval_set)
            )
    wanted = set(names)
    base_for = [
        key
        for key, script in (("kk", "fig2"), ("math", "table_math"), ("searchqa", "table_qa"))
        if key in ctx.profile.settings and (script in wanted or "all" in wanted)
    ]
    for key in base_for:  # the untrained base models, once per draw
        setting = ctx.profile.settings[key]
        for base_seed, seed in ctx.units():
            cfg = train_config(setting, "grpo", seed, base_seed=base_seed)
            for eval_set in list(setting.eval_sets.values()) or [None]:
                evals.append(eval_config(setting, cfg, cfg.model, seed=seed, eval_set=eval_set))
    sft_for = [
        key
        for key in base_for
        if ctx.profile.sft_reference and (key == "kk" or tables.has_sft_row(ctx, key))
    ]
    for key in sft_for:  # continued SFT on the update tokens of the matching GRPO run
        setting = ctx.profile.settings[key]
        for base_seed, seed in ctx.units():
            run = finished(train_config(setting, "grpo", seed, base_seed=base_seed))
            sft.append((_sft, setting, seed, run.update_tokens, cache, ctx.smoke, run.config.model))
    _pool_map(ctx, jobs, sft, "continued SFT references", gpus)
    for key in sft_for:  # their evaluations need the SFT folders, which exist now
        setting = ctx.profile.settings[key]
        for base_seed, seed in ctx.units():
            cfg = train_config(setting, "grpo", seed, base_seed=base_seed)
            path = ensure_sft_reference(
                setting,
                seed,
                finished(cfg).update_tokens,
                ctx.cache,
                say=ctx.say,
                progress=False,
                smoke=ctx.smoke,
                model=cfg.model,
            )
            evals.append(eval_config(setting, cfg, str(path), seed=seed))
    seen, unique = set(), []
    for e in evals:
        k = repr(e)
        if k not in seen:
            seen.add(k)
            unique.append((_eval, e, cache))
    _pool_map(ctx, jobs, unique, "evaluations", gpus)


__all__ = ["prefetch", "required_runs", "sweep_seeds", "visible_gpus", "worker_gpus"]
