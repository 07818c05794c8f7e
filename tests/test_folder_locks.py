"""Two writers never share a folder, tested with real processes: a second ``rlvr train`` on the
same ``out`` is refused in one line, a second trainer of the same run-cache entry or builder of
the same model waits and then finds the work done, a second ``rlvr index`` into the same folder is
refused, and a holder killed with SIGKILL releases its lock (the kernel drops ``flock`` locks
with the process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlvr.locks import LOCK_FILE, FolderInUse, hold

REPO = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, "-m", "rlvr.cli", "train", "env=kk", "algo=grpo", "profile=micro"]
TRAIN += ["progress=false", "num_threads=1", "group_size=2", "prompts_per_step=2", "save_every=2"]


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "RLVR_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}


def _wait_for(predicate, timeout: float = 600.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _holds(lock: Path, proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, proc.communicate()
    return lock.exists() and lock.read_text().strip() == str(proc.pid)


def _holder(lock: Path, tmp_path: Path) -> subprocess.Popen:
    """A process that takes ``lock`` and sleeps, once it holds it."""
    code = f"from rlvr.locks import hold\nwith hold({str(lock)!r}, wait=False):\n"
    code += "    import time; time.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(tmp_path))
    _wait_for(lambda: _holds(lock, proc), what="the holder")
    return proc


def _two_at_once(argv: list[str], tmp_path: Path) -> list[str]:
    """Run ``argv`` in two processes at once; their output (stdout and stderr), each exit 0."""
    procs = [
        subprocess.Popen(
            argv, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    return outs


def _steps(path: Path) -> list[int]:
    """The steps of ``path``'s complete lines (a line being written, or cut by a kill, is not)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line)["step"] for line in text[: text.rfind("\n") + 1].splitlines()]


def test_a_lock_refuses_or_waits_and_a_killed_holder_releases_it(tmp_path):
    lock = tmp_path / "folder" / LOCK_FILE
    holder = _holder(lock, tmp_path)
    try:
        with pytest.raises(
            FolderInUse, match=rf"{tmp_path / 'folder'} is in use by pid {holder.pid}"
        ):
            with hold(lock, wait=False):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    said = []
    with hold(lock, wait=True, say=said.append):  # free now: taken at once, without waiting
        with hold(lock, wait=False):  # re-entrant within the process
            assert lock.read_text().strip() == str(os.getpid())
    assert said == []


def test_a_second_train_on_the_same_out_is_refused_in_one_line(tmp_path):
    out = tmp_path / "run"
    argv = [*TRAIN, "steps=1000", f"out={out}"]
    first = subprocess.Popen(argv, env=_env(tmp_path))
    try:
        _wait_for(lambda: _holds(out / LOCK_FILE, first), what="the first trainer")
        second = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    err = second.stderr.strip()
    assert second.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"in use by pid {first.pid}" in err
    steps = _steps(out / "metrics.jsonl")  # the first one's alone: each step once, in order
    assert steps == list(range(1, len(steps) + 1))


