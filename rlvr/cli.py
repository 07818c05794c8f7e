"""The ``rlvr`` command.

Each sub-command lives in the module that owns it and exposes ``add_<name>_arguments(parser)``
and ``run_<name>(args) -> int`` (hyphens in the name read as underscores) (or plain
``add_arguments``/``run``); sub-commands that take ``key=value`` overrides add a positional
``overrides`` argument with ``nargs="*"``; this table maps the sub-command's name to that module,
imported only when the sub-command is used (so ``rlvr --help`` stays fast and one broken extra
never blocks another).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rlvr.errors import UserError, first_line
from rlvr.repro import MODES, apply_kernel_mode

#: name -> (module, one-line help). A new sub-command is one line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "sample": (
        "rlvr.sample_score",
        "sample tasks (prompts + ground truth) from an environment as JSONL",
    ),
    "score": (
        "rlvr.sample_score",
        "score responses from a JSONL file with an environment's reward",
    ),
    "index": (
        "rlvr.envs.searchqa.cli",
        "build a FAISS search index (flat/hnsw/ivfpq) from a passage JSONL",
    ),
    "retrieval-serve": (
        "rlvr.envs.searchqa.cli",
        "serve a search index over Search-R1's POST /retrieve on loopback",
    ),
    "eval": (
        "rlvr.eval.cli",
        "evaluate a checkpoint on an environment: greedy, avg@k, pass@k, EM/F1 as JSONL",
    ),
    "reproduce": (
        "rlvr.reproduce.cli",
        "reproduce a figure or table of the paper (fig1..fig4, table_*, sweep, all)",
    ),
    "train": (
        "rlvr.training.cli",
        "train a policy with GRPO / GRPO-SG / baselines on an environment",
    ),
    "algorithms": (
        "rlvr.training.cli",
        "list the registered algorithms (rlvr train algo=NAME)",
    ),
    "build-model": (
        "rlvr.models.cli",
        "build (or find cached) a tiny base model: tokenizer + Qwen2 + SFT warm start",
    ),
    "fetch-data": (
        "rlvr.fetch_data",
        "copy hub datasets (paper, K&K, DeepScaleR, FlashRAG) to JSONL for offline runs",
    ),
    "machine": (
        "rlvr.machine",
        "print this machine as results record it (CPU, ISA, kernel mode), or its per-kernel "
        "fingerprint",
    ),
    "prepare-verl": (
        "rlvr.integrations.verl.data",
        "write environment tasks as verl-ready parquet (chat prompt, ground truth)",
    ),
}


def _adder(mod, name):
    attr = name.replace("-", "_")
    return getattr(mod, f"add_{attr}_arguments", None) or getattr(mod, "add_arguments")


def _runner(mod, name):
    attr = name.replace("-", "_")
    return getattr(mod, f"run_{attr}", None) or getattr(mod, "run")


def kernel_mode_for(argv: list[str]) -> str:
    """``--kernels`` (before the command), else ``$RLVR_KERNELS``, else ``reproducible`` on the
    CPU grids and ``native`` for ``reproduce --grid paper`` (GPU runs; see rlvr.repro)."""
    if "--kernels" in argv[:-1] and argv.index("--kernels") < _command_index(argv):
        return argv[argv.index("--kernels") + 1]
    if os.environ.get("RLVR_KERNELS"):
        return os.environ["RLVR_KERNELS"]
    paper = any(
        a in ("--grid=paper", "--profile=paper") or (a in ("--grid", "--profile") and b == "paper")
        for a, b in zip(argv, argv[1:] + [""])
    )
    return "native" if paper else "reproducible"


def _command_index(argv: list[str]) -> int:
    return next((i for i, a in enumerate(argv) if a in COMMANDS), len(argv))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # A console script's sys.path starts at the script's folder: add the working directory, as
    # ``python -m`` does, so plugins=[my_lab.algos] and reward=my_lab.rewards:f import from where
    # the command runs (at the end, so that a file there never shadows an installed package).
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    # Before any sub-command module (and so torch) is imported: the kernel libraries read these
    # variables when they load. Worker processes inherit them.
    apply_kernel_mode(kernel_mode_for(argv))
    parser = argparse.ArgumentParser(
        prog="rlvr",
        description="RL with verifiable rewards: environments, GRPO-family training, evaluation "
        "and the reproduction of GRPO-SG (arXiv 2511.00066).",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--kernels",
        choices=MODES,
        default=None,
        help="CPU kernels: reproducible (the same bits on any x86-64 CPU with AVX2, Intel "
        "or AMD, one thread per process; default except --grid paper), mkl-avx2 "
        "(faster; the same bits among CPUs of one vendor) or native (the processor's own "
        "choice); also $RLVR_KERNELS",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    ci = _command_index(argv)
    chosen = argv[ci] if ci < len(argv) else None
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            _adder(importlib.import_module(module), name)(p)
    args, rest = parser.parse_known_args(argv)
    # argparse cannot take key=value positionals after options (``score in.jsonl --out x k=v``):
    # hand such leftovers to the sub-command's key=value list when it has one.
    kv_dest = next(
        (d for d in ("overrides", "kwargs") if isinstance(getattr(args, d, None), list)), None
    )
    if rest:
        if kv_dest is None or any(r.startswith("-") or "=" not in r for r in rest):
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        getattr(args, kv_dest).extend(rest)
    if args.version:
        from rlvr import __version__

        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return 0
    mod = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(_runner(mod, args.command)(args) or 0)
    except UserError as e:  # bad input any sub-command reports late: one line, exit 2
        print(f"rlvr {args.command}: {first_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
