"""Logic-RL's prompt for Knights & Knaves (Xie et al. 2025, arXiv 2502.14768, ``data/kk`` parquet).

``LOGIC_RL_SYSTEM_PROMPT`` is byte-for-byte the system turn of Logic-RL's parquet prompts
(double space and missing space before ``<answer>`` included), and the user turn is the quiz plus
a newline, so ``kk_prompt(quiz)`` with the Qwen template and ``<think>`` prefill reproduces their
``prompt`` strings exactly.
"""

from __future__ import annotations

from rlvr.envs.prompts import chat_messages, render_prompt

LOGIC_RL_SYSTEM_PROMPT = (
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the "
    "mind and then provides the user with the answer. The reasoning process and answer are "
    "enclosed within <think> </think> and<answer> </answer> tags, respectively, i.e., <think> "
    "reasoning process here </think><answer> answer here </answer>.  Now the user asks you to "
    "solve a logical reasoning problem. After thinking, when you finally reach a conclusion, "
    "clearly state the identity of each character within <answer> </answer> tags. i.e., "
    "<answer> (1) Zoey is a knight\n(2) ... </answer>.\n"
)

#: A short variant for tiny models with small context windows.
SHORT_SYSTEM_PROMPT = (
    "Think inside <think> </think>, then answer inside <answer> </answer> with one line per "
    "person, e.g. <answer> (1) Zoey is a knight\n(2) Liam is a knave </answer>."
)

THINK_PREFILL = "<think>"


def user_message(quiz: str) -> str:
    return quiz + "\n"


def kk_prompt(
    quiz: str,
    *,
    template: str = "qwen",
    prefill_think: bool = True,
    system_prompt: str | None = None,
    answer_prefill: str = "",
) -> tuple[str, list[dict[str, str]]]:
    """(prompt text, chat messages) for one quiz; ``system_prompt=None`` means Logic-RL's. The
    assistant turn starts with ``assistant_prefill(prefill_think, answer_prefill)``."""
    system = LOGIC_RL_SYSTEM_PROMPT if system_prompt is None else system_prompt
    user = user_message(quiz)
    prompt = render_prompt(
        system, user, template=template, prefill=assistant_prefill(prefill_think, answer_prefill)
    )
    return prompt, chat_messages(system, user)


def assistant_prefill(prefill_think: bool, answer_prefill: str = "") -> str:
    """The text that starts the assistant turn: Logic-RL's ``<think>`` (``prefill_think``), then
    ``answer_prefill`` (e.g. ``"</think><answer>(1)"``: a model too small to reason answers at
    once, in the rewarded layout)."""
    return (THINK_PREFILL if prefill_think else "") + answer_prefill
