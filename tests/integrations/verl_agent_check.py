"""The ``rlvr_searchqa`` agent loop inside verl 0.9.1's own rollout machinery.

Run by ``scripts/test_integrations.sh verl`` in the verl venv. Real: verl's Hydra config with
``VERL_OVERRIDES``, ``RLHFDataset`` over ``rlvr prepare-verl``-style parquet, the
``AgentLoopWorker`` that instantiates the loop from verl's registry, verl's reward-loop worker
with our ``compute_score``, and ``rlvr retrieval-serve`` in its own process on loopback. Faked:
only the policy, a stand-in for verl's ``LLMServerClient.generate`` that returns scripted token
ids. Each episode is replayed through ``gymnasium.make("rlvr/SearchQA-v0")`` and compared token
for token.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import verl  # noqa: F401  (loads the verl.plugins entry points, ours included)
from hydra import compose, initialize_config_dir
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry
from verl.experimental.reward_loop import RewardLoopWorker
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.utils.ray_utils import get_event_loop as verl_get_event_loop
from verl.workers.rollout.replica import TokenOutput

import rlvr
from rlvr.cli import main as rlvr_main
from rlvr.envs import env_spec
from rlvr.integrations.verl import agent_loop as verl_agent_loop
from rlvr.integrations.verl.agent_loop import section_settings, stop_cut
from rlvr.integrations.verl.data import agent_loop_overrides, verl_rows, write_parquet
from rlvr.models.micro import byte_level_tokenizer, micro_config
from rlvr.models.tokenizer import TAG_TOKENS

MAX_TURNS, TOPK, PROMPT_LENGTH, RESPONSE_LENGTH = 3, 2, 1024, 2048
SEARCHQA = env_spec("searchqa")
#: The loop's name, stop strings and verl settings: search QA's registry entry.
AGENT_NAME, STOP, VERL_OVERRIDES = (
    SEARCHQA.verl.agent_loop,
    SEARCHQA.stop,
    agent_loop_overrides("searchqa"),
)


def searchqa_settings(config):
    return section_settings(SEARCHQA, config)


#: The env's "qwen" prompt layout (rlvr.envs.prompts.render_prompt) as a chat template.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VERL_CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"


# -- fixtures: the retrieval service, a model folder, verl's config ---------------------------
@pytest.fixture(scope="module")
def retrieval_url(tmp_path_factory):
    """``rlvr retrieval-serve`` (its own process) over a lexical index of the synthetic corpus."""
    index_dir = tmp_path_factory.mktemp("index")
    argv = ["index", "--corpus", "synthetic", "--encoder", "lexical", "--out", str(index_dir)]
    assert rlvr_main(argv) == 0
    repo = Path(rlvr.__file__).resolve().parents[1]
    # the rlvr this test imported, whether installed or put on the path
    path = [str(repo), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlvr.cli",
            "retrieval-serve",
            "--index",
            str(index_dir),
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert " at http://127.0.0.1:" in line, line + proc.stderr.read()
        yield line.rsplit(" at ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tokenizer (bytes + chat markers + the task tags as single tokens) with the env's chat
    layout, ending turns with ``<|im_end|>``, and a Qwen2 config: what verl's model config loads."""
    path = tmp_path_factory.mktemp("model")
    tok = byte_level_tokenizer()
    tok.add_tokens(list(TAG_TOKENS))
    tok.chat_template = CHAT_TEMPLATE
    tok.eos_token = "<|im_end|>"
    tok.save_pretrained(path)
    config = micro_config(len(tok))
    config.eos_token_id, config.pad_token_id = tok.eos_token_id, tok.pad_token_id
    config.architectures = ["Qwen2ForCausalLM"]
    config.save_pretrained(path)
    return path


def verl_config(model_dir, retrieval_url, response_length=RESPONSE_LENGTH, **searchqa):
    """verl 0.9.1's ``ppo_trainer`` config composed by Hydra with ``VERL_OVERRIDES`` and the run's
    ``rlvr.searchqa`` section (Hydra rejects an override of a key the config lacks)."""
    settings = {"retrieval_url": retrieval_url, "max_turns": MAX_TURNS, "topk": TOPK, **searchqa}
    overrides = [f"{k}={hydra_value(v)}" for k, v in VERL_OVERRIDES.items()]
    overrides += [f"+rlvr.searchqa.{k}={hydra_value(v)}" for k, v in settings.items()]
    overrides += [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        f"data.max_prompt_length={PROMPT_LENGTH}",
        f"data.max_response_length={response_length}",
    ]
    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def hydra_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# -- the policy: scripted turns, the only stand-in --------------------------------------------
