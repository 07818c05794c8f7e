"""Atomic, verified checkpoints: ``DIR/checkpoints/step_00000010/``.

A checkpoint is written into a temporary sibling directory, every file is fsynced, a
``MANIFEST.json`` with each file's SHA-256 and size is written last, and the directory is renamed
into place (a rename is atomic on POSIX). A run killed at any moment therefore leaves either no
new checkpoint or a complete one. On load, checkpoints are tried newest first and one whose
manifest is missing or whose files do not match it is skipped with a warning, so a corrupt or
partial checkpoint falls back to the previous one.

Files hold our own trainer state (optimizer, RNG states with numpy arrays), loaded with
``weights_only=False`` only after the checksum matched what this code wrote.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

MANIFEST = "MANIFEST.json"
PREFIX = "step_"


def checkpoint_dir(root: Path, step: int) -> Path:
    return Path(root) / f"{PREFIX}{step:08d}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(root: str | Path, step: int, payload: dict[str, Any],
                    meta: dict[str, Any], keep: int = 2) -> Path:
    """Write ``payload`` (name -> object for ``torch.save``) and ``meta`` (JSON) atomically as the
    checkpoint of ``step``; keep the newest ``keep`` checkpoints."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir(root, step)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    files = {}
    for name, obj in payload.items():
        path = tmp / f"{name}.pt"
        torch.save(obj, path)
        _fsync_file(path)
        files[path.name] = {"sha256": _sha256(path), "bytes": path.stat().st_size}
    manifest = {"step": step, "files": files, "meta": meta}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    _fsync_file(tmp / MANIFEST)
    _fsync_dir(tmp)
    if final.exists():  # re-saving a step after a resume: move the old one aside first
        old = root / f".old-{final.name}-{os.getpid()}"
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    _fsync_dir(root)
    prune_checkpoints(root, keep)
    return final


def verify_checkpoint(path: Path) -> dict[str, Any] | None:
    """The manifest if every file is present and matches it, else None."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        for name, info in manifest["files"].items():
            f = path / name
            if f.stat().st_size != info["bytes"] or _sha256(f) != info["sha256"]:
                return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


def list_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint directories under ``root``, newest step first (unverified)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit():
            found.append((int(p.name[len(PREFIX):]), p))
    return [p for _, p in sorted(found, reverse=True)]


def latest_valid_checkpoint(root: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that verifies, warning about each newer one that does not."""
    for path in list_checkpoints(root):
        manifest = verify_checkpoint(path)
        if manifest is not None:
            return path, manifest
        warnings.warn(f"checkpoint {path} is corrupt or incomplete; trying the previous one",
                      RuntimeWarning, stacklevel=2)
    return None


def load_payload(path: Path, manifest: dict[str, Any], map_location="cpu") -> dict[str, Any]:
    return {Path(name).stem: torch.load(path / name, map_location=map_location, weights_only=False)
            for name in manifest["files"]}


def prune_checkpoints(root: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints, and stale temporary directories."""
    for old in list_checkpoints(root)[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    for p in Path(root).iterdir():
        if p.name.startswith((".tmp-", ".old-")) and not p.name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(p, ignore_errors=True)
