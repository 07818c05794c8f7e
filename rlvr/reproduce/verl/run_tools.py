"""What a verl launch folder's ``run.sh`` runs on the node before verl (``python -m
rlvr.reproduce.verl.run_tools``):

- ``count ENV --split S --cap N [--env-arg k=v...]`` prints ``min(N, tasks in the split)``:
  run.sh exports that many tasks (a dataset smaller than the run's ``steps x prompts_per_step``
  is exported whole and verl cycles over it in epochs, as the native trainer does);
- ``model-view MODEL --out DIR --drop FILE`` writes the model folder a run reads when vLLM must
  not find some of its files (``model_view``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym

from rlvr.envs import env_spec
from rlvr.integrations.verl.data import parse_env_args


def model_view(source: str, out: Path, drop: list[str]) -> Path:
    """``out``: a folder of links to every top-level entry of the model ``source`` (a local
    folder, or a hub id, downloaded with ``huggingface_hub.snapshot_download``) except ``drop``,
    with ``rlvr_model_view.json`` saying what it is. Reused when it exists for the same source
    and drops; written through a temporary folder and a rename, so a killed run leaves none."""
    out = Path(out)
    meta = {"source": source, "dropped": sorted(drop)}
    record = out / "rlvr_model_view.json"
    if record.exists():
        found = json.loads(record.read_text())
        if {k: found.get(k) for k in meta} != meta:
            raise SystemExit(f"{out}: a model view of {found.get('source')} already; remove it")
        return out
    if Path(source).is_dir():
        snapshot = Path(source).resolve()
    else:
        from huggingface_hub import snapshot_download

        snapshot = Path(snapshot_download(source)).resolve()
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True)
    for entry in sorted(snapshot.iterdir()):
        if entry.name not in drop:
            (tmp / entry.name).symlink_to(entry.resolve())
    (tmp / record.name).write_text(json.dumps({**meta, "snapshot": str(snapshot)}, indent=2))
    try:
        tmp.rename(out)
    except OSError:  # another run wrote it meanwhile: keep that one
        shutil.rmtree(tmp)
        if not record.exists():
            raise
    return out


def task_count(env: str, split: str, env_kwargs: dict[str, Any]) -> int | None:
    """Tasks in ``env``'s ``split`` (None: a procedural, unbounded stream)."""
    handle = gym.make(env_spec(env).id, **{**env_kwargs, "split": split})
    try:
        u = handle.unwrapped
        if hasattr(u, "num_tasks"):
            return u.num_tasks
        if hasattr(type(u), "__len__"):
            return len(u)
        return len(u.items)
    finally:
        handle.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlvr.reproduce.verl.run_tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("count", help="print min(--cap, tasks in the split)")
    c.add_argument("env")
    c.add_argument("--split", required=True)
    c.add_argument("--cap", type=int, required=True)
    c.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    v = sub.add_parser("model-view", help="a model folder of links without --drop files")
    v.add_argument("source", help="a hub id or a local model folder")
    v.add_argument("--out", required=True, type=Path)
    v.add_argument("--drop", action="append", default=[], metavar="FILE")
    args = p.parse_args(argv)
    if args.cmd == "model-view":
        print(model_view(args.source, args.out, args.drop))
        return 0
    if args.cap < 1:
        p.error(f"--cap must be >= 1, got {args.cap}")
    n = task_count(args.env, args.split, parse_env_args(args.env_arg))
    print(args.cap if n is None else min(args.cap, n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
