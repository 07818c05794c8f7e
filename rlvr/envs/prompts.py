"""Rendering chat prompts into the text a causal LM continues.

Environments return the prompt as one string (docs/design.md §3) and also the chat ``messages``
in ``info`` for trainers that apply their own chat template (TRL, verl). Templates:

- ``"qwen"``: the Qwen2.5 chat template (``<|im_start|>role\\n...<|im_end|>``), as in Logic-RL's
  parquet prompts and the paper's Qwen2.5 runs.
- ``"plain"``: ``System: ...\\nUser: ...\\nAssistant:`` — short, for the tiny CPU models.
- ``"none"``: the user text alone (the system text is prepended to it when given).
- ``"chat"``: the model's own chat template. An env has no tokenizer, so its prompt string is the
  ChatML rendering (as ``"qwen"``); a consumer that has the model's tokenizer renders
  ``info["messages"]`` with it and appends ``info["prefill"]`` (rlvr's trainer and evaluation:
  ``rlvr.agents.rollout.chat``; TRL and verl apply the template to the messages themselves).

``prefill`` (e.g. ``"<think>"``) starts the assistant turn; scorers that count tags must be told
about it (K&K counts a prefilled ``<think>``).
"""

from __future__ import annotations

TEMPLATES = ("qwen", "plain", "none", "chat")


def chat_messages(system: str | None, user: str) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": system}] if system else []
    msgs.append({"role": "user", "content": user})
    return msgs


def render_prompt(system: str | None, user: str, template: str = "qwen", prefill: str = "") -> str:
    if template in ("qwen", "chat"):
        head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
        return f"{head}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{prefill}"
    if template == "plain":
        head = f"System: {system}\n" if system else ""
        return f"{head}User: {user}\nAssistant: {prefill}"
    if template == "none":
        head = f"{system}\n\n" if system else ""
        return f"{head}{user}\n{prefill}" if prefill else f"{head}{user}"
    raise ValueError(f"template must be one of {TEMPLATES}, got {template!r}")
