"""``rlvr reproduce --jobs N`` on a GPU machine: one GPU per worker, jobs capped to the GPUs.

No GPU here: the device count is faked (``torch.cuda`` is patched in this process; the workers
are real spawned processes that report the ``CUDA_VISIBLE_DEVICES`` they were given)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlvr.reproduce import pool
from rlvr.reproduce.common import Context
from rlvr.reproduce.grid import tiny_grid


def _fake_cuda(monkeypatch, n: int, visible: str | None = None):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)


def test_visible_gpus_follow_the_parent_mask(monkeypatch):
    _fake_cuda(monkeypatch, 4)
    assert pool.visible_gpus() == ["0", "1", "2", "3"]
    _fake_cuda(monkeypatch, 2, visible="5,7")
    assert pool.visible_gpus() == ["5", "7"]
    _fake_cuda(monkeypatch, 0)
    assert pool.visible_gpus() == []


def test_jobs_capped_to_gpus_with_a_message():
    jobs, gpus, msg = pool.worker_gpus(4, ["5", "7"], uses_gpu=True)
    assert (jobs, gpus) == (2, ["5", "7"])
    assert "--jobs 4 capped to 2" in msg and "one GPU per worker" in msg
    assert pool.worker_gpus(2, ["0", "1", "2"], uses_gpu=True) == (2, ["0", "1"], "")
    assert pool.worker_gpus(4, ["0"], uses_gpu=False) == (4, [], "")
    assert pool.worker_gpus(3, [], uses_gpu=True) == (3, [], "")


def _nap_then_gpu() -> tuple[str, list]:
    time.sleep(1.5)
    return f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}", []


def test_each_worker_process_gets_its_own_gpu(tmp_path: Path):
    ctx = Context(tiny_grid(smoke=True), tmp_path, tmp_path, [0], progress=False)
    pool._pool_map(ctx, 2, [(_nap_then_gpu, (), [])] * 4, "probe", gpus=["5", "7"])
    seen = [
        line.split()[-2:]
        for line in ctx.log
        if line.startswith("[reproduce] ") and not line.startswith("[reproduce] probe")
    ]
    assert len(seen) == 4 and {gpu for _, gpu in seen} <= {"5", "7"}
    gpu_of = dict(seen)  # every worker process keeps one GPU; no two workers share one
    assert all(gpu_of[pid] == gpu for pid, gpu in seen)
    assert len(set(gpu_of.values())) == len(gpu_of)
    assert "on GPUs 5,7" in ctx.log[0]


def _stamp(name: str) -> tuple[str, list]:
    return f"stamp {name} {time.monotonic():.6f}", []


def test_a_task_s_follow_ups_run_after_it_and_repeats_run_once(tmp_path: Path):
    """The pool of ``--jobs``: a run's evaluations and continued SFT are queued when it finishes
    (they read its results), and a task two figures ask for runs once."""
    ctx = Context(tiny_grid(smoke=True), tmp_path, tmp_path, [0], progress=False)
    after_a = [(_stamp, ("b",), []), (_stamp, ("c",), [])]
    tasks = pool._unique([(_stamp, ("a",), after_a), (_stamp, ("b",), []), (_stamp, ("d",), [])])
    assert pool._count(tasks) == 4
    pool._pool_map(ctx, 2, tasks, "probe")
    when = {
        line.split()[2]: float(line.split()[3])
        for line in ctx.log
        if line.startswith("[reproduce] stamp")
    }
    assert sorted(when) == ["a", "b", "c", "d"]
    assert when["a"] < when["b"] and when["a"] < when["c"]


def test_a_task_s_follow_ups_start_before_the_next_task(tmp_path: Path):
    """A finished run's evaluations go ahead of the runs not yet started, so an interrupted grid
    holds whole results. The pool used to submit every task up front, which queued the smol
    grid's evaluations behind all 18 of its runs."""
    ctx = Context(tiny_grid(smoke=True), tmp_path, tmp_path, [0], progress=False)
    after_a = [(_stamp, ("a1",), [(_stamp, ("a2",), [])]), (_stamp, ("a3",), [])]
    tasks = [(_stamp, ("a",), after_a), (_stamp, ("b",), []), (_stamp, ("c",), [])]
    pool._pool_map(ctx, 1, tasks, "probe")
    order = [line.split()[2] for line in ctx.log if line.startswith("[reproduce] stamp")]
    assert order == ["a", "a1", "a2", "a3", "b", "c"]


