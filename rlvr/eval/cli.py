"""``rlvr eval key=value ...``: evaluate a checkpoint on an environment (see ``rlvr.eval.runner``).

Example: ``rlvr eval model=tiny-kk env=kk group_by=n_people group_values=3,4,5 n_items=100 k=8
temperature=0.7 out=evals/kk`` writes ``responses.jsonl`` and ``summary.json`` to ``out`` and
prints the metrics per group; ``--config FILE`` reads the fields from YAML first (the one
loader, ``rlvr.config.load_config``).
"""

from __future__ import annotations

import argparse
import json

from rlvr.agents.algorithms import load_plugins
from rlvr.config import ConfigError, config_key, layered, merge
from rlvr.data_paths import rlvr_home
from rlvr.envs import lift_env_keys, require_env
from rlvr.eval.config import EvalConfig
from rlvr.models.names import check_model_name
from rlvr.prompt_format import describe


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="EvalConfig fields, e.g. model=micro env=kk k=8 group_by=n_people "
        "group_values=3,4,5 (see rlvr.eval.runner.EvalConfig)",
    )
    parser.add_argument(
        "--config", default=None, metavar="FILE", help="a YAML file of EvalConfig fields"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def format_summary(summary: dict) -> str:
    """A Markdown table: one row per group, one column per metric."""
    metrics = sorted(
        {m for row in summary.values() for m in row if m not in ("n_items", "n_samples")}
    )
    lines = ["| group | items | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for group, row in summary.items():
        cells = [f"{row[m]:.3f}" if m in row else "" for m in metrics]
        lines.append(f"| {group} | {int(row.get('n_items', 0))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load_eval_config(config: str | None, overrides: list[str]) -> EvalConfig:
    """``EvalConfig`` of ``--config`` and ``key=value`` arguments (the one loader), after the
    ``plugins=[...]`` modules they name are imported (an env registered outside rlvr) and with
    the env's top-level keys under ``env_kwargs`` (``dataset=`` of ``env=custom``); the env and
    the model are checked before anything loads. Every refusal is a ``ConfigError``."""
    values = layered(config, overrides)
    plugins = values.pop("plugins", None) or []
    try:
        load_plugins([str(m) for m in (plugins if isinstance(plugins, list) else [plugins])])
    except ValueError as e:
        raise ConfigError(str(e)) from None
    values = lift_env_keys(values, EvalConfig.env)
    require_env(str(values.get("env", EvalConfig.env)))
    try:
        cfg = merge(EvalConfig(), values)
    except ConfigError:
        raise
    except ValueError as e:  # EvalConfig's own checks (k, pass_ks, group_by, device)
        raise ConfigError(str(e).removeprefix("EvalConfig.").removeprefix("EvalConfig: ")) from None
    check_model_name(cfg.model)
    return cfg


def run_eval(args: argparse.Namespace) -> int:
    """Bad configurations, models, datasets (``ConfigError``, printed by ``rlvr.cli``) and an
    ``out`` that cannot be written are one line, exit 2; the model name, the environment and
    ``out`` are checked before the model loads, so a bad one costs no evaluation."""
    cfg = load_eval_config(args.config, list(args.overrides))
    # Only now what evaluates (torch, transformers): a bad configuration is answered at once.
    from rlvr.agents.checkpoint import CheckpointError, check_writable
    from rlvr.eval.records import save_result
    from rlvr.eval.runner import evaluate
    from rlvr.models.loader import quiet_progress

    out = cfg.out or str(rlvr_home() / "evals" / config_key(cfg))
    try:
        check_writable(out)
    except CheckpointError as e:
        raise ConfigError(str(e)) from None
    if args.quiet:
        quiet_progress()
    result = evaluate(cfg, progress=not args.quiet)
    try:
        save_result(result, out)
    except OSError as e:  # a disk that filled during the evaluation
        raise ConfigError(f"out: cannot write to {out} ({e.strerror or e})") from None
    settings = {k: v for k, v in result.prompt.items() if k != "source"}
    print(f"prompt format: {describe(settings)} (from the {result.prompt.get('source')})")
    print(format_summary(result.summary))
    print(
        json.dumps(
            {"out": out, "seconds": round(result.seconds, 1), "config_hash": config_key(cfg)}
        )
    )
    return 0