class ScriptedPolicy:
    """Stands in for verl's ``LLMServerClient.generate``: answers each request with the next
    scripted turn of the episode whose question is in the prompt, as token ids with log-probs.
    (A plain class: Hydra's ``instantiate`` would turn a dataclass argument into a config.)"""

    def __init__(self, tokenizer, scripts: dict[str, list[str]]):
        self.tokenizer, self.scripts = tokenizer, scripts
        self.calls: dict[str, list[dict]] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        prompt = self.tokenizer.decode(prompt_ids)
        question = next(q for q in self.scripts if q in prompt)
        calls = self.calls.setdefault(request_id, [])
        calls.append({"question": question, "prompt_ids": list(prompt_ids), **sampling_params})
        text = self.scripts[question][len(calls) - 1]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = ids[: sampling_params["max_tokens"]]
        logprobs = [-0.25 - 0.01 * i for i in range(len(ids))]
        return TokenOutput(
            token_ids=ids,
            log_probs=logprobs if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": 1},
        )


def scripts_for(rows):
    """Four episodes: search then the gold answer; a turn with no action ending in the end token,
    a search, a wrong answer; searches until ``max_turns`` truncates; text past the stop strings
    (an engine that overshoots). Returns the scripts and, per turn, the text the env must see."""
    (q0, g0), (q1, _), (q2, _), (q3, g3) = [
        (r["extra_info"]["question"], r["reward_model"]["ground_truth"]["target"][0]) for r in rows
    ]
    scripts = {
        q0: [f"<think>look it up</think><search> {q0} </search>", f"<answer> {g0} </answer>"],
        q1: ["I do not know.<|im_end|>", f"<search> {q1} </search>", "<answer> nobody </answer>"],
        q2: ["<search> a </search>", "<search> b </search>", "<search> c </search>", "<answer>x"],
        q3: [
            f"<search> {q3} </search> and then <information>made up</information>",
            f"<answer> {g3} </answer> and more text",
        ],
    }
    seen = {
        q0: scripts[q0],
        q1: ["I do not know.", *scripts[q1][1:]],
        q2: scripts[q2][:MAX_TURNS],
        q3: [f"<search> {q3} </search>", f"<answer> {g3} </answer>"],
    }
    return scripts, seen


def replay(question, golds, turns, retrieval_url):
    """The same turns through ``gymnasium.make("rlvr/SearchQA-v0")``: prompt, per-turn
    observations, final reward and info."""
    env = gym.make(
        "rlvr/SearchQA-v0",
        dataset=[{"question": question, "answers": golds}],
        retriever=retrieval_url,
        max_turns=MAX_TURNS,
        topk=TOPK,
    )
    prompt, _ = env.reset(options={"index": 0})
    observations, reward, info = [], 0.0, {}
    for text in turns:
        obs, reward, terminated, truncated, info = env.step(text)
        observations.append(obs)
        if terminated or truncated:
            break
    return prompt, observations, reward, info


