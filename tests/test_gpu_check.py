"""``scripts/gpu_check.py``'s reduced CPU variant, run as a GPU machine runs the full one
(``scripts/gpu_check.sh``), so that the prepared device check cannot rot: it must pass whatever
rewards its short-trained base gets (its update checks use fixed advantages)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # about a minute of CPU (55 s user time, Intel Xeon, 2 cores)
def test_cpu_variant_passes(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RLVR_HOME": str(tmp_path / "home"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--work", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary == {**summary, "device": "cpu", "failures": []}
    lines = [x for x in out.splitlines() if x.startswith("[gpu-check] ")]
    assert not any(" FAIL " in x or " SKIP " in x for x in lines), lines
    for what in (
        "log-probs agree with CPU fp32",
        "every loss and gradient norm is finite",
        "step-1 mean token log-prob agrees",
        "an update on fixed advantages moves the weights",
        "lr 1e-5 updates are kept",
    ):
        assert any(x.startswith(f"[gpu-check] PASS {what}") for x in lines), what
