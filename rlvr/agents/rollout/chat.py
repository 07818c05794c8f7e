"""Prompts rendered with the model's own chat template.

An env renders its prompt with a template of its own (``rlvr.envs.prompts``: Qwen's ChatML,
``plain``, ``none``) and also returns the chat ``messages`` in ``info`` (docs/design.md §3). A
pretrained chat model is prompted as it was tuned: ``chat_prompt`` applies the tokenizer's chat
template to those messages (``add_generation_prompt=True``, as TRL and verl do) and appends the
env's assistant prefill (``info["prefill"]``, e.g. K&K's ``<think>``), so the scorer's count of
prefilled tags still holds. SmolLM2's template, for one, adds its own system prompt when the
messages have none (search QA's).
"""

from __future__ import annotations

from typing import Any


def chat_prompt(tokenizer, info: dict[str, Any]) -> str:
    """``info["messages"]`` under the tokenizer's chat template, then ``info["prefill"]``."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "chat_template=true: the model's tokenizer has no chat template (use the env's own "
            "template, env_kwargs.template=qwen|plain|none, with chat_template=false)"
        )
    messages = info.get("messages")
    if not messages:
        raise ValueError("chat_template=true: the env's reset info has no 'messages'")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text + str(info.get("prefill", ""))
