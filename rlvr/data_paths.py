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
    """``RLVR_SHARED_DATA`` when set (and only it), else ``shared/data`` beside or inside the
    checkout; ``None`` when there is none."""
    env = os.environ.get("RLVR_SHARED_DATA")
    repo = Path(__file__).resolve().parents[1]
    candidates = [Path(env)] if env else [repo.parent / "shared" / "data", repo / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c
    return None


# -- Hugging Face hub datasets, fetched once -----------------------------------------------------
def fetched_file(hub_name: str, config: str | None, split: str) -> Path:
    """Where ``rlvr fetch-data`` keeps one split of a hub dataset as JSONL (under RLVR_HOME)."""
    slug = hub_name.replace("/", "__")
    return rlvr_home() / "data" / slug / f"{config + '.' if config else ''}{split}.jsonl"


def hub_rows(hub_name: str, config: str | None, split: str, *, fetch: str) -> list[dict]:
    """Rows of one split of a hub dataset: the copy ``rlvr fetch-data`` wrote, else the hub.

    Without the copy and without a reachable hub the error is one line naming the command that
    fetches it (``fetch``: the name to give ``rlvr fetch-data``)."""
    import json

    local = fetched_file(hub_name, config, split)
    if local.is_file():
        with local.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    label = f"{hub_name}{' (' + config + ')' if config else ''} split {split!r}"
    how = (
        f"run `rlvr fetch-data {fetch}` on a machine with a network (it writes {local}; "
        "set RLVR_HOME to share it), or pass a local .jsonl/.parquet path"
    )
    try:
        import datasets
    except ImportError:
        raise ImportError(
            f"dataset {label} is not fetched and the hub needs the `datasets` "
            f"package (pip install 'rlvr[hub]'): {how}"
        ) from None
    try:
        return [dict(r) for r in datasets.load_dataset(hub_name, config, split=split)]
    except Exception as e:  # offline, missing split, auth: the hub's errors come in many types
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise FileNotFoundError(
            f"dataset {label}: not fetched and the hub failed ({first}): {how}"
        ) from None
