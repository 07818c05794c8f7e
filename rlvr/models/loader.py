"""``load_model``: a model by name (``rlvr.models`` re-exports it; see its docstring), and the
checks of a local model folder before any weight is read."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer
from transformers.utils import logging as hf_logging

from rlvr.config import ConfigError
from rlvr.models.micro import build_micro, byte_level_tokenizer
from rlvr.models.tokenizer import PROBE_TEXT, load_tokenizer, reload_mismatch


def quiet_progress() -> None:
    """Turn off transformers' own progress bars ("Loading weights", "Writing model shards") in
    this process: what a command's ``--quiet`` asks for besides its own bars."""
    hf_logging.disable_progress_bar()


def load_model(spec: str, *, seed: int = 0, dtype=None):
    """Return ``(model, tokenizer)`` for ``spec`` (see the module docstring)."""
    if spec == "micro":
        return build_micro(seed=seed)
    from rlvr.models.presets import preset_config

    build_cfg = preset_config(spec)
    if build_cfg is not None:
        from rlvr.models.build import ensure_built

        spec = str(ensure_built(build_cfg))
    from rlvr.models.pretrained import PRETRAINED, pretrained_dir

    if spec in PRETRAINED:
        spec = str(pretrained_dir(spec))
    from transformers import AutoModelForCausalLM

    local = Path(spec).expanduser()
    kwargs = {"local_files_only": True} if local.exists() else {}
    if not local.exists():
        from rlvr.models.names import check_hub_model, check_model_name, hub_offline_reason

        check_model_name(spec)  # one line, before transformers retries a hub it cannot reach
        check_hub_model(spec)
        if hub_offline_reason():
            kwargs = {"local_files_only": True}  # in the hub cache (else refused above)
    src = str(local) if local.exists() else spec
    if local.exists():
        check_model_folder(local)
    part = "tokenizer"
    try:
        tokenizer = load_tokenizer(src, **kwargs)
        part = "weights"
        model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, **kwargs)
    except OSError as e:
        if local.exists():
            raise _unusable(f"the {part} in {local}", e) from None
        raise OSError(
            f"could not load model {spec!r}: not 'micro', not a local directory, and not "
            f"reachable on the Hugging Face hub ({e})"
        ) from e
    except Exception as e:  # noqa: BLE001 - tokenizers and transformers raise anything
        if not local.exists():
            raise
        raise _unusable(f"the {part} in {local}", e) from None
    if local.exists():
        check_built_tokenizer(local, tokenizer)
    return model, tokenizer


def check_built_tokenizer(folder: Path, tokenizer) -> None:
    """Refuse (``ConfigError``) a base built here (``build.json``) whose ``tokenizer.json``, the
    tokenizer it was trained with, encodes text otherwise once loaded (``rlvr.models.tokenizer``:
    bases built before the tokenizer took Qwen2's pipeline): it would run on text split as it
    never saw in training."""
    if not (folder / "build.json").is_file() or not (folder / "tokenizer.json").is_file():
        return
    trained = Tokenizer.from_file(str(folder / "tokenizer.json"))
    if reload_mismatch(trained, tokenizer, [PROBE_TEXT]) is not None:
        raise ConfigError(
            f"model: {folder} was trained with a tokenizer that loads as "
            f"{type(tokenizer).__name__} with another text split (built before rlvr's tokenizer "
            "took Qwen2's pipeline); rebuild it (a preset name rebuilds by itself)"
        )


def _unusable(what, exc: BaseException) -> ConfigError:
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return ConfigError(f"model: cannot load {what} ({type(exc).__name__}: {first})")


def check_model_folder(folder: Path) -> None:
    """Refuse (``ConfigError``, one line) a local model folder that ``from_pretrained`` would fail
    on with a traceback or a report, before any weight is read: no folder, no ``config.json`` or
    an unreadable one, no weights, a safetensors file whose header does not parse,
    or a tensor whose shape differs from the one ``config.json`` implies (``hidden_size``,
    ``vocab_size``...). Only the safetensors headers are read (``safe_open``), and the model the
    configuration describes is built on the meta device, so the check costs no weight memory."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    if not folder.is_dir():
        raise ConfigError(f"model: {folder} is not a folder")
    if not (folder / "config.json").is_file():
        raise ConfigError(f"model: {folder} has no config.json (not a save_pretrained folder)")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and not any(folder.glob("pytorch_model*.bin")):
        raise ConfigError(f"model: {folder} has no weights (*.safetensors)")
    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001 - a config transformers cannot use, whatever it raises
        raise _unusable(folder / "config.json", e) from None
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    for path in weights:
        try:
            with safe_open(str(path), "pt") as f:
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        except Exception as e:  # noqa: BLE001 - SafetensorError is not an OSError
            raise _unusable(path, e) from None
        for key, shape in shapes.items():
            if key in expected and expected[key] != shape:
                raise ConfigError(
                    f"model: {path} holds {key} of shape {list(shape)}, but its config.json "
                    f"describes {list(expected[key])} (weights and config.json do not match)"
                )


__all__ = [
    "build_micro",
    "byte_level_tokenizer",
    "check_built_tokenizer",
    "check_model_folder",
    "load_model",
]
