"""Atomic, verified checkpoints: ``DIR/checkpoints/step_00000010/``.

A checkpoint is written into a temporary sibling directory, every file is fsynced, a
``MANIFEST.json`` with each file's SHA-256 and size is written last, and the directory is renamed
into place (a rename is atomic on POSIX). A run killed at any moment therefore leaves either no
new checkpoint or a complete one. On load, checkpoints are tried newest first and one whose
manifest is missing or whose files do not match it is skipped with a warning, so a corrupt or
partial checkpoint falls back to the previous one.

Files hold tensors and plain data only (weights, optimizer and scheduler state, RNG states as
tensors and numbers: ``rng_state``) and load with ``torch.load(weights_only=True)``, which
refuses any other pickled object. The manifest sits in the same directory as the files, so it
detects corruption, not tampering: loading never executes what a file holds. Cheap checks come
first: every name, type and size of the manifest (``entries_problem``, ``lstat`` only), then the
zip central directory of each file (``archive_problem``: ``torch.save`` stores its members
uncompressed, so a compressed member, which ``torch.load`` would inflate, and members larger in
all than their file are refused), and only then the SHA-256 of each file.

A resume also refuses a changed configuration (``check_resume_config``) and never deletes
metrics lines (``preserve_metrics``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import stat
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.errors import UserError
from rlvr.files import fsync_dir, fsync_file

MANIFEST = "MANIFEST.json"
PREFIX = "step_"
#: A manifest holds file hashes and the run's configuration: kilobytes.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
#: Most members of one file's archive (``torch.save`` writes one per tensor storage, plus five).
MAX_ARCHIVE_MEMBERS = 1_000_000


def checkpoint_dir(root: Path, step: int) -> Path:
    return Path(root) / f"{PREFIX}{step:08d}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_checkpoint(
    root: str | Path, step: int, payload: dict[str, Any], meta: dict[str, Any], keep: int = 2
) -> Path:
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
    try:
        for name, obj in payload.items():
            path = tmp / f"{name}.pt"
            torch.save(obj, path)
            fsync_file(path)
            files[path.name] = {"sha256": _sha256(path), "bytes": path.stat().st_size}
        manifest = {"step": step, "files": files, "meta": meta}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        fsync_file(tmp / MANIFEST)
        fsync_dir(tmp)
    except (OSError, RuntimeError) as e:  # torch.save reports a full disk as a RuntimeError
        error = write_failure(root, e)  # the free space it reports is what the write met
        shutil.rmtree(tmp, ignore_errors=True)  # and what it took is given back for a resume
        raise error from None
    if final.exists():  # re-saving a step after a resume: move the old one aside first
        old = root / f".old-{final.name}-{os.getpid()}"
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    fsync_dir(root)
    prune_checkpoints(root, keep)
    return final


#: A manifest's file name: one plain name inside the checkpoint folder (what ``save_checkpoint``
#: writes: ``model.pt``, ``rng.pt``...), never a path.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def manifest_problem(path: Path) -> tuple[dict[str, Any] | None, str]:
    """``(manifest, "")`` when every file the manifest names is a regular file inside ``path``
    with its recorded size and SHA-256; else ``(None, why)``, one line.

    Names, types and sizes are checked for every file before any file is opened: a crafted
    manifest naming ``../../dev/zero``, a FIFO or a symbolic link (which would hash forever or
    block) is refused, not read."""
    try:
        st = os.lstat(path / MANIFEST)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST_BYTES:
            return None, f"{MANIFEST} is not a regular file of at most {MAX_MANIFEST_BYTES} bytes"
        manifest = json.loads((path / MANIFEST).read_text())
    except OSError as e:
        return None, f"{MANIFEST} cannot be read ({e.strerror or e})"
    except (ValueError, RecursionError) as e:
        return None, f"{MANIFEST} is not valid JSON ({str(e)[:120]})"
    why = entries_problem(path, manifest) or archives_problem(path, manifest)
    if why:
        return None, why
    for name, info in manifest["files"].items():
        if _sha256(path / name) != info["sha256"]:
            return None, f"{name} does not match its SHA-256 in {MANIFEST}"
    return manifest, ""


def entries_problem(path: Path, manifest: Any) -> str:
    """Why the files ``manifest`` names are not plain files of ``path`` of their recorded sizes
    ("" when they are), found with ``lstat`` alone: nothing is opened."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not isinstance(manifest.get("meta"), dict):
        return f"{MANIFEST} has no 'files' and 'meta' objects"
    for name, info in files.items():
        if not _FILE_NAME.fullmatch(name) or name == MANIFEST:
            return f"{MANIFEST} names {name[:80]!r}, which is not a file of the checkpoint"
        size, digest = (info.get("bytes"), info.get("sha256")) if isinstance(info, dict) else (0, 0)
        if isinstance(size, bool) or not isinstance(size, int) or not isinstance(digest, str):
            return f"{MANIFEST}: entry {name!r} has no 'bytes' count and 'sha256' string"
        try:
            st = os.lstat(path / name)
        except OSError as e:
            return f"{name} is missing ({e.strerror or e})"
        if not stat.S_ISREG(st.st_mode):
            return f"{name} is not a regular file (a link, FIFO or device); refused unread"
        if st.st_size != size:
            return f"{name} holds {st.st_size} bytes, the manifest says {size}"
    return ""


