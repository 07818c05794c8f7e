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

import torch


def add_arguments(p: argparse.ArgumentParser) -> None:
    from rlvr.models.presets import PRESETS

    p.add_argument("name", choices=sorted(PRESETS), help="preset to build")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="BuildConfig overrides")
    p.add_argument("--home", default=None, help="models directory (default: $RLVR_HOME/models)")
    p.add_argument("--rebuild", action="store_true", help="build even when a cached copy exists")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--eval", action="store_true", help="print greedy accuracy on held-out items")
    p.add_argument("--eval-n", type=int, default=100, help="held-out items per evaluated setting")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    from rlvr.models.build import ensure_built, with_overrides
    from rlvr.models.presets import PRESETS

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = with_overrides(PRESETS[args.name], args.overrides)
    path = ensure_built(cfg, home=args.home, progress=not args.quiet, rebuild=args.rebuild)
    record = json.loads((path / "build.json").read_text())
    print(path)
    print(json.dumps({k: record[k] for k in ("parameters", "vocab_size", "seconds", "sft")}))
    if args.eval:
        from rlvr.models.evaluate import evaluate_base
        from rlvr.models import load_model

        model, tokenizer = load_model(str(path))
        for row in evaluate_base(model, tokenizer, cfg.task, cfg.data, n=args.eval_n):
            print(json.dumps(row))
    return 0
