"""Prompts in the model's own chat template (``env_kwargs.template=chat``): the renderer, the
trainer and the evaluation runner, on the micro model given a ChatML template with a default
system prompt (the shape of SmolLM2's: a system turn is added when the messages have none)."""

from __future__ import annotations

import pytest
import torch

from rlvr.agents.rollout.chat import chat_prompt, model_prompt
from rlvr.envs import make_env
from rlvr.eval import runner as R
from rlvr.models import build_micro
from rlvr.training.train_config import load_train_config
from rlvr.training.trainer import Trainer

CHATML = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nDefault helper<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture
def micro():
    torch.set_num_threads(1)
    model, tok = build_micro(seed=0)
    tok.chat_template = CHATML
    return model, tok


def test_chatml_with_a_system_turn_is_the_env_qwen_prompt_plus_prefill(micro):
    """K&K (a system prompt, a ``<think>`` prefill): the model's ChatML template gives the env's
    own Qwen rendering byte for byte, prefill included."""
    _, tok = micro
    env = make_env("kk", "test", n_people=3, template="qwen")
    prompt, info = env.reset(seed=0, options={"index": 0})
    assert info["prefill"] == "<think>"
    assert chat_prompt(tok, info) == prompt
    assert model_prompt(tok, env, prompt, info) == prompt  # an env template: the env's prompt
    chat = make_env("kk", "test", n_people=3, template="chat")
    assert chat.reset(seed=0, options={"index": 0})[0] == prompt  # ChatML as the env's text


def test_messages_without_a_system_turn_get_the_template_default(micro):
    _, tok = micro
    env = make_env("searchqa", "test", dataset="synthetic", template="chat")
    prompt, info = env.reset(seed=0, options={"index": 0})
    text = model_prompt(tok, env, prompt, info)
    assert text.startswith("<|im_start|>system\nDefault helper<|im_end|>\n")
    assert text.endswith(f"{info['messages'][-1]['content']}<|im_end|>\n<|im_start|>assistant\n")
    assert text != prompt


def test_no_chat_template_is_one_line(micro):
    _, tok = micro
    tok.chat_template = None
    env = make_env("kk", "test", n_people=3)
    _, info = env.reset(seed=0, options={"index": 0})
    with pytest.raises(ValueError, match="no chat template") as err:
        chat_prompt(tok, info)
    assert "\n" not in str(err.value)


def test_trainer_and_eval_prompt_through_the_chat_template(micro, tmp_path):
    model, tok = micro
    cfg = load_train_config(
        ["profile=micro", "env=kk", f"out={tmp_path}", "steps=1", "env_kwargs.template=chat"]
    )
    trainer = Trainer(cfg, model=model, tokenizer=tok)
    prompts = trainer._reset_group(trainer.envs[:2], 0)
    assert all(p.startswith("<|im_start|>system\n") for p in prompts)
    assert prompts[0].endswith("<|im_start|>assistant\n<think>")
    res = R.evaluate(
        R.EvalConfig(
            env="kk", env_kwargs={"template": "chat", "n_people": 3}, n_items=2, max_new_tokens=4
        ),
        model,
        tok,
        progress=False,
    )
    assert all(r["prompt"].startswith("<|im_start|>system\n") for r in res.records)
    plain = R.evaluate(
        R.EvalConfig(
            env="kk", env_kwargs={"template": "plain", "n_people": 3}, n_items=2, max_new_tokens=4
        ),
        model,
        tok,
        progress=False,
    )
    assert all(r["prompt"].startswith("System: ") for r in plain.records)


def test_math_prefill_starts_the_turn_and_is_scored_in_front(micro):
    """``prefill="\\boxed{"``: the prompt (env template or chat template) ends with it, and a
    response that only closes the box is scored as the boxed answer."""
    _, tok = micro
    env = make_env("math", "train", dataset="synthetic", difficulty=1, prefill="\\boxed{")
    prompt, info = env.reset(seed=0, options={"index": 0})
    assert prompt.endswith("<|im_start|>assistant\n\\boxed{")
    assert chat_prompt(tok, info).endswith("<|im_start|>assistant\n\\boxed{")
    answer = info["ground_truth"]
    assert env.step(f"{answer}}}")[1] == 1.0
    env.reset(seed=0, options={"index": 0})
    assert env.step(f"{answer} + 1}}")[1] == 0.0
    plain = make_env("math", "train", dataset="synthetic", difficulty=1)
    plain.reset(seed=0, options={"index": 0})
    assert plain.step(f"{answer}}}")[1] == 0.0  # no prefill: nothing boxed