def test_a_killed_trainer_releases_its_run_folder(tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([*TRAIN, "steps=400", f"out={out}"], env=_env(tmp_path))
    _wait_for(
        lambda: _holds(out / LOCK_FILE, first) and any((out / "checkpoints").glob("step_00000004")),
        what="two checkpoints",
    )
    first.send_signal(signal.SIGKILL)
    first.wait()
    saved = max(int(p.name.split("_")[1]) for p in (out / "checkpoints").glob("step_*"))
    resumed = subprocess.run(
        [*TRAIN, f"steps={saved + 2}", f"out={out}", "--resume"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert _steps(out / "metrics.jsonl") == list(range(1, saved + 3))


RUN_CACHE = """
import sys
from pathlib import Path
from rlvr.training.train_config import load_train_config
from rlvr.reproduce.runs import ensure_run
cfg = load_train_config(["env=kk", "algo=grpo", "profile=micro", "steps=6", "save_every=2",
                         "num_threads=1", "group_size=2", "prompts_per_step=2", "out=unset"])
run = ensure_run(cfg, Path(sys.argv[1]), say=lambda m: print(m, flush=True), progress=False)
print("steps", [r["step"] for r in run.metrics], flush=True)
"""


def test_two_processes_sharing_a_run_cache_train_the_run_once(tmp_path):
    cache = tmp_path / "cache"
    outs = _two_at_once([sys.executable, "-c", RUN_CACHE, str(cache)], tmp_path)
    trained = [o for o in outs if "[reproduce] training" in o]
    assert len(trained) == 1, outs  # the other one waited or found it finished
    for o in outs:
        assert o.strip().splitlines()[-1] == "steps [1, 2, 3, 4, 5, 6]", o
    (run,) = (cache / "runs").iterdir()
    assert _steps(run / "metrics.jsonl") == [1, 2, 3, 4, 5, 6]


MODEL_CACHE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from test_models import micro_build_config
    from rlvr.models.build import ensure_built
    print(ensure_built(micro_build_config(), home=sys.argv[1], progress=True), flush=True)
    """
)


def test_two_builders_of_one_model_build_it_once(tmp_path):
    code = MODEL_CACHE.format(tests=str(REPO / "tests"))
    outs = _two_at_once([sys.executable, "-c", code, str(tmp_path / "models")], tmp_path)
    assert sum(o.count("building base model") for o in outs) == 1, outs
    assert len({o.strip().splitlines()[-1] for o in outs}) == 1


def test_a_second_index_writer_is_refused_and_a_killed_one_releases_the_folder(tmp_path):
    folder = tmp_path / "idx"
    argv = [sys.executable, "-m", "rlvr.cli", "index", "--corpus", "synthetic", "--out"]
    argv += [str(folder), "--encoder", "lexical"]
    holder = _holder(folder / LOCK_FILE, tmp_path)
    try:
        refused = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    err = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and f"in use by pid {holder.pid}" in err[-1], err
    assert not (folder / "meta.json").exists()
    built = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True)
    assert built.returncode == 0 and (folder / "meta.json").exists(), built.stderr


def _can_mount_tmpfs(tmp_path: Path) -> bool:
    if os.geteuid() != 0:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    cmd = f"mount -t tmpfs -o size=1m tmpfs {probe}"
    return subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True).returncode == 0


def test_a_full_disk_mid_run_is_one_line_and_the_run_resumes_identically(tmp_path):
    """A 3 MB tmpfs (in a private mount namespace) fills at a checkpoint: one line naming the
    folder and the space left, exit 2; after the disk is grown, ``--resume`` ends with exactly
    the metrics of an uninterrupted run."""
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("needs root and unshare -m to mount a small tmpfs")
    from rlvr.agents.metrics import read_metrics, strip_time

    disk, keep = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    argv = " ".join([*TRAIN, "steps=8", f"out={disk / 'run'}"])
    script = f"""
        mount -t tmpfs -o size=3m tmpfs {disk} || exit 99
        {argv} 2> {tmp_path / "full.err"}; echo $? > {tmp_path / "full.rc"}
        mount -o remount,size=64m {disk}
        {argv} --resume 2> {tmp_path / "resume.err"}; echo $? > {tmp_path / "resume.rc"}
        cp -r {disk / "run"} {keep}
    """
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], env=_env(tmp_path), timeout=600)
    assert done.returncode == 0
    err = (tmp_path / "full.err").read_text().strip()
    assert (tmp_path / "full.rc").read_text().strip() == "2" and len(err.splitlines()) == 1, err
    assert f"cannot write to {disk / 'run'}" in err and "free there" in err and "--resume" in err
    assert (tmp_path / "resume.rc").read_text().strip() == "0", (
        tmp_path / "resume.err"
    ).read_text()
    whole = tmp_path / "whole"
    subprocess.run([*TRAIN, "steps=8", f"out={whole}"], env=_env(tmp_path), check=True)
    resumed = strip_time(read_metrics(keep / "metrics.jsonl"))
    assert resumed == strip_time(read_metrics(whole / "metrics.jsonl"))
    assert [r["step"] for r in resumed] == list(range(1, 9))
