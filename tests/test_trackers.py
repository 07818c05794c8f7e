"""``report_to=[wandb]``: a run logs to Weights & Biases what ``metrics.jsonl`` holds, with its
configuration, offline (``WANDB_MODE=offline``, no network), and a resumed run continues the same
W&B run (against the real wandb in its own venv: tests/integrations/wandb_check.py). A missing
tracker package is one line before anything runs."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from rlvr.training.train_config import load_train_config

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
