"""``rlvr/Custom-v0``: a task from a file of prompts and reward functions, no env class to write.

    env = gymnasium.make("rlvr/Custom-v0", dataset="tasks.jsonl",
                         reward="my_lab.rewards:exact_match")
    prompt, info = env.reset(options={"index": 0})    # info["ground_truth"]: the row
    _, reward, terminated, truncated, info = env.step("42")

``dataset``: a ``.jsonl`` file (one JSON object a line), a ``.json`` list or a ``.parquet`` file
of rows with a ``prompt`` (a string, or chat messages ``[{"role": ..., "content": ...}]`` as in
TRL's conversational format) and any other columns, which the reward functions receive as
keyword arguments (``rlvr.envs.custom.rewards``: TRL's signature). ``test_dataset``: the rows of
``split="test"`` (evaluation); without it both splits are ``dataset``, so an evaluation measures
the training rows.

``template="auto"`` prompts as TRL does: a string prompt is the text as written, messages go
through the model's own chat template (``rlvr.agents.rollout.chat``); ``qwen``, ``plain``,
``none`` and ``chat`` choose one layout for every row (``rlvr.envs.prompts``). ``system_prompt``
goes before string prompts; ``prefill`` starts the assistant turn and is scored in front of the
response (as math's is).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rlvr.envs.base import Score, SingleTurnEnv, drop_oversized
from rlvr.envs.custom.rewards import check_callable, parse_refs, parse_weights, score
from rlvr.envs.prompts import TEMPLATES, render_prompt
from rlvr.envs.rows import RowError, object_row, rows_of_file

#: ``template`` values: the env's own layouts and ``auto`` (TRL's choice per prompt type).
CUSTOM_TEMPLATES = ("auto", *TEMPLATES)
_ROLES = {"system": "System", "user": "User", "assistant": "Assistant"}


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``.jsonl`` / ``.json`` / ``.parquet`` file (``rlvr.envs.rows``); a row that
    is no JSON object with a ``prompt`` is ``RowError`` naming its file and line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"dataset {str(path)!r}: no such file (.jsonl, .json or .parquet)")
    rows = []
    for where, row in rows_of_file(path):
        row = object_row(row, where)
        if not (isinstance(row.get("prompt"), str) or _is_messages(row.get("prompt"))):
            raise RowError(
                f"{where}: field 'prompt' must be a string or a list of {{'role', 'content'}} "
                "messages"
            )
        rows.append(row)
    if not rows:
        raise RowError(f"dataset {path}: no rows")
    return rows


def _is_messages(prompt: Any) -> bool:
    return (
        isinstance(prompt, list)
        and bool(prompt)
        and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in prompt)
    )


def render_messages(messages: Sequence[dict], template: str, prefill: str = "") -> str:
    """Chat messages as the text of ``template`` (``rlvr.envs.prompts``' layouts, every turn)."""
    if template in ("qwen", "chat"):
        turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return f"{turns}<|im_start|>assistant\n{prefill}"
    if template == "plain":
        turns = "".join(f"{_ROLES.get(m['role'], m['role'])}: {m['content']}\n" for m in messages)
        return f"{turns}Assistant: {prefill}"
    text = "\n\n".join(str(m["content"]) for m in messages)
    return f"{text}\n{prefill}" if prefill else text


class CustomTaskEnv(SingleTurnEnv):
    """Rows of a file, scored by reward functions in TRL's signature (module docstring)."""

    def __init__(
        self,
        dataset: str | None = None,
        reward: str | Sequence[str] | None = None,
        *,
        reward_weights: Sequence[float] | None = None,
        correct_at: float | None = None,
        test_dataset: str | None = None,
        split: str = "train",
        template: str = "auto",
        system_prompt: str | None = None,
        prefill: str = "",
        max_prompt_chars: int = 20_000,
        render_mode: str | None = None,
    ):
        super().__init__(max_prompt_chars=max_prompt_chars, render_mode=render_mode)
        if not dataset or not reward:
            raise ValueError(
                "env=custom needs dataset=FILE (.jsonl rows with a 'prompt') and "
                "reward=module:function (docs/custom_tasks.md)"
            )
        if template not in CUSTOM_TEMPLATES:
            raise ValueError(f"template must be one of {CUSTOM_TEMPLATES}, got {template!r}")
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.reward = parse_refs(reward)
        self.reward_weights = parse_weights(reward_weights, len(self.reward))
        self.correct_at = None if correct_at is None else float(correct_at)
        self.split = split
        self.source = str(test_dataset if split == "test" and test_dataset else dataset)
        self.system_prompt = system_prompt
        self.prefill = str(prefill)
        rows = read_rows(self.source)
        kinds = {isinstance(r["prompt"], str) for r in rows}
        if template == "auto" and len(kinds) > 1:
            raise ValueError(
                f"dataset {self.source}: string and chat prompts mixed; template=auto cannot "
                "prompt both as TRL would (choose a template: qwen, plain, none, chat)"
            )
        self.template = ("none" if kinds == {True} else "chat") if template == "auto" else template
        columns = sorted({k for r in rows for k in r})
        for ref in self.reward:
            check_callable(ref, columns)
        self.rows = drop_oversized(rows, self._render, max_prompt_chars, repr(self.source))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def num_tasks(self) -> int:
        """Rows of the split; ``reset`` accepts ``options["index"]`` in ``[0, num_tasks)``."""
        return len(self.rows)

    def _messages(self, row: dict) -> list[dict[str, str]]:
        prompt = row["prompt"]
        if isinstance(prompt, list):
            return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*head, {"role": "user", "content": prompt}]

    def _render(self, row: dict) -> str:
        if isinstance(row["prompt"], str):
            return render_prompt(self.system_prompt, row["prompt"], self.template, self.prefill)
        return render_messages(self._messages(row), self.template, self.prefill)

    def _sample_task(self, rng, options: dict[str, Any]):
        index = options.get("index")
        index = int(rng.integers(len(self.rows))) if index is None else int(index)
        if not 0 <= index < len(self.rows):
            raise ValueError(f"options['index'] must be in [0, {len(self.rows)}), got {index}")
        row = self.rows[index]
        extra = {
            "messages": self._messages(row),
            "prefill": self.prefill,
            "index": index,
            "source": self.source,
        }
        return self._render(row), dict(row), extra

    @property
    def scoring(self) -> dict[str, Any]:
        """The scorer's options (what an exported row carries: ``rewards.row_options``)."""
        names = ("reward", "reward_weights", "correct_at", "prefill")
        return {k: getattr(self, k) for k in names}

    def _score(self, response: str, ground_truth: Any) -> Score:
        return score(response, ground_truth, **self.scoring)
