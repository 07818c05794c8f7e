"""``rlvr sample`` and ``rlvr score``: environments from the command line, no trainer involved.

    rlvr sample --env kk -n 8 --seed 0 n_people=3 > tasks.jsonl
    rlvr score --env kk tasks_with_responses.jsonl --out scored.jsonl

``sample`` writes one JSON object per task: ``index``, ``seed``, ``prompt``, ``ground_truth`` (as
every export writes it, ``EnvSpec.export_gold``: the same value a TRL or verl row holds; K&K's
is Logic-RL's answer lines, and its scorer reads a name -> role mapping alike), the env's task
metadata and the scoring options its prompt implies (``EnvSpec.row_options``: K&K's
``prefilled_think`` when the prompt ends with ``<think>``, math's ``prefill`` when it ends with
the assistant prefill); ``--model`` starts the env from the prompt format that model carries.
``score`` reads JSONL lines with ``response`` and ``ground_truth`` (as ``sample`` wrote them,
plus a ``response`` field), scores each with the env's
pure reward function under the row's scoring options (``key=value`` arguments win), writes the
lines back with ``reward``, ``correct``, ``components`` and ``reason``, and prints a summary.
Lines that are not valid JSON (nested too deeply, an integer past Python's int-string limit...) or
lack a field are reported with their line number and skipped, never fatal: the lines after them
are scored. A missing input or an output that cannot be written (``--out /dev/full``) is one line,
exit 2."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter

import gymnasium as gym
from tqdm import tqdm

from rlvr.config import ConfigError, did_you_mean, parse_overrides
from rlvr.envs import env_names, env_spec


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def add_sample_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, choices=sorted(env_names()), help="environment")
    p.add_argument("-n", type=int, default=8, help="number of tasks")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the first task (task i uses seed+i)"
    )
    p.add_argument("--out", default="-", help="output JSONL (default: stdout)")
    p.add_argument(
        "--model",
        default=None,
        help="the model the prompts are for: the environment starts from the prompt format it "
        "carries (a tiny base's, a trained run's, a chat model's template)",
    )
    p.add_argument("kwargs", nargs="*", metavar="key=value", help="environment keyword arguments")


def _open(path: str, mode: str, what: str):
    """``open`` with a failure as one line (``ConfigError``, printed by ``rlvr.cli``)."""
    try:
        return open(path, mode, encoding="utf-8", errors="replace")
    except OSError as e:
        raise ConfigError(f"{what}: cannot open {path} ({e.strerror or e})") from None


@contextlib.contextmanager
def _output(path: str | None):
    """The output stream (stdout for "-"); a write that fails (a full disk, ``/dev/full``),
    including the last flush, is one line naming the file."""
    out = None if path is None else sys.stdout if path == "-" else _open(path, "w", "--out")
    try:
        yield out
        if out is not None:
            out.flush()
    except OSError as e:
        raise ConfigError(f"--out: cannot write to {path} ({e.strerror or e})") from None
    finally:
        if out is not None and out is not sys.stdout:
            try:
                out.close()
            except OSError:
                pass  # the flush above already failed and said so


def run_sample(args) -> int:
    kwargs = parse_overrides(args.kwargs)
    if args.model:
        # Only here: resolving a model name imports the models (torch); plain sampling stays light.
        from rlvr.models.prompt_formats import with_format

        kwargs = with_format(args.model, args.env, kwargs)[0]
    spec = env_spec(args.env)
    try:
        env = gym.make(spec.id, **kwargs)
    except (TypeError, ValueError, OSError) as e:  # a bad key=value or dataset: one line
        raise ConfigError(f"{env_spec(args.env).id}: {e}") from None
    try:
        with _output(args.out) as out:
            for i in range(args.n):
                prompt, info = env.reset(seed=args.seed + i)
                info = {k: v for k, v in info.items() if k != "messages"}
                rec = {"index": i, "seed": args.seed + i, "env": args.env, "prompt": prompt, **info}
                # The ground truth as every export carries it (TRL, verl: EnvSpec.export_gold),
                # and the scoring options the prompt implies: what ``score`` reads back.
                rec["ground_truth"] = spec.export_gold(info)
                rec.update(spec.export_options(kwargs, prompt))
                out.write(json.dumps(_jsonable(rec)) + "\n")
    finally:
        env.close()
    return 0


def add_score_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, choices=sorted(env_names()), help="environment")
    p.add_argument("input", help="JSONL with 'response' and 'ground_truth' fields ('-' for stdin)")
    p.add_argument("--out", default=None, help="write scored JSONL here")
    p.add_argument("kwargs", nargs="*", metavar="key=value", help="scorer keyword arguments")


def run_score(args) -> int:
    spec = env_spec(args.env)
    score = spec.score
    kwargs = parse_overrides(args.kwargs)
    unknown = [k for k in kwargs if spec.options and k not in spec.options]
    if unknown:
        raise ConfigError(
            f"{args.env} scorer: {unknown[0]!r} is not one of its options {sorted(spec.options)}"
            f"{did_you_mean(unknown[0], spec.options)}"
        )
    try:  # bad key=value arguments fail once, here, not on every line
        score("", "", **kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{args.env} scorer: {e}") from None
    src = sys.stdin if args.input == "-" else _open(args.input, "r", "input")
    n, total, n_correct, bad, reasons = 0, 0.0, 0, 0, Counter()
    try:
        with _output(args.out) as out:
            for lineno, line in enumerate(tqdm(src, desc="scoring", unit="resp", disable=None), 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    response, gt = rec["response"], rec["ground_truth"]
                    s = score(response, gt, **{**spec.read_options(rec), **kwargs})
                    scored = json.dumps(
                        _jsonable(
                            {
                                **rec,
                                "reward": s.reward,
                                "correct": s.correct,
                                "components": s.components,
                                "reason": s.reason,
                                "parsed": _jsonable(s.parsed),
                            }
                        )
                    )
                except (ValueError, KeyError, TypeError, RecursionError) as e:
                    bad += 1
                    reason = f"{type(e).__name__}: {str(e)[:200]}"
                    print(f"line {lineno}: skipped ({reason})", file=sys.stderr)
                    continue
                n, total, n_correct = n + 1, total + s.reward, n_correct + int(s.correct)
                reasons[s.reason or "correct"] += 1
                if out:
                    out.write(scored + "\n")
    finally:
        if src is not sys.stdin:
            src.close()
    summary = {
        "scored": n,
        "skipped": bad,
        "mean_reward": total / n if n else None,
        "accuracy": n_correct / n if n else None,
        "outcomes": dict(reasons.most_common()),
    }
    print(json.dumps(summary, indent=2))
    return 0 if n or not bad else 1
