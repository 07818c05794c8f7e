"""The verifier pool's failure modes: parent death, many open files, bad deadlines, chunks."""

from __future__ import annotations

import collections
import json
import math
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest

import rlvr  # noqa: F401 - registers the envs
from rlvr.envs.math import VerifierPool, score_batch
from rlvr.envs.math.pool import CHUNK_BYTES, check_timeout, chunk_size, take_chunk

TOWER = "2^{" * 5 + "2" + "}" * 5  # sympy never finishes it (measured: > 20 s)
REPO = str(Path(__file__).resolve().parents[1])


def _gone(pid: int) -> bool:
    """No process, or only a zombie (in a container, PID 1 may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_workers_die_within_two_seconds_of_a_killed_parent():
    caller = textwrap.dedent(f"""
        import sys
        from rlvr.envs.math import VerifierPool
        pool = VerifierPool(2)
        pool.start(wait=True)
        print(*pool.pids, flush=True)
        pool.verify_many([("4", {TOWER!r})] * 4, timeout_s=600)
    """)
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        [sys.executable, "-c", caller], stdout=subprocess.PIPE, env=env, text=True
    )
    pids: list[int] = []
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2
        time.sleep(1.0)  # both workers are now deep inside the tower
        assert not any(_gone(p) for p in pids)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not all(_gone(p) for p in pids):
            time.sleep(0.05)
        assert all(_gone(p) for p in pids), "a worker outlived its parent by 2 s"
    finally:
        proc.kill()
        proc.stdout.close()
        for pid in pids:  # never leave an orphan behind when the test fails
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_workers_started_from_a_short_lived_thread_survive_it():
    pool = VerifierPool(1)
    try:
        t = threading.Thread(target=pool.start, kwargs={"wait": True})
        t.start()
        t.join()
        time.sleep(0.3)  # a parent-death signal tied to that thread would have fired by now
        assert [v.correct for v in pool.verify_many([("1", "1")], timeout_s=10)] == [True]
        assert pool.stats["restarts"] == 0
    finally:
        pool.close()


def test_pool_works_with_more_than_1024_open_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.skip(f"hard file limit {hard} < 1400")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with VerifierPool(1) as pool:
            assert pool._workers[0].fd > 1024  # past select()'s FD_SETSIZE
            got = pool.verify_many([("1/2", "0.5"), ("3", "4")], timeout_s=10)
        assert [v.correct for v in got] == [True, False]
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0, -1.0, 1e300, "5", True, None])
def test_deadline_must_be_a_finite_positive_number(bad):
    with pytest.raises(ValueError, match="timeout_s"):
        check_timeout(bad)
    with pytest.raises(ValueError, match="timeout_s"):
        score_batch([r"\boxed{1}"], ["1"], timeout_s=bad)
    with pytest.raises(ValueError, match="timeout_s"):
        gym.make("rlvr/Math-v0", timeout_s=bad)


def test_chunk_lines_send_each_gold_once_and_stay_small():
    pairs = [("1/2", "0.5")] * 3 + [("7", "7")] * 200 + [("x", "\\alpha" * 150)] * 64
    queue = collections.deque(range(len(pairs)))
    items, line = take_chunk(queue, pairs, workers=1)
    assert items == list(range(16)) and line.endswith(b"\n")
    decoded = json.loads(line)
    assert [g for _, g, _ in decoded[:5]] == ["1/2", None, None, "7", None]
    while queue:
        items, line = take_chunk(queue, pairs, workers=1)
        assert len(line) < CHUNK_BYTES + 13_000  # one item past the cap at most: the pipe holds it


def test_chunks_keep_order_and_a_timeout_mid_chunk_requeues_the_rest():
    assert chunk_size(500, 2) == 16 and chunk_size(8, 2) == 1 and chunk_size(1, 4) == 1
    golds = ["4"] * 6 + ["7"] * 40
    answers = ["4", TOWER, "4", "5", "2+2", "4"] + [str(i % 9) for i in range(40)]
    with VerifierPool(1) as pool:
        got = pool.verify_many(list(zip(golds, answers)), timeout_s=1.5)
        assert pool.stats["timeouts"] == 1
    assert [v.reason for v in got[:6]] == ["", "timeout", "", "wrong", "", ""]
    assert [v.correct for v in got[6:]] == [i % 9 == 7 for i in range(40)]


def test_a_worker_start_up_has_its_own_deadline(tmp_path, monkeypatch):
    """An item's deadline starts when its worker takes it, so a caller also waits for each
    worker start-up it meets; a start-up that hangs is given up after ``START_TIMEOUT_S``
    (three in a row: ``WorkerStartError``), never waited for without end."""
    import rlvr.envs.math.pool as pool_mod

    hang = tmp_path / "python"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")  # a worker that never says "ready"
    hang.chmod(0o755)
    monkeypatch.setattr(pool_mod.sys, "executable", str(hang))
    monkeypatch.setattr(pool_mod, "START_TIMEOUT_S", 1.0)
    pool = VerifierPool(1)
    start = time.monotonic()
    with pytest.raises(pool_mod.WorkerStartError, match="did not become ready in time"):
        pool.verify_many([("1", "1")], timeout_s=1.0)
    waited = time.monotonic() - start
    pool.close()
    assert 3.0 <= waited < 3.0 + 5.0, waited  # three start-ups of 1 s, then the error
