"""Checks against the real TRL 1.16.0, run inside its own venv by ``scripts/test_integrations.sh``.

Not collected by the main suite (the file name does not match ``test_*.py``): it needs TRL.
"""

from __future__ import annotations

import inspect
import json
import os
from importlib.metadata import version

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from rlvr.envs.kk import score as kk_score
from rlvr.integrations.trl_rewards import (
    kk_reward,
    trl_dataset,
)
from rlvr.models import build_micro


def test_version_pinned():
    assert version("trl") == "1.16.0"


def test_reward_signature_matches_trl():
    """TRL calls reward_func(prompts=, completions=, completion_ids=, **columns,
    trainer_state=, ...)."""
    params = inspect.signature(kk_reward).parameters
    assert {"prompts", "completions"} <= set(params)
    assert any(p.kind is p.VAR_KEYWORD for p in params.values())
    assert "environment_factory" in inspect.signature(GRPOTrainer.__init__).parameters


def grpo_args(tmp_path, max_completion_length: int, **more) -> GRPOConfig:
    """Two GRPO steps of one prompt x four generations on the CPU, in fp32."""
    return GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=max_completion_length,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        seed=0,
        dataloader_num_workers=0,
        **more,
    )


def test_grpo_trainer_two_steps_on_micro_model_with_kk_reward(tmp_path):
    torch.set_num_threads(2)
    model, tokenizer = build_micro(seed=0)
    model_dir = tmp_path / "micro"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    # Standard (string) prompts: the micro tokenizer has no chat template; the env renders the
    # Qwen template itself, ending with the "<think>" prefill.
    dataset = trl_dataset(
        "kk", 8, split="train", conversational=False, env_kwargs={"n_people": 2, "template": "qwen"}
    )
    assert set(dataset.column_names) >= {"prompt", "ground_truth", "prefilled_think"}
    assert all(dataset["prefilled_think"])

    calls = []

    def kk(prompts, completions, **kwargs):
        rewards = kk_reward(prompts, completions, **kwargs)
        calls.append(
            (
                list(completions),
                list(kwargs["ground_truth"]),
                list(kwargs["prefilled_think"]),
                rewards,
            )
        )
        return rewards

    args = grpo_args(tmp_path, 12)
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=kk,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    assert next(trainer.model.parameters()).dtype == torch.float32
    trainer.train()

    assert trainer.state.global_step == 2
    assert len(calls) == 2
    for completions, gts, prefilled, rewards in calls:
        assert len(completions) == 4 and len(set(gts)) == 1  # one prompt, four generations
        assert rewards == [
            kk_score(c, gt, prefilled_think=p).reward
            for c, gt, p in zip(completions, gts, prefilled)
        ]
        assert all(-3.0 <= r <= 3.0 for r in rewards)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and all(-3.0 <= h["reward"] <= 3.0 for h in logged)


