"""A failed search is the infrastructure's fault: the env records it, the trainer counts it
(``search/failed``) and stops the run past ``max_tool_failure_rate``."""

from __future__ import annotations

import pytest
import torch

from rlvr.agents.metrics import (
    ToolFailureError,
    check_failure_rate,
    check_tool_failures,
    tool_metrics,
)
from rlvr.config import ConfigError
from rlvr.envs.searchqa import RemoteRetriever, RetrievalError, SearchQAEnv, build_index
from rlvr.envs.searchqa.synthetic import synthetic_task
from rlvr.reproduce.keys import run_key
from rlvr.training.train_config import load_train_config
from rlvr.training.trainer import Trainer, read_metrics

torch.set_num_threads(1)


class Flaky:
    """The synthetic corpus's lexical index; every ``every``-th call raises as a service that
    went away does."""

    def __init__(self, every: int):
        self.index = build_index(synthetic_task(seed=0)[0], encoder="lexical", progress=False)
        self.every, self.calls = every, 0

    def __len__(self):
        return len(self.index)

    def search(self, queries, k):
        self.calls += 1
        if self.every and self.calls % self.every == 0:
            raise RetrievalError("retrieval service at http://10.0.0.9:8000 is unreachable")
        return self.index.search(queries, k)


class Searches(SearchQAEnv):
    """Search QA whose policy always searches first (the micro model writes random text)."""

    def step(self, action):
        if self._turn == 0:
            action = "<search> who founded the trust </search>"
        return super().step(action)


def test_the_env_counts_calls_and_records_failures_but_not_empty_queries():
    env = SearchQAEnv(retriever=Flaky(every=2), max_turns=5)
    env.reset(options={"index": 0})
    *_, info = env.step("<search> first </search>")
    assert info["tool_calls"] == {"search": 1} and info["tool_failures"] == {"search": []}
    obs, *_, info = env.step("<search> second </search>")
    assert "Search failed" in obs
    assert info["tool_calls"] == {"search": 2}
    assert info["tool_failures"] == {
        "search": ["RetrievalError: retrieval service at http://10.0.0.9:8000 is unreachable"]
    }
    *_, info = env.step("<search>  </search>")  # the policy's empty query: no call, no failure
    assert info["search_error"] == "empty query"
    assert info["tool_calls"] == {"search": 2} and len(info["tool_failures"]["search"]) == 1
    env.reset(options={"index": 1})
    *_, info = env.step("<search> again </search>")
    assert info["tool_calls"] == {"search": 1}, "counts are per episode"


def test_an_unreachable_service_is_a_recorded_failure():
    env = SearchQAEnv(retriever=RemoteRetriever("http://127.0.0.1:9", timeout=5))
    env.reset(options={"index": 0})
    *_, info = env.step("<search> anything </search>")
    assert info["tool_calls"] == {"search": 1}
    assert "unreachable" in info["tool_failures"]["search"][0]


def test_tool_metrics_and_the_rate_check():
    ok = {"tool_calls": {"search": 10}, "tool_failures": {"search": []}}
    bad = {"tool_calls": {"search": 10}, "tool_failures": {"search": ["RetrievalError: down"]}}
    assert tool_metrics([ok, bad, {}, None]) == {"search/calls": 20.0, "search/failed": 1.0}
    assert tool_metrics([{"correct": True}]) == {}
    check_tool_failures([ok, bad], 0.05, "step 1")  # 1 of 20 = 5%: not above the rate
    with pytest.raises(ToolFailureError) as err:
        check_tool_failures([bad], 0.05, "step 3")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("step 3: 1 of 10 search calls failed (10% > max_tool_failure_rate")
    assert "first: RetrievalError: down" in message
    check_tool_failures([bad], 1.0, "step 3")  # 1: never stop
    check_tool_failures([{"tool_calls": {"search": 0}}], 0.0, "step 1")  # no calls, no rate
    for bad_value in (-0.1, 1.5, float("nan"), "x", True):
        with pytest.raises(ConfigError, match=r"max_tool_failure_rate: must be in \[0, 1\]"):
            check_failure_rate(bad_value)


def _cfg(tmp_path, *extra):
    return load_train_config(
        [
            "env=searchqa",
            f"out={tmp_path}",
            "profile=micro",
            "steps=2",
            "group_size=2",
            "rollout.max_response_tokens=48",
            "progress=false",
            "num_threads=1",
            *extra,
        ]
    )


def test_failures_are_counted_in_the_metrics(tmp_path):
    flaky = Flaky(every=3)
    cfg = _cfg(tmp_path, "max_tool_failure_rate=0.5")
    trainer = Trainer(cfg, make_env=lambda split: Searches(retriever=flaky, template="plain"))
    records = trainer.train()
    lines = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == len(lines) == 2
    assert sum(r["search/calls"] for r in lines) == flaky.calls
    assert sum(r["search/failed"] for r in lines) == flaky.calls // 3 > 0


def test_a_run_past_the_rate_stops_before_its_update(tmp_path):
    flaky = Flaky(every=2)  # half of the searches fail
    cfg = _cfg(tmp_path)  # the default rate, 0.05
    trainer = Trainer(cfg, make_env=lambda split: Searches(retriever=flaky, template="plain"))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(ToolFailureError, match=r"^step 1: \d+ of \d+ search calls failed"):
        trainer.train()
    assert read_metrics(tmp_path / "metrics.jsonl") == []
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_the_rate_is_a_validated_field_outside_the_run_key(tmp_path):
    assert _cfg(tmp_path).max_tool_failure_rate == 0.05
    with pytest.raises(ConfigError, match="max_tool_failure_rate: must be in"):
        _cfg(tmp_path, "max_tool_failure_rate=2").validate()
    assert run_key(_cfg(tmp_path)) == run_key(_cfg(tmp_path, "max_tool_failure_rate=0.5"))
