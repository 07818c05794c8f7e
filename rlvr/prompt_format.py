"""A model's prompt format: the environment settings it was built, warm-started or trained with.

A base model built here from scratch has seen one prompt layout only (the tiny bases: the
``plain`` template, no system turn, K&K's prefilled ``<think>``); under another layout every
answer is unparseable and its accuracy reads 0.000, a number about the prompt and not the model.
So a model carries its format, and every path that prompts it (``rlvr train``, ``rlvr eval``, the
reproduce grid, ``rlvr sample``, the verl and TRL exports) starts from it
(``rlvr.models.prompt_formats.with_format``); an explicit ``env_kwargs`` value still wins.

Where a format is recorded:

- a tiny base: its build configuration (``build.json``'s ``config.task``/``config.data``, or the
  preset's ``BuildConfig`` by name);
- a pretrained model rlvr ships a loader for: its source (SmolLM2: the model's own chat
  template, for any environment);
- a trained run's ``final/`` folder and a continued-SFT folder: ``prompt_format.json``
  (``write_format``), the settings the run was trained on and the base it started from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.errors import first_line
from rlvr.files import RecordError, read_json, write_text_atomic

#: The record a trained model's folder holds.
FORMAT_FILE = "prompt_format.json"
#: Records are a few hundred bytes; anything larger is not one.
MAX_RECORD_BYTES = 1 << 20


class FormatError(RecordError, ValueError):
    """A ``prompt_format.json`` that cannot be read as one (one line)."""


@dataclass(frozen=True)
class PromptFormat:
    """The environment settings a model was built or trained with.

    ``env`` is the environment they belong to (``None``: any environment, as a pretrained chat
    model's own template). ``from_scratch``: the model has seen no other format (built here from
    random weights, or trained from such a base), so another one gives meaningless scores.
    ``source`` says where the format was read, for the one line an evaluation prints."""

    env: str | None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    from_scratch: bool = False
    source: str = ""

    def settings(self, env: str) -> dict[str, Any]:
        """The settings that apply to ``env`` (none when the model was made for another)."""
        return dict(self.env_kwargs) if self.env in (None, env) else {}


def write_format(folder: str | Path, env: str, env_kwargs: dict[str, Any], base: str) -> Path:
    """``folder/prompt_format.json``: what a trained model was trained on (``split`` left out:
    a consumer picks its own) and the model it started from."""
    path = Path(folder) / FORMAT_FILE
    kwargs = {k: v for k, v in env_kwargs.items() if k != "split"}
    record = {"env": env, "env_kwargs": kwargs, "base": str(base)}
    return write_text_atomic(path, json.dumps(record, indent=2, default=str) + "\n")


def read_record(path: Path) -> dict[str, Any]:
    """A JSON object from ``path`` (a regular file of at most ``MAX_RECORD_BYTES``), or
    ``FormatError`` in one line."""
    try:
        record = read_json(path, MAX_RECORD_BYTES)  # a FIFO, a device, bad UTF-8 or JSON: refused
    except RecordError as e:
        raise FormatError(first_line(e)) from None
    if not isinstance(record, dict):
        raise FormatError(f"{path}: not a JSON object")
    return record


def describe(settings: dict[str, Any]) -> str:
    """``template='plain' system_prompt='' prefill_think=True``: settings in one line."""
    return " ".join(f"{k}={v!r}" for k, v in settings.items()) or "the environment's defaults"


__all__ = ["FORMAT_FILE", "FormatError", "PromptFormat", "describe", "read_record", "write_format"]
