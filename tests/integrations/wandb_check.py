"""Checks against the real Weights & Biases client (``wandb`` 0.31.0), run in its own venv by
``scripts/test_integrations.sh wandb``: ``report_to=[wandb]`` logs, offline and without a network,
every ``metrics.jsonl`` record and the run configuration, and a resumed run continues the same
W&B run (``rlvr.training.trackers``)."""

from __future__ import annotations

import json

import pytest
import wandb

from rlvr.training.train_config import load_train_config
from rlvr.training.trainer import Trainer

ARGS = ["env=kk", "algo=grpo_sg", "profile=micro", "progress=false", "num_threads=1"]


def test_wandb_offline_logs_the_metrics_and_config_and_a_resume_continues_the_run(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    runs = []
    real_init = wandb.init

    def spy(**kwargs):
        run = real_init(**kwargs)
        logged = []
        real_log = run.log
        run.log = lambda data, step=None: (
            logged.append((step, dict(data))),
            real_log(data, step=step),
        )
        runs.append((kwargs, run, logged))
        return run

    monkeypatch.setattr(wandb, "init", spy)
    out = tmp_path / "run"
    cfg = load_train_config([*ARGS, "steps=2", "save_every=1", f"out={out}", "report_to=[wandb]"])
    Trainer(cfg).train()
    ((kwargs, run, logged),) = runs
    assert kwargs["config"]["algo"] == "grpo_sg" and kwargs["config"]["report_to"] == ["wandb"]
    assert kwargs["project"] == "rlvr" and kwargs["name"] == "run"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [step for step, _ in logged] == [1, 2]
    for (_, data), record in zip(logged, records):
        expected = {k: v for k, v in record.items() if k != "step" and v is not None}
        assert data == pytest.approx({k: float(v) for k, v in expected.items()})
    files = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1 and files[0].stat().st_size > 0  # written without a network
    first_id = (out / "wandb_run_id").read_text().strip()
    assert first_id == run.id
    cfg = load_train_config(
        [*ARGS, "steps=3", "save_every=1", f"out={out}", "report_to=[wandb]", "resume=true"]
    )
    Trainer(cfg).train()
    assert runs[1][0]["id"] == first_id and [s for s, _ in runs[1][2]] == [3]
