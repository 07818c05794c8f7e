"""``rlvr train env=<kk|math|searchqa|digits> algo=<...> out=DIR [key=value ...] [--resume]``.

Configuration layers: ``rlvr/profiles/{profile}.yaml`` (``profile=`` picks it; default
``default``), then ``{profile}_{env}.yaml`` if present, then the ``key=value`` arguments
(``optim.lr=1e-6``, ``env_kwargs.n_people=3``). ``--print-config`` shows the result and exits.
"""

from __future__ import annotations

import argparse
import sys

from rlvr.config import ConfigError, to_dict


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="env=kk algo=grpo_sg out=DIR steps=N model=micro|PATH|HUB_NAME "
        "profile=NAME ... (see docs/training.md)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest valid checkpoint under out=DIR",
    )
    parser.add_argument(
        "--allow-config-change",
        action="store_true",
        help="with --resume: continue although the configuration differs from "
        "the checkpoint's (the keys are printed)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved configuration as YAML and exit",
    )


def _fail(exc: BaseException) -> int:
    """Print the first line of an error as ``rlvr train: ...``; exit status 2."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    print(f"rlvr train: {lines[0]}", file=sys.stderr)
    return 2


def run_train(args: argparse.Namespace) -> int:
    import yaml

    from rlvr.training.train_config import load_train_config

    overrides = list(args.overrides)
    if args.resume:
        overrides.append("resume=true")
    try:
        if args.print_config:
            overrides = (
                overrides
                if any(o.startswith("out=") for o in overrides)
                else [*overrides, "out=unset"]
            )  # only shown, never written
        cfg = load_train_config(overrides)
    except ConfigError as e:
        return _fail(e)
    if args.print_config:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
        return 0
    from pathlib import Path

    from rlvr.agents.checkpoint import CheckpointError, check_writable
    from rlvr.agents.rollout import check_backend_present
    from rlvr.device import check_device_present
    from rlvr.locks import LOCK_FILE, FolderInUse, hold

    if args.resume and not Path(cfg.out).is_dir():  # a typo in out= must not start afresh
        return _fail(ConfigError(f"--resume: out={cfg.out} is not a folder (nothing to resume)"))
    try:  # configuration problems found while setting up: one line, exit 2
        check_device_present(cfg.device)
        check_backend_present(cfg.rollout.backend)
        check_writable(cfg.out, Path(cfg.out) / "checkpoints")
        # The run folder is this process's from before the model loads: a second trainer on the
        # same out= is refused at once, in one line.
        with hold(Path(cfg.out) / LOCK_FILE, wait=False, what=f"out={cfg.out}"):
            return _train(cfg, bool(args.allow_config_change))
    except (MemoryError, ConfigError, CheckpointError, OSError, FolderInUse) as e:
        return _fail(e)


def _train(cfg, allow_config_change: bool) -> int:
    from rlvr.agents.checkpoint import CheckpointError, write_failure
    from rlvr.agents.metrics import ToolFailureError
    from rlvr.training.trainer import Trainer

    trainer = Trainer(cfg)
    trainer.allow_config_change = allow_config_change
    try:
        records = trainer.train()
    except (MemoryError, FileExistsError, ConfigError, CheckpointError, ToolFailureError) as e:
        return _fail(e)
    except OSError as e:  # the metrics or the configuration could not be written: a full disk
        return _fail(write_failure(cfg.out, e))
    if records:
        last = records[-1]
        print(
            f"rlvr train: step {last['step']} reward/mean {last['reward/mean']:.4f} "
            f"accuracy {last['accuracy']:.4f}; metrics in {trainer.metrics_path}"
        )
    else:
        print(
            f"rlvr train: nothing to do (already at step {trainer.step}); "
            f"metrics in {trainer.metrics_path}"
        )
    return 0


def add_algorithms_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugins",
        nargs="*",
        default=[],
        metavar="MODULE",
        help="modules to import first (algorithms registered outside rlvr)",
    )


def run_algorithms(args: argparse.Namespace) -> int:
    """One line per registered algorithm: name, label, what it changes, where it comes from."""
    from rlvr.agents.algorithms import algorithm_names, get_algorithm, load_plugins

    try:
        load_plugins(args.plugins)
    except ValueError as e:
        print(f"rlvr algorithms: {e}", file=sys.stderr)
        return 2
    for name in algorithm_names():
        a = get_algorithm(name)
        parts = [f"weight={a.name}" if a.weight else "weight=1"]
        if a.stages is not None:
            parts.append(f"{a.n_stages} stages")
        if a.select_tokens is not None:
            parts.append("token selection")
        print(f"{name:<14} {a.label:<22} {', '.join(parts):<32} {a.source}")
    return 0
