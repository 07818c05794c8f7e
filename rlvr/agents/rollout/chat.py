"""Prompts rendered with the model's own chat template.

An env renders its prompt with a template of its own (``rlvr.envs.prompts``) and also returns
the chat ``messages`` in ``info`` (docs/design.md §3). With ``env_kwargs.template=chat`` a
pretrained chat model is prompted as it was tuned: ``model_prompt`` applies the tokenizer's chat
template to those messages (``add_generation_prompt=True``, as TRL and verl do) and appends the
env's assistant prefill (``info["prefill"]``: K&K's ``<think>``, math's ``prefill``), which the
env's scorer counts as part of the response. SmolLM2's template, for one, adds its own system
prompt when the messages have none (search QA's). Any other template keeps the env's prompt.
"""

from __future__ import annotations

from typing import Any

#: The env template that asks for the model's own chat template.
CHAT = "chat"


def chat_prompt(tokenizer, info: dict[str, Any]) -> str:
    """``info["messages"]`` under the tokenizer's chat template, then ``info["prefill"]``."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "env_kwargs.template=chat: the model's tokenizer has no chat template (use one of "
            "the env's own templates: qwen, plain, none)"
        )
    messages = info.get("messages")
    if not messages:
        raise ValueError("env_kwargs.template=chat: the env's reset info has no 'messages'")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text + str(info.get("prefill", ""))


def model_prompt(tokenizer, env, prompt: str, info: dict[str, Any]) -> str:
    """The prompt the model sees for ``env.reset``'s ``(prompt, info)``: ``chat_prompt`` when
    the env was made with ``template="chat"``, else the env's own ``prompt``."""
    if getattr(getattr(env, "unwrapped", env), "template", None) == CHAT:
        return chat_prompt(tokenizer, info)
    return prompt
