"""``rlvr sample`` and ``rlvr score``: environments from the command line, no trainer involved.

    rlvr sample --env kk -n 8 --seed 0 n_people=3 > tasks.jsonl
    rlvr score --env kk tasks_with_responses.jsonl --out scored.jsonl

``sample`` writes one JSON object per task: ``index``, ``seed``, ``prompt``, ``ground_truth`` and
the env's task metadata. ``score`` reads JSONL lines with ``response`` and ``ground_truth`` (as
``sample`` wrote them, plus a ``response`` field), scores each with the env's pure reward
function, writes the lines back with ``reward``, ``correct``, ``components`` and ``reason``, and
prints a summary. Lines that are not valid JSON or lack a field are reported, never fatal.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import gymnasium as gym
from tqdm import tqdm

from rlvr.config import ConfigError, parse_overrides
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
    p.add_argument("kwargs", nargs="*", metavar="key=value", help="environment keyword arguments")


def run_sample(args) -> int:
    kwargs = parse_overrides(args.kwargs)
    try:
        env = gym.make(env_spec(args.env).id, **kwargs)
    except (TypeError, ValueError) as e:  # a bad key=value: one line (``rlvr.cli`` prints it)
        raise ConfigError(f"{env_spec(args.env).id}: {e}") from None
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    try:
        for i in range(args.n):
            prompt, info = env.reset(seed=args.seed + i)
            info = {k: v for k, v in info.items() if k != "messages"}
            rec = {"index": i, "seed": args.seed + i, "env": args.env, "prompt": prompt, **info}
            out.write(json.dumps(_jsonable(rec)) + "\n")
    finally:
        env.close()
        if out is not sys.stdout:
            out.close()
    return 0


def add_score_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, choices=sorted(env_names()), help="environment")
    p.add_argument("input", help="JSONL with 'response' and 'ground_truth' fields ('-' for stdin)")
    p.add_argument("--out", default=None, help="write scored JSONL here")
    p.add_argument("kwargs", nargs="*", metavar="key=value", help="scorer keyword arguments")


def run_score(args) -> int:
    score = env_spec(args.env).score
    kwargs = parse_overrides(args.kwargs)
    try:  # bad key=value arguments fail once, here, not on every line
        score("", "", **kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{args.env} scorer: {e}") from None
    src = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8", errors="replace")
    out = open(args.out, "w") if args.out else None
    n, total, n_correct, bad, reasons = 0, 0.0, 0, 0, Counter()
    try:
        for lineno, line in enumerate(tqdm(src, desc="scoring", unit="resp", disable=None), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                response, gt = rec["response"], rec["ground_truth"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                bad += 1
                print(f"line {lineno}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
                continue
            s = score(response, gt, **kwargs)
            n, total, n_correct = n + 1, total + s.reward, n_correct + int(s.correct)
            reasons[s.reason or "correct"] += 1
            if out:
                rec.update(
                    reward=s.reward,
                    correct=s.correct,
                    components=s.components,
                    reason=s.reason,
                    parsed=_jsonable(s.parsed),
                )
                out.write(json.dumps(_jsonable(rec)) + "\n")
    finally:
        if src is not sys.stdin:
            src.close()
        if out:
            out.close()
    summary = {
        "scored": n,
        "skipped": bad,
        "mean_reward": total / n if n else None,
        "accuracy": n_correct / n if n else None,
        "outcomes": dict(reasons.most_common()),
    }
    print(json.dumps(summary, indent=2))
    return 0 if n or not bad else 1
