"""QA loaders: shared samples, local files, hub names without a network."""

import importlib.util
import json

import pytest

from rlvr.envs.searchqa import SearchQAEnv, load_qa
from rlvr.envs.searchqa.data import LOCAL_SAMPLES


@pytest.mark.parametrize(
    "name, n",
    [("nq", 3610), ("hotpotqa", 500), ("2wiki", 500), ("musique", 500), ("bamboogle", 125)],
)
def test_shared_samples(shared_data, name, n):
    items = load_qa(name)
    assert len(items) == n and all(it.question and it.answers for it in items)
    assert all(isinstance(a, str) for it in items for a in it.answers)
    assert items[0].source == name


def test_nq_keeps_all_answers(shared_data):
    first = load_qa("nq")[0]
    assert first.answers == ("14 December 1972 UTC", "December 1972")


def test_env_on_shared_dataset(shared_data):
    env = SearchQAEnv(dataset="bamboogle", corpus=[{"id": "0", "title": "T", "text": "nothing"}])
    _, info = env.reset(options={"index": 0})
    assert info["ground_truth"] == ["james madison"] and info["source"] == "bamboogle"
    assert env.step("<answer>James Madison.</answer>")[1] == 1.0


def test_local_files(tmp_path):
    p = tmp_path / "qa.jsonl"
    p.write_text(
        json.dumps({"question": "q1", "golden_answers": ["a", "b"]})
        + "\n"
        + json.dumps({"question": "q2", "reward_model": {"ground_truth": {"target": ["c"]}}})
        + "\n"
    )
    items = load_qa(str(p))
    assert [it.answers for it in items] == [("a", "b"), ("c",)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ValueError, match="no answer field"):
        load_qa(str(bad))


def test_unknown_and_hub_names_fail_clearly():
    with pytest.raises(ValueError, match="unknown dataset"):
        load_qa("not-a-dataset")
    if importlib.util.find_spec("datasets") is None:
        with pytest.raises(ImportError, match=r"rlvr\[hub\]"):
            load_qa("triviaqa")
        with pytest.raises(ImportError, match="FlashRAG"):
            load_qa("flashrag:popqa")
    assert set(LOCAL_SAMPLES) == {"nq", "hotpotqa", "2wiki", "musique", "bamboogle"}
