"""The prompt format of a model named as ``rlvr`` commands name one (``rlvr.prompt_format``).

``model_format(spec)`` reads it from wherever the model keeps it: a tiny preset's build
configuration (``tiny-kk``, ``tiny-kk@1``), a pretrained model's source (``smollm2-135m-instruct``:
its chat template), or a folder: ``prompt_format.json`` (a trained run's ``final/``, a
continued-SFT model), ``build.json`` (a tiny base or a de-quantized pretrained model), or, for a
run's ``final/`` written before the record existed, the run's ``config.yaml`` beside it. ``micro``
and hub names carry none: they get the environment's defaults.

``with_format(model, env, explicit)`` is what every path that prompts a model calls: the model's
settings under the explicit ones, and one line when an explicit setting contradicts the model's
(a refusal for a model trained from scratch, whose scores would be about the prompt; a warning
for a pretrained one, where another layout is a legitimate experiment).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from rlvr.config import ConfigError, deep_merge
from rlvr.envs import ENVS, env_spec, warmstart
from rlvr.errors import first_line
from rlvr.files import RecordError, read_text
from rlvr.models.names import parse_spec
from rlvr.models.pretrained import PRETRAINED
from rlvr.prompt_format import (
    FORMAT_FILE,
    MAX_RECORD_BYTES,
    FormatError,
    PromptFormat,
    describe,
    read_record,
)

#: How deep ``base`` links are followed (a run on a run on a base ...).
MAX_DEPTH = 8


def model_format(model: str, _depth: int = 0) -> PromptFormat | None:
    """The prompt format ``model`` carries (module docstring), ``None`` when it carries none;
    ``ConfigError`` in one line for a record that cannot be read."""
    if model == "micro" or _depth > MAX_DEPTH:
        return None
    try:
        preset = parse_spec(model) is not None  # without torch: only a preset needs it
    except ValueError:  # "tiny-kk@x": load_model says what is wrong with the name
        preset = False
    if preset:
        from rlvr.models.presets import preset_config

        build = preset_config(model)
        return _built(build.task, build.data, f"the preset {model}")
    if model in PRETRAINED:
        return _pretrained(model)
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return None
    try:
        return _folder_format(folder, _depth)
    except FormatError as e:
        raise ConfigError(f"model: {e}") from None


def _built(task: str, data: Mapping[str, Any], source: str) -> PromptFormat:
    """A tiny base's format: its trace settings less the trace builder's own options."""
    kwargs = warmstart.env_kwargs(task, dict(data)) if task in ENVS else dict(data)
    return PromptFormat(task, kwargs, from_scratch=True, source=source)


def _pretrained(name: str) -> PromptFormat:
    return PromptFormat(None, dict(PRETRAINED[name].prompt), source=f"rlvr's loader of {name}")


def _folder_format(folder: Path, depth: int) -> PromptFormat | None:
    own = folder / FORMAT_FILE
    if own.exists():
        record = read_record(own)
        return _trained(record, str(own), depth)
    build = folder / "build.json"
    if build.exists():
        record = read_record(build)
        config = record.get("config")
        if isinstance(config, dict) and isinstance(config.get("data"), dict):
            return _built(str(config.get("task")), config["data"], str(build))
        if record.get("name") in PRETRAINED:
            return _pretrained(record["name"])
        return None
    run_config = folder.parent / "config.yaml"
    if folder.name == "final" and run_config.is_file():
        return _trained(_run_config(run_config), str(run_config), depth)
    return None


def _trained(record: dict[str, Any], source: str, depth: int) -> PromptFormat:
    """A trained model's format: its run's settings; from scratch when its base was."""
    env, kwargs, base = record.get("env"), record.get("env_kwargs"), record.get("base")
    if not isinstance(env, str) or not isinstance(kwargs, dict):
        raise FormatError(f"{source}: needs 'env' (a name) and 'env_kwargs' (a mapping)")
    kwargs = {k: v for k, v in kwargs.items() if k != "split"}
    parent = model_format(str(base), depth + 1) if isinstance(base, str) else None
    return PromptFormat(
        env, kwargs, from_scratch=bool(parent and parent.from_scratch), source=source
    )


def _run_config(path: Path) -> dict[str, Any]:
    """``env``, ``env_kwargs`` and the base (``base``) of a run's ``config.yaml``."""
    try:
        config = yaml.safe_load(read_text(path, MAX_RECORD_BYTES))
    except RecordError as e:
        raise FormatError(first_line(e)) from None
    except yaml.YAMLError as e:
        raise FormatError(f"{path}: unreadable ({type(e).__name__})") from None
    if not isinstance(config, dict):
        raise FormatError(f"{path}: not a mapping")
    return {
        "env": config.get("env"),
        "env_kwargs": config.get("env_kwargs"),
        "base": config.get("model"),
    }


