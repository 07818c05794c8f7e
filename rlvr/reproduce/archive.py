"""The records of a results folder's runs and evaluations, kept in the folder itself.

A grid with ``records: true`` (the tiny and smol grids: more CPU hours than one session of a
machine whose disk is not kept) copies the record files of every finished run and evaluation
from the run cache (``rlvr.reproduce.runs``), of every continued-SFT reference
(``rlvr.reproduce.sft_reference``) and of every tiny base it built (``rlvr.models.build``) into
``<out>/records/``, gzipped, as each finishes; the weights stay behind. A later
``rlvr reproduce`` into the same folder, on this machine or a fresh one, first puts those records
back (``restore``), so the grid goes on where it stopped, and every figure, ``--power`` and the
report are drawn from the records alone, Figure 1 excepted (below).

What needs weights makes them again: ``rlvr reproduce --check`` retrains its sample (which is
the check), an evaluation the records lack retrains its run or reference first
(``runs.ensure_run(..., weights=True)``, ``ensure_sft_reference(..., weights=True)``), Figure 1
scores its words with the first GRPO policy itself and retrains that one run
(``collect.with_weights``), and training on a base whose record came alone builds it again
(``ensure_built``). Each says when the weights it made differ from the record's. A restored run
is the run as recorded: its ``run.json`` names the machine, seconds and weights hash of the run
that produced it.

Layout: ``<out>/records/<kind>/<key>/<file>.gz``. Kinds ``runs`` and ``evals`` keep their cache
folder's own files (``run.json``, ``metrics.jsonl``, ``calibration.json``, ``config.yaml``;
``summary.json``, ``responses.jsonl``); ``sft`` and ``models`` keep their record only
(``sft.json``, ``build.json``: the rest of those folders is the model). Runs, evaluations and
references go back to the run cache, bases to ``rlvr.models.build.models_dir()``. The gzip stream
has no time stamp or name, so the same record gives the same bytes on every machine and a rerun
changes nothing under git.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

from rlvr.files import RecordError, atomic_write, complete_record
from rlvr.locks import LOCK_FILE, hold
from rlvr.models.build import built, models_dir
from rlvr.reproduce.runs import (
    drop_checkpoints,
    drop_evaluations,
    evaluates,
    is_done,
    read_run_record,
    run_path,
    set_aside,
)

RECORDS = "records"
#: Per kind of folder, the file whose completeness says it is finished, restored last.
DONE = {"runs": "run.json", "evals": "summary.json", "sft": "sft.json", "models": "build.json"}
#: Kinds whose folder is a model: only the done file is a record.
MODELS = ("sft", "models")
#: Record files, not weights or checkpoints: what a results folder may carry.
SUFFIXES = (".json", ".jsonl", ".yaml", ".csv", ".txt")
#: A record larger than this, unpacked, is refused (a ``responses.jsonl`` of 200 items is ~0.3 MB).
MAX_UNPACKED_BYTES = 64 * 1024 * 1024


def finished(folder: Path) -> bool:
    """Whether ``folder`` (``<kind>/<key>``) holds a complete record of finished work."""
    kind = folder.parent.name
    if kind == "models":
        return built(folder) is not None
    if kind == "sft":
        return complete_record(folder / DONE[kind], weights_sha256=str) is not None
    return is_done(folder)


def record_files(folder: Path) -> list[Path]:
    """The record files of cache folder ``folder``, the done file last."""
    done = DONE.get(folder.parent.name)
    if folder.parent.name in MODELS:
        return [folder / done]
    files = sorted(
        p
        for p in folder.iterdir()
        if p.is_file()
        and not p.is_symlink()
        and p.suffix in SUFFIXES
        and not p.name.startswith(".")
    )
    return sorted(files, key=lambda p: p.name == done)


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def _gunzip(path: Path) -> bytes:
    try:
        with gzip.open(path, "rb") as f:
            data = f.read(MAX_UNPACKED_BYTES + 1)
    except (OSError, EOFError) as e:
        raise RecordError(f"{path}: not a readable gzip record ({e})") from None
    if len(data) > MAX_UNPACKED_BYTES:
        raise RecordError(f"{path}: over {MAX_UNPACKED_BYTES} bytes unpacked")
    return data


def keep(folder: Path, out: Path) -> Path | None:
    """Copy the records of finished folder ``folder`` (``<cache>/runs/<key>``,
    ``<cache>/evals/<key>``, ``<cache>/sft/<key>``, ``<models>/<key>``) to ``<out>/records/``;
    None when it is not finished."""
    folder = Path(folder)
    kind = folder.parent.name
    if kind not in DONE or not finished(folder):
        return None
    dest = out / RECORDS / kind / folder.name
    dest.mkdir(parents=True, exist_ok=True)
    for src in record_files(folder):
        packed = _gzip(src.read_bytes())
        target = dest / f"{src.name}.gz"
        if target.is_file() and target.read_bytes() == packed:
            continue
        with atomic_write(target, "wb") as f:
            f.write(packed)
    return dest


def restore(out: Path, cache: Path, *, models: Path | None = None, say=print) -> int:
    """Put the records kept in ``<out>/records/`` into run cache ``cache`` (bases: into
    ``models``, default ``models_dir()``) where no finished folder of that key is there; a partial
    run there (checkpoints of an interrupted run) gives way to the finished record. Returns how
    many folders were restored."""
    roots = {kind: Path(cache) / kind for kind in DONE}
    roots["models"] = Path(models) if models is not None else models_dir()
    n = 0
    for kind in DONE:
        for kept in sorted((out / RECORDS / kind).glob("*")):
            if not (kept / f"{DONE[kind]}.gz").is_file():
                continue
            folder = roots[kind] / kept.name
            if finished(folder):
                continue
            # a model folder is renamed into place by its builder, so its lock sits beside it
            lock = folder.with_name(f"{folder.name}.lock") if kind in MODELS else folder / LOCK_FILE
            lock.parent.mkdir(parents=True, exist_ok=True)
            with hold(lock, wait=True, what=f"{kind} {folder}", say=say):
                if finished(folder):
                    continue
                folder.mkdir(exist_ok=True)
                if kind in MODELS:  # the record only: the rest of the folder is the model
                    packed = [kept / f"{DONE[kind]}.gz"]
                else:
                    packed = sorted(
                        (p for p in kept.glob("*.gz") if Path(p.stem).suffix in SUFFIXES),
                        key=lambda p: p.name == f"{DONE[kind]}.gz",
                    )
                for src in packed:  # record files only: a kept "final.gz" is not restored
                    with atomic_write(folder / src.name[: -len(".gz")], "wb") as f:
                        f.write(_gunzip(src))
                if kind == "runs":
                    drop_checkpoints(folder)
                n += 1
    if n:
        say(f"[reproduce] restored {n} finished folder(s) from {out / RECORDS}")
    return n


def _kept_summaries(out: Path) -> dict[Path, dict | None]:
    """The ``summary.json`` of every evaluation kept in ``<out>/records/`` (None: unreadable)."""
    found: dict[Path, dict | None] = {}
    for packed in sorted((out / RECORDS / "evals").glob(f"*/{DONE['evals']}.gz")):
        try:
            summary = json.loads(_gunzip(packed))
        except (RecordError, ValueError):
            summary = None
        found[packed.parent] = summary if isinstance(summary, dict) else None
    return found


def retrain_mode(out: Path, cache: Path, keys, mode: str, *, say=print) -> list[str]:
    """Forget the runs among ``keys`` whose record says kernel mode ``mode`` (``machine_info``),
    so that the reproduction trains and evaluates them again in its own mode: each run's cache
    folder, its cached evaluations, and the records of both in ``<out>/records/`` are removed (a
    restored record of them would otherwise bring the old bits back); so is every evaluation
    kept in ``<out>`` whose record says that mode (a base's; records made before evaluations
    named their machine, 2026-12-07, are kept). Returns the keys forgotten, runs then
    evaluations.

    For a folder whose runs mix kernel modes (REPORT.md says so): runs made in the native mode do
    not give the same bits on another processor (16 of the smol grid's 18, 2026-12-06)."""
    summaries = _kept_summaries(out)
    forgotten = []
    for key in keys:
        path = run_path(cache, key)
        record = read_run_record(path)
        machine = (record or {}).get("machine")
        if not isinstance(machine, dict) or machine.get("kernel_mode") != mode:
            continue
        identity = f"runs/{key}/final"
        with hold(path / LOCK_FILE, wait=True, what=f"run {path}", say=say):
            set_aside(path)
        dropped = drop_evaluations(Path(cache), identity)
        shutil.rmtree(out / RECORDS / "runs" / key, ignore_errors=True)
        for folder in [f for f, summary in summaries.items() if evaluates(summary, identity)]:
            shutil.rmtree(folder)
            del summaries[folder]
        say(
            f"[reproduce] run {key} was trained in the {mode} kernel mode: {dropped} "
            "evaluation(s) and its records removed, to be made again"
        )
        forgotten.append(key)
    for folder, summary in summaries.items():
        machine = (summary or {}).get("machine")
        if isinstance(machine, dict) and machine.get("kernel_mode") == mode:  # a base's
            shutil.rmtree(Path(cache) / "evals" / folder.name, ignore_errors=True)
            shutil.rmtree(folder)
            say(
                f"[reproduce] evaluation {folder.name} was made in the {mode} kernel mode: its "
                "records removed, to be made again"
            )
            forgotten.append(folder.name)
    return forgotten


__all__ = ["RECORDS", "finished", "keep", "record_files", "restore", "retrain_mode"]
