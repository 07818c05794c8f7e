"""rlvr/SearchQA-v0: gymnasium contract, every turn rule, bad input, the synthetic task."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import rlvr  # noqa: F401  (registers the ids)
from rlvr.envs.searchqa import SearchQAEnv, parse_action, synthetic_task
from rlvr.envs.searchqa.client import MAX_QUERY_CHARS
from rlvr.envs.searchqa.reward import INVALID_ACTION_MESSAGE


@pytest.fixture()
def env():
    return gym.make("rlvr/SearchQA-v0", dataset="synthetic", template="plain").unwrapped


def _spans_text(info):
    return "".join(info["transcript"][a:b] for a, b in info["tool_spans"])


def test_check_env_and_reset_contract(env):
    check_env(env)
    prompt, info = env.reset(seed=5)
    assert (
        info["question"] in prompt
        and isinstance(info["ground_truth"], list)
        and info["ground_truth"]
    )
    assert (
        info["messages"][-1]["role"] == "user"
        and info["question"] in info["messages"][-1]["content"]
    )
    assert env.reset(seed=5)[0] == prompt
    p7, i7 = env.reset(options={"index": 7})
    assert i7["index"] == 7 and i7["question"] == env.items[7].question
    with pytest.raises(ValueError, match="index"):
        env.reset(options={"index": len(env.items)})


def test_search_then_answer(env):
    _, info = env.reset(options={"index": 0})
    gold = info["ground_truth"][0]
    obs, r, term, trunc, i1 = env.step(
        f"<think>need facts</think>\n<search> {info['question']} </search>"
    )
    assert obs.startswith("\n\n<information>Doc 1(Title: ") and obs.endswith("</information>\n\n")
    assert obs.count("\nDoc ") == 2  # topk=3
    assert (r, term, trunc) == (0.0, False, False)
    first_obs = obs
    assert i1["action"] == "search" and i1["n_searches"] == 1 and i1["em"] == 0.0
    obs, r, term, trunc, i2 = env.step(f"<answer> {gold} </answer>")
    assert (obs, r, term, trunc) == ("", 1.0, True, False)
    assert i2["em"] == 1.0 and i2["f1"] == 1.0 and i2["correct"] and i2["n_searches"] == 1
    assert _spans_text(i2) == first_obs
    policy_text = i2["transcript"]
    for a, b in reversed(i2["tool_spans"]):
        policy_text = policy_text[:a] + policy_text[b:]
    assert policy_text == (
        f"<think>need facts</think>\n<search> {info['question']} </search><answer> {gold} </answer>"
    )
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>x</answer>")


def test_synthetic_answers_are_retrievable(env):
    _, info = env.reset(options={"index": 3})
    obs = env.step(f"<search>{info['question']}</search>")[0]
    if info.get("hops") == 1:
        assert info["ground_truth"][0] in obs


def test_wrong_answer_and_invalid_action(env):
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("I am not sure what to do")
    assert obs == INVALID_ACTION_MESSAGE and (r, term, trunc) == (0.0, False, False)
    assert info["action"] == "invalid" and info["tool_spans"] == [
        (24, 24 + len(INVALID_ACTION_MESSAGE))
    ]
    obs, r, term, trunc, info = env.step("<answer>definitely not it</answer>")
    assert (r, term) == (0.0, True) and info["em"] == 0.0 and not info["correct"]


def test_max_turns_truncates(env):
    env.reset(seed=0)
    for turn in range(1, env.max_turns + 1):
        obs, r, term, trunc, info = env.step("<search>anything</search>")
        if turn < env.max_turns:
            assert not trunc and obs
    assert (obs, r, term, trunc) == ("", 0.0, False, True)
    assert info["n_searches"] == env.max_turns - 1  # the last turn's search is not run
    assert "max_turns" in info["reason"] and info["em"] == 0.0


def test_unterminated_and_nested_tags():
    assert parse_action("<search> foo") == ("invalid", "")
    assert parse_action("<answer> foo") == ("invalid", "")
    assert parse_action("<search>a <search>b</search></search>") == ("search", "b")
    assert parse_action("<search>q</search> then <answer>x</answer>") == ("answer", "x")
    assert parse_action("<answer>x</answer><search>q</search>") == ("search", "q")
    assert parse_action("<search>q</search>\nextra words") == ("search", "q")


def test_bad_queries_are_observations(env):
    env.reset(seed=0)
    obs, *_, info = env.step("<search>   </search>")
    assert "Empty search query" in obs and info["n_searches"] == 0 and info["search_error"]
    obs, *_, info = env.step("<search>" + "x" * 99_000 + "</search>")
    assert f"cut to its first {MAX_QUERY_CHARS}" in obs and info["n_searches"] == 1
    # a response is cut at MAX_RESPONSE_CHARS (100k) first: the search tag is then unterminated
    obs, *_, info = env.step("<search>" + "x" * 100_000 + "</search>")
    assert obs == INVALID_ACTION_MESSAGE and info["action"] == "invalid"
    env.reset(seed=0)
    obs, *_, info = env.step(b"<search>caf\xe9 \xff\xfe</search>")
    assert obs.startswith("\n\n<information>")


def test_observation_budget():
    env = SearchQAEnv(max_obs_chars=120, topk=5)
    _, info = env.reset(seed=1)
    obs = env.step(f"<search>{info['question']}</search>")[0]
    body = obs[len("\n\n<information>") : -len("</information>\n\n")]
    assert len(body) <= 120 and body.endswith("...")


def test_failing_retriever_never_crashes():
    class Broken:
        def search(self, queries, k):
            raise ConnectionError("service down")

    env = SearchQAEnv(retriever=Broken())
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("<search>x</search>")
    assert "Search failed: service down" in obs and not term and info["n_searches"] == 0


def test_synthetic_determinism_and_split():
    c1, q1 = synthetic_task(seed=11, n_people=30)
    c2, q2 = synthetic_task(seed=11, n_people=30)
    assert list(c1) == list(c2) and q1 == q2
    assert list(synthetic_task(seed=12, n_people=30)[0]) != list(c1)
    test = synthetic_task(seed=11, split="test", n_people=30)[1]
    assert not {q.question for q in test} & {q.question for q in q1}
    assert {q.meta["hops"] for q in q1} == {1, 2}
    e1 = SearchQAEnv(seed=11, synthetic={"n_people": 30}, split="test")
    e2 = SearchQAEnv(seed=11, synthetic={"n_people": 30}, split="test")
    assert e1.reset(seed=4) == e2.reset(seed=4)


def test_constructor_errors():
    with pytest.raises(ValueError, match="topk"):
        SearchQAEnv(topk=0)
    with pytest.raises(ValueError, match="template"):
        SearchQAEnv(template="llama")
    with pytest.raises(ValueError, match="needs passages"):
        SearchQAEnv(dataset=[{"question": "q?", "answers": ["a"]}])
    with pytest.raises(ValueError, match="split"):
        SearchQAEnv(split="dev")


def test_list_dataset_with_own_corpus():
    passages = [
        {"id": "1", "title": "Zorb", "text": "Zorb was founded in 1234."},
        {"id": "2", "title": "Quix", "text": "Quix is blue."},
    ]
    env = SearchQAEnv(
        dataset=[{"question": "When was Zorb founded?", "answers": ["1234"]}], corpus=passages
    )
    _, info = env.reset(seed=0)
    assert info["ground_truth"] == ["1234"]
    obs = env.step("<search>Zorb founded</search>")[0]
    # Search-R1's _passages2string keeps the quotes of the corpus contents' title line
    assert obs.startswith('\n\n<information>Doc 1(Title: "Zorb") Zorb was founded in 1234.\nDoc 2')


def test_hops_filter():
    import gymnasium as gym
    import pytest as _pytest

    for h in (1, 2):
        env = gym.make("rlvr/SearchQA-v0", dataset="synthetic", hops=h)
        for i in range(5):
            _, info = env.reset(seed=0, options={"index": i})
            assert info["hops"] == h
    with _pytest.raises(ValueError, match="hops"):
        gym.make("rlvr/SearchQA-v0", dataset="synthetic", hops=3)
