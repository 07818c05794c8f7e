"""A lock file is opened without following links and never truncates anything but itself; a
waiter's wait has a deadline when one is asked for, and a stopped holder is named as such; a
``rlvr reproduce --out`` folder has one writer (issue 51, items 1, 6 and 12)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.locks import LOCK_FILE, TIMEOUT_VAR, FolderInUse, UnsafeLockFile, hold

REPO = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path, **more: str) -> dict:
    return {**os.environ, "RLVR_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO), **more}


def _holder(lock: Path, tmp_path: Path) -> subprocess.Popen:
    code = f"from rlvr.locks import hold\nwith hold({str(lock)!r}, wait=False):\n"
    code += "    print('held', flush=True); import time; time.sleep(600)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=_env(tmp_path), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_that_is_a_link_or_not_a_lock_file_is_refused_and_nothing_is_written(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    cases = {
        "symlink": lambda p: p.symlink_to(victim),
        "dangling symlink": lambda p: p.symlink_to(tmp_path / "nowhere"),
        "hard link": lambda p: os.link(victim, p),
        "FIFO": lambda p: os.mkfifo(p),
        "folder": lambda p: p.mkdir(),
        "foreign file": lambda p: p.write_text("not a pid: someone's notes\n"),
    }
    for case, make in cases.items():
        folder = tmp_path / case.replace(" ", "_")
        folder.mkdir()
        make(folder / LOCK_FILE)
        start = time.monotonic()
        with pytest.raises(UnsafeLockFile, match=r"refused, nothing written") as info:
            with hold(folder / LOCK_FILE, wait=False):
                pass
        assert time.monotonic() - start < 5, case  # a FIFO is not waited on
        assert isinstance(info.value, UserError) and "\n" not in str(info.value), case
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "nowhere").exists()  # a dangling link is not followed to create it
    assert (tmp_path / "foreign_file" / LOCK_FILE).read_text() == "not a pid: someone's notes\n"


def test_rlvr_train_on_a_folder_whose_lock_links_to_a_file_leaves_the_file_alone(tmp_path):
    victim, run = tmp_path / "victim", tmp_path / "run"
    victim.write_text("precious\n")
    run.mkdir()
    (run / LOCK_FILE).symlink_to(victim)
    argv = [sys.executable, "-m", "rlvr.cli", "train", "env=kk", "profile=micro", "steps=1"]
    done = subprocess.run(
        [*argv, f"out={run}", "progress=false"], env=_env(tmp_path), capture_output=True, text=True
    )
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, err
    assert "is a symbolic link" in err and "Traceback" not in err
    assert victim.read_text() == "precious\n"


def test_a_lock_file_keeps_only_the_holders_pid(tmp_path):
    lock = tmp_path / LOCK_FILE
    lock.write_text("4194304\n")  # a longer pid of an earlier holder
    with hold(lock, wait=False):
        assert lock.read_text() == f"{os.getpid()}\n"


def test_a_waiter_on_a_stopped_holder_is_told_so_and_gives_up_at_its_deadline(tmp_path):
    lock = tmp_path / "folder" / LOCK_FILE
    holder = _holder(lock, tmp_path)
    holder.send_signal(signal.SIGSTOP)
    said: list[str] = []
    try:
        start = time.monotonic()
        with pytest.raises(FolderInUse, match=rf"still in use by pid {holder.pid} \(stopped\)"):
            with hold(lock, wait=True, say=said.append, timeout_s=1.5):
                pass
        waited = time.monotonic() - start
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert 1.5 <= waited < 4, waited
    assert len(said) == 2 and "is stopped" in said[1] and f"kill -CONT {holder.pid}" in said[1]
    with hold(lock, wait=True, timeout_s=1.0):  # the killed holder released it
        pass


def test_the_default_deadline_comes_from_the_environment(tmp_path, monkeypatch):
    lock = tmp_path / LOCK_FILE
    holder = _holder(lock, tmp_path)
    try:
        monkeypatch.setenv(TIMEOUT_VAR, "0.5")
        with pytest.raises(FolderInUse, match="after 0.5 s"):
            with hold(lock, wait=True, say=lambda m: None):
                pass
        monkeypatch.setenv(TIMEOUT_VAR, "nan")
        with pytest.raises(UserError, match=TIMEOUT_VAR):
            with hold(lock, wait=True, say=lambda m: None):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_a_second_reproduce_on_the_same_out_is_refused_in_one_line(tmp_path):
    out = tmp_path / "results"
    holder = _holder(out / LOCK_FILE, tmp_path)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rlvr.cli", "reproduce", "fig2", "--smoke", "--out", str(out)],
            env=_env(tmp_path),
            capture_output=True,
            text=True,
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"in use by pid {holder.pid}" in err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing written beside it
