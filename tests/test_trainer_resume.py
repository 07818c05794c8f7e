"""Checkpoints: a run killed with SIGKILL and resumed ends with exactly the uninterrupted metrics;
a corrupt newest checkpoint falls back to the previous one; the CLI's ``--resume``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlvr.agents.checkpoint import list_checkpoints, verify_checkpoint
from rlvr.cli import main as rlvr_main
from rlvr.training.train_config import load_train_config
from rlvr.training.trainer import Trainer, read_metrics, strip_time

from _rlvr_toys import LetterEnv

torch.set_num_threads(1)

TESTS = Path(__file__).resolve().parent
ARGS = [
    "env=kk",
    "algo=grpo_sg",
    "profile=micro",
    "progress=false",
    "num_threads=1",
    "save_every=1",
    "mini_batch_size=4",
    "ppo_epochs=2",
    "optim.warmup_steps=2",
    "optim.schedule=cosine",
]
SCRIPT = """
import sys
from _rlvr_toys import LetterEnv
from rlvr.training.train_config import load_train_config
from rlvr.training.trainer import Trainer
Trainer(load_train_config(sys.argv[1:]), make_env=lambda split: LetterEnv()).train()
"""


def _run_in_process(out, steps, *extra):
    cfg = load_train_config([*ARGS, f"out={out}", f"steps={steps}", *extra])
    return Trainer(cfg, make_env=lambda split: LetterEnv()).train()


def test_resume_after_sigkill_matches_uninterrupted(tmp_path):
    steps = 6
    _run_in_process(tmp_path / "ref", steps)
    expected = strip_time(read_metrics(tmp_path / "ref" / "metrics.jsonl"))
    assert len(expected) == steps

    out = tmp_path / "killed"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, *ARGS, f"out={out}", f"steps={steps}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    target = out / "checkpoints" / "step_00000002" / "MANIFEST.json"
    deadline = time.monotonic() + 600  # a loaded 2-core machine can take minutes to start
    while not target.exists():
        if proc.poll() is not None:
            pytest.fail(f"training subprocess exited early: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no checkpoint within 120 s")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    done = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
    assert 2 <= len(done) < steps, "the kill must land mid-run"

    _run_in_process(out, steps, "resume=true")
    assert strip_time(read_metrics(out / "metrics.jsonl")) == expected


def test_corrupt_checkpoint_falls_back_to_previous(tmp_path):
    _run_in_process(tmp_path / "ref", 4)
    expected = strip_time(read_metrics(tmp_path / "ref" / "metrics.jsonl"))
    out = tmp_path / "run"
    _run_in_process(out, 4)
    ckpts = list_checkpoints(out / "checkpoints")
    assert [p.name for p in ckpts] == ["step_00000004", "step_00000003"]  # keep_checkpoints=2
    model_file = ckpts[0] / "model.pt"
    model_file.write_bytes(model_file.read_bytes()[: model_file.stat().st_size // 2])
    assert verify_checkpoint(ckpts[0]) is None
    with pytest.warns(RuntimeWarning, match="corrupt or incomplete"):
        records = _run_in_process(out, 4, "resume=true")
    assert [r["step"] for r in records] == [4]  # redone from step 3
    assert strip_time(read_metrics(out / "metrics.jsonl")) == expected
    assert verify_checkpoint(out / "checkpoints" / "step_00000004") is not None


def test_cli_train_and_resume(tmp_path, capsys):
    out = tmp_path / "cli"
    base = [
        "train",
        "env=kk",
        "algo=ar",
        "profile=micro",
        f"out={out}",
        "progress=false",
        "num_threads=1",
        "group_size=2",
    ]
    assert rlvr_main([*base, "steps=1"]) == 0
    assert rlvr_main([*base, "steps=2"]) == 2  # refuses to overwrite checkpoints
    assert "resume" in capsys.readouterr().err
    assert rlvr_main([*base, "steps=2", "--resume"]) == 0
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert rlvr_main([*base, "--print-config"]) == 0
    assert "algo: ar" in capsys.readouterr().out
    assert rlvr_main(["train", "env=kk", "algo=nope", f"out={out}"]) == 2
