"""An evaluation's files: ``responses.jsonl`` (one record per response, ``rlvr.eval.metrics``)
and ``summary.json`` (the configuration, the prompt format, seconds, the machine and its kernel
mode, and the metrics per group), from which figures are redrawn without rerunning the model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.files import atomic_write, write_json_atomic
from rlvr.repro import machine_info


def jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)


def write_jsonl(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """One JSON object per response (written to a temporary file, then renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        for r in records:
            f.write(json.dumps(jsonable(r)) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def save_result(result, out_dir: str | Path) -> Path:
    """``responses.jsonl`` and ``summary.json`` (config, seconds, machine, metrics per group) of
    an ``rlvr.eval.runner.EvalResult`` in ``out_dir``. The machine (``rlvr.repro.machine_info``)
    says the kernel mode: an evaluation in the native mode may decode other tokens elsewhere."""
    out = Path(out_dir)
    write_jsonl(result.records, out / "responses.jsonl")
    write_json_atomic(  # last: its presence says the evaluation is complete
        out / "summary.json",
        jsonable(
            {
                "config": result.config,
                "prompt_format": result.prompt,
                "seconds": round(result.seconds, 2),
                "machine": machine_info(),
                "summary": result.summary,
            }
        ),
        indent=2,
    )
    return out
