"""``report_to=[wandb]``: a run logs to Weights & Biases what ``metrics.jsonl`` holds, with its
configuration, offline (``WANDB_MODE=offline``, no network), and a resumed run continues the same
W&B run. A missing tracker package is one line before anything runs."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest

from rlvr.training.train_config import load_train_config
from rlvr.training.trainer import Trainer

ARGS = ["env=kk", "algo=grpo_sg", "profile=micro", "progress=false", "num_threads=1"]


def test_records_go_to_every_tracker_as_the_log_holds_them(tmp_path):
    from rlvr.agents.metrics import MetricsLog, read_metrics

    class Recorder:
        def __init__(self):
            self.logged, self.closed = [], False

        def log(self, record):
            self.logged.append(dict(record))

        def close(self):
            self.closed = True

    seen = Recorder()
    log = MetricsLog(tmp_path / "metrics.jsonl", [seen])
    log.prepare(None)
    log.append({"step": 1, "reward/mean": 0.5, "kl": math.nan})
    log.close()
    assert seen.logged == [{"step": 1, "reward/mean": 0.5, "kl": math.nan}] and seen.closed
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "reward/mean": 0.5, "kl": None}]


def test_a_tracker_that_is_not_installed_is_one_line(monkeypatch):
    from rlvr.config import ConfigError
    from rlvr.training.trackers import check_trackers

    with monkeypatch.context() as m:
        m.setattr(importlib.util, "find_spec", lambda name: None)
        m.delitem(sys.modules, "wandb", raising=False)
        with pytest.raises(
            ConfigError, match=r"report_to: wandb is not installed: pip install 'rlvr\[wandb\]'"
        ):
            check_trackers(["wandb"])
    with pytest.raises(Exception, match="did you mean 'wandb'"):
        load_train_config([*ARGS, "report_to=[wandbb]", "out=x"])


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb not installed")
def test_wandb_offline_logs_the_metrics_and_config_and_a_resume_continues_the_run(
    tmp_path, monkeypatch
):
    import wandb

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