def archive_problem(path: Path) -> str:
    """Why ``path`` is not a ``torch.save`` archive that loads into at most its own size ("" when
    it is), from its zip central directory alone (no member is read): a file that is no archive
    (an 8 GiB sparse file of zeros: refused in milliseconds, not hashed for minutes), a member
    stored compressed (a 1 MiB file whose tensor inflates to 1 GiB in ``torch.load``), or members
    whose sizes add up to more than the file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        return f"{path.name} cannot be opened ({e.strerror or e})"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"{path.name} is not a regular file; refused unread"
        try:
            members = zipfile.ZipFile(f).infolist()
        except Exception as e:  # noqa: BLE001 - zipfile raises several types on crafted bytes
            return f"{path.name} is not a torch.save archive ({type(e).__name__}); refused unread"
    if len(members) > MAX_ARCHIVE_MEMBERS:
        return f"{path.name} holds {len(members)} archive members; refused unread"
    total = 0
    for m in members:
        if m.compress_type != zipfile.ZIP_STORED or m.file_size != m.compress_size:
            return (
                f"{path.name}: member {m.filename[:60]!r} is stored compressed ({m.compress_size} "
                f"bytes that inflate to {m.file_size}), which torch.save never writes; refused "
                "unread"
            )
        total += m.file_size
    if total > st.st_size:
        return f"{path.name}: its members hold {total} bytes, more than its {st.st_size}; refused"
    return ""


def archives_problem(path: Path, manifest: dict[str, Any]) -> str:
    """``archive_problem`` of each file a checked manifest (``entries_problem``) names."""
    return next((w for name in manifest["files"] if (w := archive_problem(path / name))), "")


def verify_checkpoint(path: Path) -> dict[str, Any] | None:
    """The manifest if every file is present and matches it, else None (``manifest_problem``
    says why)."""
    return manifest_problem(path)[0]


def list_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint directories under ``root``, newest step first (unverified)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit():
            found.append((int(p.name[len(PREFIX) :]), p))
    return [p for _, p in sorted(found, reverse=True)]


def latest_valid_checkpoint(root: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that verifies, warning about each newer one that does not."""
    for path in list_checkpoints(root):
        manifest, why = manifest_problem(path)
        if manifest is not None:
            return path, manifest
        warnings.warn(
            f"checkpoint {path} is corrupt or incomplete ({why}); trying the previous one",
            RuntimeWarning,
            stacklevel=2,
        )
    return None


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be resumed from (unsafe content, changed configuration, none
    valid); the message is one line."""


def find_resume_checkpoint(root: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest valid checkpoint; None when there is no checkpoint at all (nothing to resume);
    ``CheckpointError`` when there are checkpoints but none verifies (starting over would
    silently throw the run away)."""
    found = latest_valid_checkpoint(root)
    if found is None and list_checkpoints(root):
        raise CheckpointError(
            f"resume: every checkpoint under {root} is corrupt or incomplete; "
            "nothing was changed (move them away to start over)"
        )
    return found


def load_payload(path: Path, manifest: dict[str, Any], map_location="cpu") -> dict[str, Any]:
    """The checkpoint's files, each loaded with ``weights_only=True``: a file holding anything
    but tensors and plain containers (a crafted pickle) raises ``CheckpointError``, and so does a
    manifest naming anything but plain files of ``path`` (``entries_problem``: checked again here,
    without re-hashing, so that nothing is opened unchecked)."""
    why = entries_problem(path, manifest) or archives_problem(path, manifest)
    if why:
        raise CheckpointError(f"checkpoint {path}: {why}")
    out = {}
    for name in manifest["files"]:
        try:
            out[Path(name).stem] = torch.load(
                path / name, map_location=map_location, weights_only=True
            )
        except Exception as exc:  # noqa: BLE001 - torch raises UnpicklingError, RuntimeError...
            raise CheckpointError(
                f"checkpoint file {path / name} holds more than tensors and "
                f"plain data; refused ({type(exc).__name__})"
            ) from None
    return out


