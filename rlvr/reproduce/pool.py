"""The pool of ``--jobs N``: train and evaluate everything a plan holds in N processes.

The scripts themselves run one training run after another. With ``--jobs N`` (N > 1) the runs,
continued-SFT references and evaluations of the plan (``rlvr.reproduce.plan``: what the named
figures declared they read) are first computed by a pool of N worker processes, each with
``cpu_count // N`` torch threads (a ~1M-parameter model does not use two cores well, so two
one-thread runs side by side finish sooner than two two-thread runs in a row); then the scripts
run as usual and find every result in the run cache. One pool holds all of it: a run's
evaluations, and the continued SFT its tokens budget, are queued when the run finishes, and the
bases' evaluations wait in the same queue, so no worker idles while another trains. Results are
the same ones the serial path writes: the cache is keyed by configuration hash, and a worker
calls the same ``ensure_run`` / ``ensure_sft_reference`` / ``ensure_eval``.

On a machine with CUDA GPUs, when the runs train on CUDA, each worker owns one GPU (its
``CUDA_VISIBLE_DEVICES`` is one of the parent's visible devices): a colocated vLLM engine and a
training run per GPU, never several on GPU 0. ``--jobs`` above the number of GPUs is capped to it,
with a message.

A worker ends with the reproduction that started it: killed or stopped by a signal, the parent
takes its workers along (``rlvr.lifetime.die_with_parent``), so a rerun that resumes from the
cache never races an orphan still training into the same folders.
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path

from rlvr.device import resolve_device
from rlvr.envs import env_spec
from rlvr.lifetime import die_with_parent
from rlvr.models.build import ensure_built, has_weights, models_dir
from rlvr.models.presets import parse_spec, preset_config
from rlvr.repro import set_threads
from rlvr.reproduce.common import Context
from rlvr.reproduce.keys import base_seed_of, model_identity, run_key
from rlvr.reproduce.plan import Plan
from rlvr.reproduce.runs import (
    ensure_eval,
    ensure_run,
    eval_config,
    eval_path,
    is_done,
    run_path,
)
from rlvr.reproduce.sft_reference import evaluated_reference


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
def _init_worker(threads: int, gpu_queue=None, parent: int | None = None) -> None:
    if parent is not None:
        die_with_parent(parent, signal.SIGTERM)
    if gpu_queue is not None:  # before torch initialises CUDA in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_queue.get(timeout=60)
    from transformers.utils import logging as hf_logging

    set_threads(threads)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


#: What a task returns: a line for the log, and the folders it finished (their records are kept).
Done = tuple[str, list[Path]]


def _train(cfg, cache: str, weights: bool = False) -> Done:
    run = ensure_run(cfg, Path(cache), say=lambda m: None, progress=False, weights=weights)
    said = (
        f"trained {cfg.env}/{cfg.algo} seed {cfg.seed} on {cfg.model} ({len(run.metrics)} "
        f"steps, {run.update_tokens} update tokens)"
    )
    return said, [run.path]


def _sft(setting, run_cfg, seed: int, cache: str, smoke: bool, model: str) -> Done:
    """Continued SFT on the update tokens of the finished run ``run_cfg``, then its evaluation;
    a reference restored from its record is trained again only when the evaluation is missing."""
    budget = ensure_run(run_cfg, Path(cache), say=lambda m: None, progress=False).update_tokens
    path, ecfg = evaluated_reference(
        setting,
        run_cfg,
        seed,
        budget,
        Path(cache),
        say=lambda m: None,
        progress=False,
        smoke=smoke,
        model=model,
    )
    ev = ensure_eval(ecfg, Path(cache), say=lambda m: None, progress=False)
    said = f"continued SFT seed {seed} of {model} ({budget} tokens) -> {path.name}, evaluated"
    return said, [path, ev.path]


def _build(model: str) -> Done:
    path = ensure_built(preset_config(model), progress=False)
    return f"built {model} -> {path.name}", [path]


def _eval(ecfg, cache: str) -> Done:
    ev = ensure_eval(ecfg, Path(cache), say=lambda m: None, progress=False)
    model = Path(ecfg.model).parent.name or ecfg.model
    return f"evaluated {ecfg.env} {model} -> {ev.key}", [ev.path]


#: ``(fn, args, then)``: ``fn(*args)`` in a worker; the tasks ``then`` are queued once it is done.
Task = tuple


def _count(tasks: Iterable[Task]) -> int:
    return sum(1 + _count(then) for _, _, then in tasks)


def _pool_map(
    ctx: Context, jobs: int, tasks: list[Task], label: str, gpus: list[str] | None = None
) -> None:
    """Run ``tasks`` in ``jobs`` processes, in the order given, each task's ``then`` queued when
    it finishes, ahead of the tasks not yet started; report progress. With ``gpus`` (one per
    worker, ``len(gpus) >= jobs``) each worker sees only its own GPU.

    At most ``jobs`` tasks are in the executor at once, so a finished run's evaluations start
    before the next run: an interrupted grid leaves whole results (a run and its evaluations),
    not a stack of trained runs whose evaluations never came. Submitting every task up front
    queued the follow-ups behind all runs: the smol grid's 18 runs (10-15 CPU hours) before its
    first evaluation."""
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
    total = _count(tasks)
    ctx.say(
        f"[reproduce] {label}: {total} task(s) on {jobs} processes x {threads} thread(s){where}"
    )
    with (
        ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=mp,
            initializer=_init_worker,
            initargs=(threads, queue, os.getpid()),
        ) as pool,
        tqdm(total=total, desc=label, disable=not ctx.progress) as bar,
    ):
        waiting = deque(tasks)
        pending: dict = {}
        start, finished = time.perf_counter(), 0

        def submit() -> None:
            while waiting and len(pending) < jobs:
                fn, args, then = waiting.popleft()
                pending[pool.submit(fn, *args)] = (fn, args, then)

        try:
            submit()
            while pending:
                done, _ = wait(set(pending), return_when=FIRST_COMPLETED)
                for f in done:
                    fn, args, then = pending.pop(f)
                    if f.exception() is not None:
                        left = _count(then) + _count(pending.values()) + _count(waiting)
                        ctx.say(
                            f"[reproduce] {label}: {_describe(fn, args)} failed, so the pool "
                            f"stopped: {left} other task(s) left undone (a run resumes from its "
                            "last checkpoint when the command runs again)"
                        )
                        raise f.exception()
                    said, folders = f.result()
                    for folder in folders:
                        ctx.keep(folder)
                    ctx.log.append(f"[reproduce] {said}")
                    bar.update(1)
                    finished += 1
                    if not ctx.progress:  # what the bar would say: a grid runs for hours
                        hours = (time.perf_counter() - start) / 3600
                        print(f"{ctx.log[-1]} [{finished} of {total}, {hours:.1f} h]", flush=True)
                    waiting.extendleft(reversed(then))
                submit()
        except BaseException:  # a failed task, Ctrl-C: stop here, not after every queued task
            _stop(pool)
            raise


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what ``pool`` has not started and end its workers now. Without it a failed task
    surfaced only when the executor's exit had run every queued one: on a full disk the pool
    went on starting runs that each failed at their first checkpoint, for hours, before the
    error was shown. The workers' runs resume from their last checkpoint."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        pool.shutdown(wait=False, cancel_futures=True)
        terminate()
        return
    # No public way before 3.14: the executor's own table of its processes, read before the
    # shutdown that clears it.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=30)


def _describe(fn, args) -> str:
    """A task in a line: the run, evaluation, reference or base it makes."""
    if fn is _train:
        cfg = args[0]
        return f"training {cfg.env}/{cfg.algo} seed {cfg.seed} on {cfg.model}"
    if fn is _eval:
        ecfg = args[0]
        return f"the evaluation of {Path(ecfg.model).parent.name or ecfg.model} on {ecfg.env}"
    if fn is _sft:
        return f"continued SFT seed {args[2]} of {args[5]}"
    if fn is _build:
        return f"the build of {args[0]}"
    return getattr(fn, "__name__", "a task")


def _cost(cfg) -> tuple:
    """Relative cost of a run, to start the slowest ones first: multi-turn episodes, then the
    rollout tokens of the whole run."""
    r = cfg.rollout
    tokens = cfg.steps * cfg.prompts_per_step * cfg.group_size * r.max_response_tokens
    return (env_spec(cfg.env).multi_turn, tokens)


def _base_missing(model: str) -> bool:
    """Whether preset base ``model`` lacks its weights here (never built, or only its record
    restored from a results folder)."""
    return parse_spec(model) is not None and not has_weights(models_dir() / model_identity(model))


def prefetch(ctx: Context, plan: Plan, jobs: int) -> None:
    """Train, then evaluate, everything ``plan`` holds, in ``jobs`` processes (module doc).

    Base by base: the work on one base (its runs with their evaluations and continued SFT, its
    own evaluations) is queued together, bases in seed order, the costliest runs first. A base
    whose weights are missing while some of that work is still to do is built first, in the
    pool, with that work as its follow-ups: an invocation that stops early leaves the runs of a
    few bases finished, not a base built for every run and few runs, and a base whose work is
    all recorded is never built."""
    cache = str(ctx.cache)
    runs = sorted(plan.runs.values(), key=lambda r: _cost(r.config), reverse=True)
    uses_gpu = any(resolve_device(r.config.device).type == "cuda" for r in runs)
    jobs, gpus, msg = worker_gpus(jobs, visible_gpus(), uses_gpu)
    if msg:
        ctx.say(msg)

    def eval_sets(setting_key: str) -> list:
        return list(ctx.grid.settings[setting_key].eval_sets.values()) or [None]

    def evals(setting_key: str, cfg, model: str, seed: int) -> list[Task]:
        setting = ctx.grid.settings[setting_key]
        return [
            (_eval, (eval_config(setting, cfg, model, seed=seed, eval_set=e), cache), [])
            for e in eval_sets(setting_key)
        ]

    sft = {
        run_key(cfg): (key, seed, cfg) for (key, (_, seed)), cfg in plan.references["sft"].items()
    }
    by_base: dict[str, list[Task]] = {}
    #: Bases with a run or evaluation still to make (continued SFT aside: it builds its base
    #: itself, if it comes to that).
    unfinished: set[str] = set()
    for r in runs:
        final = str(run_path(cache, r.key) / "final")
        then = evals(r.setting, r.config, final, r.seed) if r.evaluate else []
        # a run restored from its records (rlvr.reproduce.archive) is trained again only when an
        # evaluation of its weights is still to be made
        weights = any(not is_done(eval_path(cache, args[0])) for _, args, _ in then)
        if weights or not is_done(run_path(cache, r.key)):
            unfinished.add(r.config.model)
        if r.key in sft:  # continued SFT on this run's update tokens, and its evaluation
            key, seed, cfg = sft.pop(r.key)
            setting = ctx.grid.settings[key]
            then.append((_sft, (setting, cfg, seed, cache, ctx.smoke, cfg.model), []))
        by_base.setdefault(r.config.model, []).append((_train, (r.config, cache, weights), then))
    for key, seed, cfg in sft.values():  # a reference whose run the plan does not train
        setting = ctx.grid.settings[key]
        by_base.setdefault(cfg.model, []).append(
            (_sft, (setting, cfg, seed, cache, ctx.smoke, cfg.model), [])
        )
    for (key, (_, seed)), cfg in plan.references["base"].items():  # the untrained bases
        base_evals = evals(key, cfg, cfg.model, seed)
        if any(not is_done(eval_path(cache, args[0])) for _, args, _ in base_evals):
            unfinished.add(cfg.model)
        by_base.setdefault(cfg.model, []).extend(base_evals)
    order = sorted(by_base, key=base_seed_of)  # stable: the costliest first within a seed
    missing = [m for m in order if m in unfinished and _base_missing(m)]
    if len(missing) == 1:  # nothing to do beside it: built here, with its progress shown
        ctx.keep(ensure_built(preset_config(missing[0]), progress=ctx.progress))
        missing = []
    elif missing:
        ctx.say(f"[reproduce] {len(missing)} base(s) to build, each before its own runs: {missing}")
    tasks: list[Task] = []
    for model in order:
        if model in missing:
            tasks.append((_build, (model,), by_base[model]))
        else:
            tasks += by_base[model]
    _pool_map(ctx, jobs, _unique(tasks), "runs and evaluations", gpus)


def _unique(tasks: list[Task]) -> list[Task]:
    """``tasks`` (and their ``then``) without repeats: an evaluation two figures ask for once."""
    seen: set[str] = set()

    def keep(ts: list[Task]) -> list[Task]:
        out = []
        for fn, args, then in ts:
            k = repr((fn.__name__, args))
            if k not in seen:
                seen.add(k)
                out.append((fn, args, keep(then)))
        return out

    return keep(tasks)


__all__ = ["prefetch", "visible_gpus", "worker_gpus"]
