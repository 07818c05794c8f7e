"""What a reproduction cost: ``cost.csv`` lists every piece of computation its figures used, with
the seconds its own record gives, and REPORT.md sums it (issue 49, item 4: "state the CPU hours").

A piece is a training run's rollouts and updates (``run.json``'s ``compute_seconds``), the same
run's periodic held-out evaluations (``time/eval_s`` of its metrics: the curve), an evaluation of
final weights (``summary.json``'s ``seconds``), a continued-SFT reference (``sft.json``) or a base
build (``build.json``; a pretrained model's is its conversion). Each was measured where it ran,
as wall seconds of one process; ``threads`` is that process's torch threads where its record
says, so process-hours are CPU hours when it is 1. Work found in the run cache is listed with the
seconds it took when it was made: the sum is the cost of the folder, not of the invocation that
wrote it (REPORT.md gives that invocation's wall time beside it).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

from rlvr.files import atomic_write, complete_record, read_text
from rlvr.models.build import models_dir

#: The kinds of ``cost.csv``, in the order REPORT.md names them.
KINDS = ("training", "held-out curve", "evaluation", "continued SFT", "base build")
COLUMNS = ["kind", "key", "seconds", "threads"]
NOUNS = dict(zip(KINDS, ("run", "run", "evaluation", "reference", "base")))


def cost_rows(
    cache: Path, metas: dict[str, dict], runs: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The rows of ``cost.csv``: ``runs`` maps each training run's config hash to its
    ``compute_seconds``, ``eval_seconds`` (its periodic evaluations) and ``threads``
    (``report.write_run_index``); evaluations, SFT references and bases are the metas' own,
    their seconds read from the records in ``cache`` and the model cache. A record that is
    missing or gives no seconds adds no row."""
    rows: list[dict[str, Any]] = []

    def add(kind: str, key: str, seconds: Any, threads: Any = "") -> None:
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0:
            rows.append(
                {
                    "kind": kind,
                    "key": key,
                    "seconds": round(float(seconds), 2),
                    "threads": str(threads),
                }
            )

    for key, run in runs.items():
        add("training", key, run.get("compute_seconds"), run.get("threads", ""))
        add("held-out curve", key, run.get("eval_seconds"), run.get("threads", ""))
    evals = sorted({k for m in metas.values() for k in m.get("evaluations", {}).values()})
    for key in evals:
        record = complete_record(Path(cache) / "evals" / key / "summary.json", summary=dict)
        add("evaluation", key, (record or {}).get("seconds"))
    trained = {k for m in metas.values() for k in m.get("train_runs", {}).values()}
    others = {r["key"] for m in metas.values() for r in m.get("run_records", {}).values()}
    for key in sorted(others - trained):
        record = complete_record(Path(cache) / "sft" / key / "sft.json")
        add("continued SFT", key, (record or {}).get("seconds"))
    builds = {b["build"] for m in metas.values() for b in m.get("bases", {}).values() if b}
    for build in sorted(builds):
        record = complete_record(models_dir() / build / "build.json") or {}
        add("base build", build, record.get("seconds"), record.get("torch_threads", ""))
    return rows


def write_cost(out: Path, rows: list[dict[str, Any]]) -> None:
    """``<out>/cost.csv`` (none when there is nothing to list)."""
    if rows:
        with atomic_write(out / "cost.csv", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)


def read_cost(out: Path, runs: list[dict]) -> list[dict[str, Any]]:
    """The rows of ``<out>/cost.csv``; for a folder written before it existed, the training
    seconds of ``runs.csv`` alone."""
    path = out / "cost.csv"
    if path.exists():
        return list(csv.DictReader(read_text(path, 1 << 24).splitlines()))
    return [
        {"kind": "training", "key": r.get("config_hash", ""), "seconds": s, "threads": ""}
        for r in runs
        if (s := _float(r.get("compute_seconds")))
    ]


def cost_line(rows: list[dict[str, Any]], wall_s: float | None) -> str:
    """REPORT.md's line on cost: the hours of each kind and their sum, and the wall time of the
    invocation when it is a live one."""
    hours: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        if (seconds := _float(r.get("seconds"))) is not None:  # a hand-edited row: left out
            hours[r.get("kind", "")] += seconds / 3600
            count[r.get("kind", "")] += 1
    threads = {str(r.get("threads", "")) for r in rows} - {""}
    parts = []
    for kind in KINDS:
        if count[kind]:
            n = count[kind]
            parts.append(f"{kind} {hours[kind]:.1f} h ({n} {NOUNS[kind]}{'s' if n > 1 else ''})")
    total = sum(hours.values())
    text = f"- cost: {total:.1f} process-hours in all (cost.csv)"
    if parts:
        text += ": " + ", ".join(parts)
    if threads == {"1"}:
        text += "; every process with a recorded thread count ran one thread"
    text += "; each piece timed where and when it was made (runs.csv names the runs' machines)"
    if wall_s is None:
        return text + "; the wall time of the invocations that made them is not in the files"
    return text + (
        f"; this invocation {wall_s / 60:.1f} min of wall time (work it found in the run cache "
        "cost it nothing)"
    )


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
