"""``rlvr build-model``: build (or find in the cache) a tiny base model and print its directory.

    rlvr build-model tiny-kk                      # cached under $RLVR_HOME/models
    rlvr build-model tiny-math sft.steps=500 --eval
    rlvr build-model tiny-kk --rebuild --threads 2

Overrides are ``key=value`` on the preset's ``BuildConfig`` (``sft.steps``, ``arch.hidden_size``,
``data.<setting>`` ...); any override changes the cache key, so it builds a new directory.
"""

from __future__ import annotations

import argparse
import json

from rlvr.files import read_json_object
from rlvr.repro import check_threads, set_threads


def add_arguments(p: argparse.ArgumentParser) -> None:
    from rlvr.models.names import PRESET_NAMES

    p.add_argument("name", choices=sorted(PRESET_NAMES), help="preset to build")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="BuildConfig overrides")
    p.add_argument(
        "--base-seed",
        type=int,
        default=0,
        help="build the preset from another seed (the base <name>@N of reproduce)",
    )
    p.add_argument("--home", default=None, help="models directory (default: $RLVR_HOME/models)")
    p.add_argument("--rebuild", action="store_true", help="build even when a cached copy exists")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: torch's default; the reproducible kernel mode runs one)",
    )
    p.add_argument("--eval", action="store_true", help="print greedy accuracy on held-out items")
    p.add_argument("--eval-n", type=int, default=100, help="held-out items per evaluated setting")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args) -> int:
    from rlvr.models.build import ensure_built, with_overrides
    from rlvr.models.loader import quiet_progress
    from rlvr.models.presets import base_spec, preset_config

    try:
        check_threads(args.threads, "--threads")
    except ValueError as e:
        raise SystemExit(f"rlvr build-model: {e}") from None
    set_threads(args.threads)
    if args.base_seed < 0:
        raise SystemExit(f"--base-seed must be >= 0, got {args.base_seed}")
    cfg = with_overrides(preset_config(base_spec(args.name, args.base_seed)), args.overrides)
    if args.quiet:
        quiet_progress()
    try:
        path = ensure_built(cfg, home=args.home, progress=not args.quiet, rebuild=args.rebuild)
    except RuntimeError as e:  # no draw passed its acceptance check; a tokenizer that reloads wrong
        raise SystemExit(f"rlvr build-model: {e}") from None
    record = read_json_object(path / "build.json")
    print(path)
    print(
        json.dumps(
            {
                k: record[k]
                for k in (
                    "parameters",
                    "vocab_size",
                    "seconds",
                    "sft",
                    "weights_sha256",
                    "accept",
                    "rejected",
                )
                if k in record
            }
        )
    )
    if args.eval:
        from rlvr.models import load_model
        from rlvr.models.evaluate import evaluate_base

        model, tokenizer = load_model(str(path))
        for row in evaluate_base(model, tokenizer, cfg.task, cfg.data, n=args.eval_n):
            print(json.dumps(row))
    return 0
