"""What ``model=`` may name, checked before anything loads or downloads.

A model is ``micro``, a tiny preset (``tiny-kk``, ``tiny-kk@1``), a pretrained model rlvr ships
a loader for (``smollm2-135m-instruct``), a local folder, or a Hugging Face hub id
(``Qwen/Qwen2.5-3B-Instruct``). ``check_model_name`` refuses in one line, at once, what would
otherwise fail after a download attempt: a path that is not a folder, a name that is no hub id,
a near miss of a local name (``tiny-kkk``). ``check_hub_model``, run where the model is to load,
refuses a hub id that is neither in the hub cache nor reachable (``HF_HUB_OFFLINE`` set, or the
hub's host refusing a connection within seconds: ``huggingface_hub`` would otherwise retry for
about 90 s before saying so). Every refusal lists the local names.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from rlvr.config import ConfigError, did_you_mean

#: Hugging Face repo ids: ``name`` or ``namespace/name`` of letters, digits, ``-_.``, at most 96
#: characters, no ``--`` or ``..`` (``huggingface_hub.utils.validate_repo_id``).
HUB_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")
#: Seconds the reachability probe waits for the hub's host.
PROBE_TIMEOUT_S = 3.0
_TRUE = {"1", "on", "yes", "true"}
#: The tiny presets' names (``rlvr.models.presets.PRESETS``, whose build configurations need
#: torch: a name is checked without them; ``tests/test_first_hour.py`` keeps the two equal).
PRESET_NAMES = ("tiny-kk", "tiny-math", "tiny-searchqa")


def preset_names() -> tuple[str, ...]:
    """``PRESETS``' names once that module is loaded (a preset added at run time included),
    else ``PRESET_NAMES``."""
    presets = sys.modules.get("rlvr.models.presets")
    return tuple(presets.PRESETS) if presets is not None else PRESET_NAMES


def parse_spec(spec: str) -> tuple[str, int] | None:
    """``"tiny-kk"`` -> ``("tiny-kk", 0)``, ``"tiny-kk@2"`` -> ``("tiny-kk", 2)`` (base seed 2);
    ``None`` for anything that is not a preset (a path, a hub name, ``micro``)."""
    name, sep, seed = spec.partition("@")
    if name not in preset_names():
        return None
    if not sep:
        return name, 0
    if not seed.isdigit():
        raise ValueError(f"model {spec!r}: the base seed after '@' must be a non-negative integer")
    return name, int(seed)


def local_names() -> list[str]:
    """The names ``model=`` takes without a folder or a network."""
    from rlvr.models.pretrained import PRETRAINED

    return ["micro", *preset_names(), *sorted(PRETRAINED)]


def is_hub_id(name: str) -> bool:
    return len(name) <= 96 and bool(HUB_ID.match(name)) and "--" not in name and ".." not in name


def hub_offline_reason() -> str:
    """Why the hub cannot be used from here (``""``: it may be): ``HF_HUB_OFFLINE`` /
    ``TRANSFORMERS_OFFLINE`` set, or no connection to the endpoint's host within
    ``PROBE_TIMEOUT_S``. Behind a proxy (``HTTPS_PROXY``...) only the variables are read."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return f"{var} is set"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return ""
    return _probe(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")


@functools.lru_cache(maxsize=4)
def _probe(endpoint: str) -> str:
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        return f"{host} cannot be reached ({e.strerror or type(e).__name__})"
    return ""


def in_hub_cache(name: str) -> bool:
    """Whether the hub cache holds ``name``'s ``config.json`` (transformers can load it offline)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - an id the cache layer rejects is simply not cached
        return False


def check_model_name(model: str) -> None:
    """``ConfigError`` (one line, listing the local names) for a ``model`` that names nothing
    loadable (module docstring); no network is asked."""
    from rlvr.models.pretrained import PRETRAINED

    name = str(model)
    try:
        if name == "micro" or name in PRETRAINED or parse_spec(name) is not None:
            return
    except ValueError as e:  # tiny-kk@x
        raise ConfigError(str(e)) from None
    local = ", ".join(local_names())
    path = Path(name).expanduser()
    if path.is_dir():
        return
    if path.exists():
        raise ConfigError(f"model: {name!r} is a file, not a model folder (local models: {local})")
    pathlike = name.startswith(("/", "./", "../", "~")) or name.count("/") > 1
    if pathlike or not is_hub_id(name):
        what = "is not a folder" if pathlike else "is not a folder nor a hub id (org/name)"
        raise ConfigError(f"model: {name!r} {what} (local models: {local})")
    hint = did_you_mean(name, local_names())
    if hint and "/" not in name and not in_hub_cache(name):
        raise ConfigError(f"model: {name!r} is no local model{hint} (local models: {local})")


def check_hub_model(model: str) -> None:
    """``ConfigError`` for a hub id (what ``check_model_name`` lets through as one) that can
    neither come from the hub cache nor from a hub reachable from here: run where the model is
    to be loaded, not where a configuration is only validated (a GPU grid on a laptop)."""
    name = str(model)
    if Path(name).expanduser().exists() or name in local_names() or parse_spec(name):
        return
    if in_hub_cache(name):
        return
    why = hub_offline_reason()
    if why:
        raise ConfigError(
            f"model: {name!r} is not a folder, and as a Hugging Face hub id it is not in the hub "
            f"cache and the hub cannot be used ({why}); local models: {', '.join(local_names())}"
        )


__all__ = [
    "PRESET_NAMES",
    "check_hub_model",
    "check_model_name",
    "hub_offline_reason",
    "in_hub_cache",
    "is_hub_id",
    "local_names",
    "parse_spec",
]
