"""The checkpoints of a generated verl run folder, and what identifies them: their weights.

``DIR/runs/<run_key>/checkpoints/global_step_<N>/actor/huggingface/`` holds the Hugging Face
weights verl saves (``FSDPCheckpointManager.save_checkpoint`` writes config and tokenizer there at
every save and the weights only when ``checkpoint.save_contents`` includes ``hf_model``). A
checkpoint stands for the SHA-256 of its weights in evaluation keys
(``rlvr.reproduce.keys.model_identity``), so evaluations are shared wherever the folder lives and
never reused after a run is retrained.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from rlvr.files import write_json_atomic
from rlvr.repro import weights_sha256

#: What a generated run folder says it stands for (``rlvr.reproduce.verl.launch``).
RUN_FILE = "rlvr_run.json"
#: Where the SHA-256 of a run's final weights is kept, with the files it was computed from.
WEIGHTS_FILE = "rlvr_weights.json"


def checkpoint_dirs(folder: Path) -> dict[int, Path]:
    """``step -> checkpoints/global_step_<step>/actor/huggingface`` (those that exist)."""
    out = {}
    for d in (folder / "checkpoints").glob("global_step_*"):
        tail = d.name.removeprefix("global_step_")
        hf = d / "actor" / "huggingface"
        if tail.isdigit() and hf.is_dir():
            out[int(tail)] = hf
    return dict(sorted(out.items()))


def has_weights(hf: Path) -> bool:
    return (hf / "config.json").exists() and any(hf.glob("*.safetensors"))


def is_verl_checkpoint(path: Path) -> bool:
    """``<run folder>/checkpoints/global_step_<N>/actor/huggingface`` of a generated run."""
    p = Path(path)
    return (
        len(p.parents) >= 4
        and p.name == "huggingface"
        and p.parent.name == "actor"
        and p.parents[1].name.startswith("global_step_")
        and p.parents[2].name == "checkpoints"
        and (p.parents[3] / RUN_FILE).exists()
    )


def _stat(hf: Path) -> list[list[Any]]:
    return [
        [f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(hf.glob("*.safetensors"))
    ]


@functools.lru_cache(maxsize=None)
def _weights_sha256(hf: Path, stat: str) -> str:
    return weights_sha256(hf)


def checkpoint_sha256(hf: Path) -> str:
    """SHA-256 of a checkpoint's weights (``rlvr.repro.weights_sha256``), kept in the run folder
    (``rlvr_weights.json``) with the size and time of the files it read, so a 7B checkpoint is
    hashed once; a rewritten checkpoint is hashed again. A read-only folder is hashed each time."""
    hf = Path(hf).resolve()
    stat = _stat(hf)
    record_path = hf.parents[3] / WEIGHTS_FILE
    rel = str(hf.relative_to(hf.parents[3]))
    try:
        kept = json.loads(record_path.read_text())
    except (OSError, ValueError):
        kept = {}
    entry = kept.get(rel, {})
    if entry.get("files") == stat and entry.get("weights_sha256"):
        return entry["weights_sha256"]
    sha = _weights_sha256(hf, json.dumps(stat))
    kept[rel] = {"files": stat, "weights_sha256": sha}
    try:
        write_json_atomic(record_path, kept, indent=2)
    except OSError:
        pass
    return sha


def checkpoint_identity(path: Path) -> str:
    """What a verl checkpoint stands for in evaluation keys: its weights' hash, so evaluations
    are shared wherever the folder lives and never reused after a run is retrained."""
    return f"verl-weights:{checkpoint_sha256(Path(path))}"