def test_an_env_registered_outside_rlvr_trains_with_trl(tmp_path):
    """One registration (``tests/_rlvr_toys.TOY``) and GRPOTrainer trains on it: its dataset, its
    reward function, and its episodes through ``environment_factory``."""
    from rlvr.integrations.trl_env import environment_factory, episode_reward
    from rlvr.integrations.trl_rewards import reward_func

    from _rlvr_toys import TOY, registered

    torch.set_num_threads(2)
    model, tokenizer = build_micro(seed=0)
    model.save_pretrained(tmp_path / "micro")
    tokenizer.save_pretrained(tmp_path / "micro")
    with registered(TOY):
        dataset = trl_dataset(TOY.name, 4, conversational=False, env_kwargs={"strict": True})
        assert dataset["strict"] == [True] * 4 and dataset["ground_truth"][1] == "10"
        trainer = GRPOTrainer(
            model=str(tmp_path / "micro"),
            reward_funcs=reward_func(TOY.name),
            args=grpo_args(tmp_path, 8),
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        trainer.train()
        env = environment_factory(TOY.name, strict=True)()
        env.reset(index=1)
        finished = [[{"role": "assistant", "content": "10"}]]
        assert episode_reward(["p"], finished, environments=[env]) == [1.0]
    assert trainer.state.global_step == 2
    assert any(k.startswith("rewards/toy_reward") for h in trainer.state.log_history for k in h)


def test_a_custom_task_trains_with_trl_on_its_own_reward_functions(tmp_path):
    """``env=custom`` (docs/custom_tasks.md): its rows as a TRL dataset, scored by TRL calling
    the reward functions themselves and by rlvr's ``reward_func("custom")``, which must agree."""
    from rlvr.envs.custom.rewards import exact_match
    from rlvr.integrations.trl_rewards import reward_func

    torch.set_num_threads(2)
    model, tokenizer = build_micro(seed=0)
    model.save_pretrained(tmp_path / "micro")
    tokenizer.save_pretrained(tmp_path / "micro")
    data = os.path.join(os.path.dirname(__file__), "..", "data", "custom_tasks.jsonl")
    kwargs = {"dataset": data, "reward": "rlvr.envs.custom.rewards:exact_match"}
    dataset = trl_dataset("custom", 4, conversational=False, env_kwargs=kwargs)
    assert dataset["reward"][0] == [kwargs["reward"]] and dataset["ground_truth"][1]["answer"]
    seen = []

    def both(prompts, completions, ground_truth, **columns):
        ours = reward_func("custom")(prompts, completions, ground_truth=ground_truth, **columns)
        theirs = exact_match(completions, [g["answer"] for g in ground_truth])
        seen.append((ours, theirs))
        return ours

    trainer = GRPOTrainer(
        model=str(tmp_path / "micro"),
        reward_funcs=both,
        args=grpo_args(tmp_path, 8),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    assert trainer.state.global_step == 2 and len(seen) == 2
    assert all(ours == theirs for ours, theirs in seen)


# -- rlvr.integrations.trl_env: the environments through environment_factory ------------------


def micro_tool_model(path):
    """The micro model with Qwen2.5's chat template (TRL recognises it, renders the tool schema
    into the prompt and parses ``<tool_call>`` JSON), ending turns with ``<|im_end|>``."""
    from trl.chat_template_utils import qwen2_5_chat_template

    model, tokenizer = build_micro(seed=0, max_position_embeddings=4096)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.eos_token = "<|im_end|>"
    model.config.eos_token_id = model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return tokenizer


def test_environment_classes_come_from_the_registry():
    from transformers.utils import get_json_schema

    from rlvr.envs import env_spec
    from rlvr.integrations.episodes import env_names
    from rlvr.integrations.trl_env import environment_class

    for name in env_names():
        cls = environment_class(name)
        public = sorted(
            n
            for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not n.startswith("_")
        )
        assert public == sorted(["reset", *[t.name for t in env_spec(name).tools]])
    schema = get_json_schema(environment_class("searchqa").search)["function"]
    assert schema["name"] == "search" and schema["parameters"]["required"] == ["query"]


def test_grpo_trainer_runs_the_search_environment_and_logs_our_rewards(tmp_path):
    from rlvr.envs import env_spec
    from rlvr.integrations.trl_env import (
        environment_factory,
        episode_reward,
        final_assistant_text,
        trl_env_dataset,
    )

    torch.set_num_threads(2)
    tokenizer = micro_tool_model(tmp_path / "micro")
    env_kwargs = {"dataset": "synthetic", "max_turns": 2}
    dataset = trl_env_dataset("searchqa", 2, env_kwargs=env_kwargs)
    calls = []

    def searchqa(prompts, completions, environments, **kwargs):
        rewards = episode_reward(prompts, completions, environments=environments, **kwargs)
        gts = [list(e._episode.info["ground_truth"]) for e in environments]
        actions = [[s.info["action"] for s in e._episode.steps] for e in environments]
        calls.append((list(completions), gts, actions, rewards))
        return rewards

    args = grpo_args(tmp_path, 48, max_tool_calling_iterations=2)
    trainer = GRPOTrainer(
        model=str(tmp_path / "micro"),
        reward_funcs=searchqa,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=environment_factory("searchqa", **env_kwargs),
    )
    assert [t.__name__ for t in trainer.tools] == ["search"]  # the env's tool, schema in the prompt
    trainer.train()

    assert trainer.state.global_step == 2 and len(calls) == 2
    score = env_spec("searchqa").score
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    for (completions, gts, actions, rewards), log in zip(calls, logged):
        assert len(completions) == 4
        assert all(a and a[-1] in ("answer", "invalid", "search") for a in actions)
        # each reward is the env's: our scorer on the policy's text of the episode
        for completion, gt, acts, reward in zip(completions, gts, actions, rewards):
            if "search" not in acts:
                assert reward == score(final_assistant_text(completion), gt).reward
        assert log["reward"] == pytest.approx(sum(rewards) / len(rewards))
        assert "searchqa/em" in log and "searchqa/format" in log


def test_a_tool_call_parsed_by_trl_steps_the_environment():
    """The tool path with a scripted reply: TRL's response parser reads the tool call, the call
    is dispatched as GRPOTrainer._tool_call_loop does (``tool(**arguments)``), and the final
    answer ends the episode with the env's reward."""
    from trl.chat_template_utils import add_response_schema, parse_response, qwen2_5_chat_template

    from rlvr.integrations.trl_env import environment_factory, episode_reward, trl_env_dataset

    _, tokenizer = build_micro(seed=0)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer = add_response_schema(tokenizer)
    row = trl_env_dataset("searchqa", 1, env_kwargs={"dataset": "synthetic"})[0]
    env = environment_factory("searchqa", dataset="synthetic")()
    env.reset(**row)
    question, gold = env._episode.info["question"], env._episode.info["ground_truth"][0]
    text = (
        '<tool_call>\n{"name": "search", "arguments": {"query": '
        + json.dumps(question)
        + '}}\n</tool_call><|im_end|>'
    )
    prompt = tokenizer.apply_chat_template(
        row["prompt"], tools=[env.search], add_generation_prompt=True, tokenize=False
    )
    assert '"name": "search"' in prompt  # the tool schema TRL renders for the model
    ids = tokenizer(text, add_special_tokens=False).input_ids
    prefix = tokenizer(prompt, add_special_tokens=False).input_ids
    message = parse_response(tokenizer, ids, prefix=prefix, tools=[env.search])
    (call,) = message["tool_calls"]
    result = getattr(env, call["function"]["name"])(**call["function"]["arguments"])
    assert result.startswith("\n\n<information>Doc 1(Title: ") and gold in result
    completion = [
        message,
        {"role": "tool", "name": "search", "content": result},
        {"role": "assistant", "content": f"<answer> {gold} </answer>"},
    ]
    logged = {}
    assert episode_reward(
        [row["prompt"]], [completion], environments=[env], log_metric=logged.__setitem__
    ) == [1.0]
    assert logged == {"searchqa/em": 1.0, "searchqa/f1": 1.0, "searchqa/format": 1.0}
