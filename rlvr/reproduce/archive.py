"""The records of a results folder's runs and evaluations, kept in the folder itself.

A grid with ``records: true`` (the smol grid: 10-15 CPU hours, more than one session of a machine
whose disk is not kept) copies the record files of every finished run and evaluation from the run
cache (``rlvr.reproduce.runs``) into ``<out>/records/``, gzipped, as each finishes; the weights
stay behind. A later ``rlvr reproduce`` into the same folder, on this machine or a fresh one,
first puts those records back into its run cache (``restore``), so the grid goes on where it
stopped, and every figure, ``--power`` and the report are drawn from the records alone.

What needs weights trains them again: ``rlvr reproduce --check`` retrains its sample (which is
the check), and an evaluation the records lack retrains its run first
(``runs.ensure_run(..., weights=True)`` sets the restored records aside and trains from step 0).
A restored run is the run as recorded: its ``run.json`` names the machine, seconds and weights
hash of the run that produced it.

Layout: ``<out>/records/runs/<key>/<file>.gz`` and ``<out>/records/evals/<key>/<file>.gz``, the
folder's own files (``run.json``, ``metrics.jsonl``, ``calibration.json``, ``config.yaml``;
``summary.json``, ``responses.jsonl``). The gzip stream has no time stamp or name, so the same
record gives the same bytes on every machine and a rerun changes nothing under git.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

from rlvr.files import RecordError, atomic_write
from rlvr.locks import LOCK_FILE, hold
from rlvr.reproduce.runs import drop_checkpoints, is_done

RECORDS = "records"
#: Per kind of cache folder, the file whose completeness says it is finished, restored last
#: (``runs.is_done``).
DONE = {"runs": "run.json", "evals": "summary.json"}
#: Record files, not weights or checkpoints: what a results folder may carry.
SUFFIXES = (".json", ".jsonl", ".yaml", ".csv", ".txt")
#: A record larger than this, unpacked, is refused (a ``responses.jsonl`` of 200 items is ~0.3 MB).
MAX_UNPACKED_BYTES = 64 * 1024 * 1024


def record_files(folder: Path) -> list[Path]:
    """The record files of cache folder ``folder``, the done file last."""
    done = DONE.get(folder.parent.name)
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
    """Copy the records of finished cache folder ``folder`` (``<cache>/runs/<key>`` or
    ``<cache>/evals/<key>``) to ``<out>/records/``; None when it is not finished (no done file)."""
    kind = folder.parent.name
    if kind not in DONE or not (folder / DONE[kind]).is_file():
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


def restore(out: Path, cache: Path, *, say=print) -> int:
    """Put the records kept in ``<out>/records/`` into run cache ``cache`` where the cache lacks a
    finished folder of that key; a partial run there (checkpoints of an interrupted run) gives way
    to the finished record. Returns how many folders were restored."""
    n = 0
    for kind in DONE:
        for kept in sorted((out / RECORDS / kind).glob("*")):
            if not (kept / f"{DONE[kind]}.gz").is_file():
                continue
            folder = Path(cache) / kind / kept.name
            if is_done(folder):
                continue
            folder.mkdir(parents=True, exist_ok=True)
            with hold(folder / LOCK_FILE, wait=True, what=f"{kind[:-1]} {folder}", say=say):
                if is_done(folder):
                    continue
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
        say(f"[reproduce] restored {n} finished run(s) and evaluation(s) from {out / RECORDS}")
    return n


__all__ = ["RECORDS", "keep", "record_files", "restore"]