# -- RNG state as tensors and numbers (loadable with weights_only=True) ------------------------
def rng_state() -> dict[str, Any]:
    """Python, numpy and torch (and CUDA) RNG states as tensors, ints and floats."""
    version, words, gauss = random.getstate()
    kind, key, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": {
            "version": version,
            "words": torch.tensor(words, dtype=torch.int64),
            "gauss": gauss,
        },
        "numpy": {
            "kind": kind,
            "key": torch.from_numpy(key.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` returned."""
    py, npy = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(int(w) for w in py["words"].tolist()), py["gauss"]))
    np.random.set_state(
        (
            npy["kind"],
            npy["key"].numpy().astype(np.uint32),
            npy["pos"],
            npy["has_gauss"],
            npy["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# -- resume checks -----------------------------------------------------------------------------
#: Keys a resume may change: where and how long the run goes and how it reports, none of which
#: changes a step's result. Everything else (algorithm, batch shape, model, seeds, env, device,
#: threads) must match the checkpoint's configuration unless changes are explicitly allowed.
RESUME_MAY_CHANGE = frozenset(
    {
        "steps",
        "out",
        "resume",
        "save_every",
        "keep_checkpoints",
        "progress",
        "tensorboard",
        "report_to",
        "max_tool_failure_rate",
        "memory_check",
    }
)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "env_kwargs":
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def check_resume_config(
    saved: dict[str, Any],
    current: dict[str, Any],
    allow: bool = False,
    defaults: dict[str, Any] | None = None,
) -> list[str]:
    """The keys whose value differs between a checkpoint's configuration and the current one
    (``RESUME_MAY_CHANGE`` left out); ``CheckpointError`` naming them unless ``allow``.

    A key the checkpoint's configuration lacks (saved before the field existed) compares as its
    value in ``defaults``, so adding a configuration field does not orphan older checkpoints.
    """
    a = {**_flatten(defaults or {}), **_flatten(saved)}
    b = _flatten(current)
    changed = sorted(
        k
        for k in set(a) | set(b)
        if k not in RESUME_MAY_CHANGE and a.get(k, "<unset>") != b.get(k, "<unset>")
    )
    if changed and not allow:
        shown = ", ".join(
            f"{k} ({a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r})" for k in changed[:6]
        )
        more = f" and {len(changed) - 6} more" if len(changed) > 6 else ""
        raise CheckpointError(
            f"resume: the configuration differs from the checkpoint's in "
            f"{shown}{more}; pass --allow-config-change to resume anyway"
        )
    return changed


def check_writable(*dirs: str | Path) -> None:
    """Create each directory and a probe file in it; ``CheckpointError`` naming the first one
    that cannot be written (so a run fails at start, not at its first save)."""
    for d in dirs:
        d = Path(d)
        try:
            d.mkdir(parents=True, exist_ok=True)
            probe = d / f".write-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise CheckpointError(f"out: cannot write to {d} ({exc.strerror or exc})") from None


def write_failure(folder: str | Path, exc: BaseException) -> CheckpointError:
    """The one-line error for a write into ``folder`` that failed (a full disk, most often): the
    folder, the reason and the space left there. What a run wrote before is intact (checkpoints
    are renamed into place whole; a resume moves a torn metrics line aside), so it resumes."""
    if isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror
    else:  # torch.save: "[enforce fail at inline_container.cc:672] . unexpected pos ..."
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        reason = re.sub(r"^\[enforce fail at [^\]]*\][ .]*", "", first)[:120]
    try:
        free = shutil.disk_usage(folder).free
        free = f"{free} bytes" if free < 2**10 else f"{free / 2**20:.2f} MiB"
    except OSError:
        free = "unknown space"
    return CheckpointError(
        f"cannot write to {folder} ({reason}; {free} free there); the checkpoints and metrics "
        "written so far are intact: free space, then rerun with --resume"
    )


def prune_checkpoints(root: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints, and stale temporary directories."""
    for old in list_checkpoints(root)[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    for p in Path(root).iterdir():
        if p.name.startswith((".tmp-", ".old-")) and not p.name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(p, ignore_errors=True)