def rollout(config, tokenizer, rows, scripts, tmp_path):
    """verl's path from parquet to a generated batch: RLHFDataset, collate, AgentLoopWorker."""
    path = write_parquet(rows, tmp_path / "train.parquet")
    dataset = RLHFDataset([str(path)], tokenizer, config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    assert list(batch.non_tensor_batch["agent_name"]) == [AGENT_NAME] * len(rows)
    batch.meta_info = {"global_steps": 1, "validate": False}
    policy = ScriptedPolicy(tokenizer, scripts)
    worker = AgentLoopWorker(config, policy)

    return run_async(worker.generate_sequences(batch)), policy


def run_async(coroutine):
    """Run on one event loop for the whole module: verl's workers keep the loop current when
    they are built (``verl.utils.ray_utils.get_event_loop``) and schedule their executors on it."""
    loop = verl_get_event_loop()
    return loop.run_until_complete(coroutine)


def unpadded(output, i):
    """Prompt ids, response ids, response mask and rollout log-probs of row ``i`` without
    padding."""
    attn = output.batch["attention_mask"][i]
    p = output.batch["prompts"].shape[1]
    prompt = output.batch["prompts"][i][attn[:p].bool()].tolist()
    n = int(attn[p:].sum())
    return (
        prompt,
        output.batch["responses"][i][:n].tolist(),
        output.batch["response_mask"][i][:n].tolist(),
        output.batch["rollout_log_probs"][i][:n].tolist(),
    )


# -- tests ------------------------------------------------------------------------------------
def test_registered_through_the_plugin():
    assert _agent_loop_registry[AGENT_NAME] == {
        "_target_": "rlvr.integrations.verl.agent_loop.SearchqaAgentLoop"
    }
    assert verl_agent_loop.AGENT_LOOPS["searchqa"] is verl_agent_loop.SearchqaAgentLoop
    assert verl_agent_loop.SearchqaAgentLoop.env == "searchqa"


def test_overrides_compose_with_verls_config(model_dir, retrieval_url):
    cfg = verl_config(model_dir, retrieval_url)
    assert cfg.actor_rollout_ref.rollout.mode == "async"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == AGENT_NAME
    assert searchqa_settings(cfg) == {
        "retriever": retrieval_url,
        "max_turns": MAX_TURNS,
        "topk": TOPK,
    }
    docs = Path(rlvr.__file__).resolve().parents[1] / "docs" / "integrations_verl.md"
    section = docs.read_text(encoding="utf-8").split("## Search QA agent loop")[1]
    documented = section.split("\n## ")[0].splitlines()
    assert [f"{k}={hydra_value(v)}" for k, v in VERL_OVERRIDES.items()] == [
        line for line in documented if line.split("=")[0] in VERL_OVERRIDES
    ]


def test_settings_errors_name_the_key():
    with pytest.raises(ValueError, match=r"config\.rlvr\.searchqa:.*needs this section"):
        searchqa_settings({})
    with pytest.raises(ValueError, match="retrieval_url: required"):
        searchqa_settings({"rlvr": {"searchqa": {"topk": 3}}})
    with pytest.raises(ValueError, match="unknown keys"):
        searchqa_settings({"rlvr": {"searchqa": {"retrieval_url": "http://x:1", "top_k": 3}}})
    with pytest.raises(ValueError, match="expected http"):
        searchqa_settings({"rlvr": {"searchqa": {"retrieval_url": "localhost:8000"}}})


def test_stop_cut_keeps_the_shortest_prefix_with_a_stop_string(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    for text, kept in [
        ("<search> q </search> more", "<search> q </search>"),
        ("<answer> x </answer><search> q </search>", "<answer> x </answer>"),
        ("<search> q </search>", "<search> q </search>"),
        ("no tags at all", "no tags at all"),
        ("", ""),
    ]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids[: stop_cut(tok, ids, STOP)]) == kept
    # stop strings split over several tokens (a tokenizer without the tag tokens)
    byte_tok = byte_level_tokenizer()
    ids = byte_tok("<search> q </search> x", add_special_tokens=False)["input_ids"]
    assert byte_tok.decode(ids[: stop_cut(byte_tok, ids, STOP)]) == "<search> q </search>"
    assert set(STOP) == {"</search>", "</answer>"}


def test_episodes_match_the_env_token_for_token(model_dir, retrieval_url, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = list(verl_rows("searchqa", 4, split="train", seed=0))
    scripts, seen = scripts_for(rows)
    config = verl_config(model_dir, retrieval_url)
    output, policy = rollout(config, tokenizer, rows, scripts, tmp_path)
    reward_worker = RewardLoopWorker(config)
    by_question = {c[0]["question"]: c for c in policy.calls.values()}
    assert len(by_question) == 4

    expected_turns = {0: (2, 1), 1: (3, 2), 2: (3, 2), 3: (2, 1)}  # (generations, observations)
    ends = []
    for i, row in enumerate(rows):
        question = row["extra_info"]["question"]
        golds = row["reward_model"]["ground_truth"]["target"]
        prompt_text, observations, env_reward, info = replay(
            question, golds, seen[question], retrieval_url
        )
        prompt, response, mask, logprobs = unpadded(output, i)
        # the prompt: verl's rendering of the row's messages is the env's prompt, token for token
        assert prompt == tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        # the response: each generated turn (as sampled, cut at its stop string) then the env's
        # observation tokenized on its own; mask 1 on the policy's tokens, 0 on the env's
        want_ids, want_mask, want_lp, starts = [], [], [], []
        for j, obs in enumerate(observations):
            starts.append(len(want_ids))
            ids = tokenizer(scripts[question][j], add_special_tokens=False)["input_ids"]
            keep = len(tokenizer(seen[question][j], add_special_tokens=False)["input_ids"])
            if scripts[question][j].endswith("<|im_end|>"):
                keep += 1  # the end token is generated (mask 1) and decoded away
            obs_ids = tokenizer(obs, add_special_tokens=False)["input_ids"] if obs else []
            want_ids += ids[:keep] + obs_ids
            want_mask += [1] * keep + [0] * len(obs_ids)
            want_lp += [-0.25 - 0.01 * k for k in range(keep)] + [0.0] * len(obs_ids)
        assert response == want_ids
        assert mask == want_mask
        assert logprobs == pytest.approx(want_lp)
        assert tokenizer.decode(response, skip_special_tokens=True) == info["transcript"]
        # turns: the env's (max_turns truncates the third search), verl's count of them
        generations, obs_turns = expected_turns[i]
        assert len(observations) == generations and sum(map(bool, observations)) == obs_turns
        assert info["turn"] == generations
        assert output.non_tensor_batch["__num_turns__"][i] == 1 + generations + obs_turns
        # the env's count of searches goes out with the trajectory (RlvrPPOTrainer logs it)
        assert output.non_tensor_batch["tool_calls"][i] == info["tool_calls"]
        assert output.non_tensor_batch["tool_failures"][i] == {"search": []}
        # each turn continued the running sequence, with the stop strings and remaining budget
        calls = by_question[question]
        assert len(calls) == generations
        for call, start in zip(calls, starts):
            assert call["prompt_ids"] == prompt + response[:start]
            assert call["stop"] == list(STOP) and call["include_stop_str_in_output"] is True
            assert call["max_tokens"] == RESPONSE_LENGTH - start
        # the reward: verl's reward-loop worker on the decoded response = the env's reward
        result = run_async(reward_worker.compute_score(output[i : i + 1]))
        assert result["reward_score"] == env_reward
        assert result["reward_extra_info"]["acc"] == float(info["correct"])
        ends.append((env_reward, info["reason"].startswith(f"max_turns={MAX_TURNS} reached")))
    # (reward, truncated by max_turns): both outcomes and the truncation are covered
    assert ends == [(1.0, False), (0.0, False), (0.0, True), (1.0, False)]


def test_response_budget_cuts_the_observation(model_dir, retrieval_url, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = list(verl_rows("searchqa", 1, split="train", seed=0))
    question = rows[0]["extra_info"]["question"]
    scripts = {question: [f"<search> {question} </search>", "<answer> never </answer>"]}
    budget = 64
    config = verl_config(model_dir, retrieval_url, response_length=budget)
    output, policy = rollout(config, tokenizer, rows, scripts, tmp_path)
    _, response, mask, _ = unpadded(output, 0)
    n_gen = len(tokenizer(scripts[question][0], add_special_tokens=False)["input_ids"])
    assert len(response) == budget  # the observation filled the rest of the budget
    assert mask == [1] * n_gen + [0] * (budget - n_gen)
    assert [len(c) for c in policy.calls.values()] == [1]  # no turn after the budget ran out
    assert np.asarray(output.batch["response_mask"]).shape[1] == budget


def test_a_failed_search_goes_out_with_the_trajectory(model_dir, tmp_path):
    """A service that cannot be reached: the search is an observation for the policy and a
    recorded failure for the trainer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = list(verl_rows("searchqa", 1, split="train", seed=0))
    question = rows[0]["extra_info"]["question"]
    scripts = {question: [f"<search> {question} </search>", "<answer> x </answer>"]}
    config = verl_config(model_dir, "http://127.0.0.1:9")  # nothing listens on port 9
    output, _ = rollout(config, tokenizer, rows, scripts, tmp_path)
    assert output.non_tensor_batch["tool_calls"][0] == {"search": 1}
    (failure,) = output.non_tensor_batch["tool_failures"][0]["search"]
    assert failure.startswith("RetrievalError: retrieval service at http://127.0.0.1:9/retrieve")