def _warn(line: str) -> None:
    print(f"rlvr: warning: {line}", file=sys.stderr, flush=True)


def with_format(
    model: str,
    env: str,
    explicit: Mapping[str, Any],
    *,
    what: str = "env_kwargs",
    say: Callable[[str], None] = _warn,
) -> tuple[dict[str, Any], PromptFormat | None]:
    """``model``'s settings for ``env`` under ``explicit`` (module docstring), and its format.

    An explicit prompt setting (``EnvSpec.prompt_keys``: template, system prompt, prefill) that
    differs from the model's is refused for a model trained from scratch and said in one line
    otherwise; a model made for another environment is said in one line and passes nothing on.
    """
    fmt = model_format(model)
    if fmt is None:
        return dict(explicit), None
    if fmt.env not in (None, env):
        say(
            f"model {model} was made for env={fmt.env} ({fmt.source}), not env={env}: it is "
            f"prompted with {env}'s own settings"
        )
        return dict(explicit), fmt
    own = fmt.settings(env)
    for group in env_spec(env).setting_groups:  # an explicit one replaces the model's group
        if any(k in explicit for k in group):
            own = {k: v for k, v in own.items() if k not in group}
    clashes = [
        f"{what}.{k}={explicit[k]!r} (the model's: {own[k]!r})"
        for k in env_spec(env).prompt_keys
        if k in explicit and k in own and explicit[k] != own[k]
    ]
    if clashes and fmt.from_scratch:
        raise ConfigError(
            f"{', '.join(clashes)}: {model} was trained from scratch on one prompt format "
            f"({describe(_prompt(env, own))}, {fmt.source}) and scores nothing meaningful under "
            f"another; leave the setting out to use the model's"
        )
    if clashes:
        say(f"{', '.join(clashes)} differs from the prompt format of {model} ({fmt.source})")
    return deep_merge(own, dict(explicit)), fmt


#: Templates a consumer's chat template renders alike (ChatML: Qwen's and the model's own).
CHAT_TEMPLATES = ("chat", "qwen")


def export_settings(
    model: str | None,
    env: str,
    explicit: Mapping[str, Any],
    *,
    chat: bool,
    say: Callable[[str], None] = _warn,
) -> dict[str, Any]:
    """``with_format`` for an export of tasks for another stack (verl, TRL). A ``chat`` export
    carries messages that the consumer renders with the model's chat template, so a model
    trained on another layout (the tiny bases' ``plain``) cannot be prompted as it was: refused
    for a model trained from scratch (export the rendered prompts instead), said otherwise."""
    if not model:
        return dict(explicit)
    kwargs, fmt = with_format(model, env, explicit, say=say)
    template = kwargs.get("template")
    if chat and fmt is not None and template is not None and template not in CHAT_TEMPLATES:
        line = (
            f"model {model} is prompted with template={template!r} ({fmt.source}), but a chat "
            "export is rendered by the consumer with the model's chat template"
        )
        if fmt.from_scratch:
            raise ConfigError(f"{line}; export the rendered prompt strings instead")
        say(line)
    return kwargs


def _prompt(env: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: settings[k] for k in env_spec(env).prompt_keys if k in settings}


__all__ = ["export_settings", "model_format", "with_format"]
