"""Where rlvr finds local data and caches.

``RLVR_HOME`` (default ``~/.cache/rlvr``) holds built models, indexes and run caches.
``RLVR_SHARED_DATA`` points at a folder of evaluation sets laid out as the project's
``../shared/data`` (see its SOURCES.md); by default the ``shared/data`` folder beside the checkout.
"""
from __future__ import annotations

import os
from pathlib import Path


def rlvr_home() -> Path:
    home = Path(os.environ.get("RLVR_HOME", Path.home() / ".cache" / "rlvr"))
    home.mkdir(parents=True, exist_ok=True)
    return home


def shared_data_dir() -> Path | None:
    env = os.environ.get("RLVR_SHARED_DATA")
    candidates = [Path(env)] if env else []
    repo = Path(__file__).resolve().parents[1]
    candidates += [repo.parent / "shared" / "data", repo / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c
    return None