def _fail_once_started(pid_file: str) -> tuple[str, list]:
    deadline = time.monotonic() + 120
    while not Path(pid_file).exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the other worker is in its long task
    raise RuntimeError("No space left on device")


def _nap_then_touch(path: str) -> tuple[str, list]:
    time.sleep(30)
    Path(path).touch()
    return f"touched {path}", []


def test_a_failed_task_stops_the_pool_at_once(tmp_path: Path):
    """A task that fails stops the pool: nothing queued starts and the running tasks are ended,
    then its error is raised. The executor's exit used to run every queued task first: on a full
    disk the smol grid went on starting runs that each failed at their first checkpoint, with the
    progress bar frozen and no error shown (AMD EPYC Zen 4, 2026-12-06)."""
    ctx = Context(tiny_grid(smoke=True), tmp_path, tmp_path, [0], progress=False)
    pid_file = tmp_path / "worker.pid"
    queued = [tmp_path / f"queued{i}" for i in range(4)]
    tasks = [
        (_write_pid_then_sleep, (str(pid_file),), []),
        (_fail_once_started, (str(pid_file),), [(_nap_then_touch, (str(queued[0]),), [])]),
        *[(_nap_then_touch, (str(q),), []) for q in queued[1:]],
    ]
    with pytest.raises(RuntimeError, match="No space left on device"):
        pool._pool_map(ctx, 2, tasks, "probe")
    (line,) = [x for x in ctx.log if "failed, so the pool stopped" in x]
    assert "_fail_once_started failed" in line and "5 other task(s) left undone" in line
    assert _ends(int(pid_file.read_text())), "the running task outlived the failure"
    assert not any(q.exists() for q in queued), "queued tasks ran after the failure"


_ORPHAN_PROBE = """
import os, sys, time
from pathlib import Path
from rlvr.reproduce import pool
from rlvr.reproduce.common import Context
from rlvr.reproduce.grid import tiny_grid
sys.path.insert(0, {tests!r})
from test_parallel_gpus import _write_pid_then_sleep
if __name__ == "__main__":
    out = Path({out!r})
    ctx = Context(tiny_grid(smoke=True), out, out, [0], progress=False)
    pool._pool_map(ctx, 1, [(_write_pid_then_sleep, (str(out / "worker.pid"),), [])], "probe")
"""


def _write_pid_then_sleep(path: str) -> tuple[str, list]:
    Path(path).write_text(str(os.getpid()))
    time.sleep(120)
    return "slept", []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")  # a zombie is gone for our purpose
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _ends(pid: int, within_s: float = 10) -> bool:
    """Whether process ``pid`` is gone within ``within_s``; one that is not is killed."""
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        return False
    return True


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_reproduction_takes_its_workers_along(tmp_path: Path):
    """``kill -9`` of ``rlvr reproduce --jobs N`` left its spawned workers training on (found in
    use: a killed regeneration's two base builds ran on for minutes); now they end with it."""
    probe = _ORPHAN_PROBE.format(tests=str(Path(__file__).parent), out=str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", probe])
    pid_file = tmp_path / "worker.pid"
    deadline = time.monotonic() + 180  # two interpreters import torch, on a busy machine too
    while not pid_file.exists() and parent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.exists(), "the worker never started"
    worker = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    assert _ends(worker), "the worker outlived the killed reproduction"
