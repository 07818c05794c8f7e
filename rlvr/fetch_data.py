"""``rlvr fetch-data NAME...``: copy Hugging Face hub datasets to local JSONL, once, with a network.

The envs read hub datasets through ``rlvr.data_paths.hub_rows``, which looks for these copies
first (``$RLVR_HOME/data/<repo>/<config>.<split>.jsonl``), so a machine without a network (a GPU
node) trains and evaluates from them. Names are those the env keyword ``dataset`` takes:

- ``K-and-K/knights-and-knaves`` (K&K: configs train/test, splits 2ppl..8ppl);
- math: ``deepscaler`` (``agentica-org/DeepScaleR-Preview-Dataset``, train) and the test sets
  ``math500 aime24 amc23 minerva olympiadbench gsm8k``;
- search QA: ``flashrag:<subset>[+<subset>...]`` (``RUC-NLPIR/FlashRAG_datasets``; its train
  split when there is one, and its test split, dev for hotpotqa/2wikimultihopqa/musique);
- ``paper``: every dataset of ``rlvr reproduce --profile paper``.

Needs the hub extra: ``pip install 'rlvr[hub]'``.
"""

from __future__ import annotations

import argparse
import json

from rlvr.files import atomic_write

#: (hub repo, config, split)
Target = tuple[str, "str | None", str]


def targets(name: str) -> list[Target]:
    """The hub splits behind one dataset name (see the module docstring)."""
    from rlvr.envs.kk.data import HF_NAME, HF_SIZES
    from rlvr.envs.math.data import _ALIASES, DATASETS, TRAIN_SETS
    from rlvr.envs.searchqa.data import FLASHRAG_REPO, FLASHRAG_SUBSETS, flashrag_split

    if name == "paper":
        return paper_targets()
    if name == HF_NAME:
        return [(HF_NAME, config, f"{n}ppl") for config in ("train", "test") for n in HF_SIZES]
    key = _ALIASES.get(name.lower(), name.lower())
    if key in DATASETS or key in TRAIN_SETS:
        return [(DATASETS.get(key) or TRAIN_SETS[key]).hub]
    if name.startswith("flashrag:") or name in FLASHRAG_SUBSETS:
        subsets = (name.split(":", 1)[1] if ":" in name else FLASHRAG_SUBSETS[name]).split("+")
        return [
            (FLASHRAG_REPO, s, split)
            for s in subsets
            for split in ("train", flashrag_split(s, "test"))
        ]
    raise ValueError(
        f"fetch-data: unknown dataset {name!r}: use paper, {HF_NAME}, deepscaler, "
        f"{', '.join(DATASETS)} or flashrag:<subset>"
    )


def paper_targets() -> list[Target]:
    """Every hub split the paper grid's training and evaluation envs read."""
    from rlvr.reproduce.grid import paper_grid
    from rlvr.reproduce.runs import train_config

    names: list[str] = []
    for s in paper_grid().settings.values():
        names.append(str(train_config(s, "grpo", 0).env_kwargs["dataset"]))
        names += [str(e["dataset"]) for e in s.eval_sets.values()]
        if "dataset" in s.eval_env_kwargs:
            names.append(str(s.eval_env_kwargs["dataset"]))
    out: list[Target] = []
    for n in dict.fromkeys(names):
        out += [t for t in targets(n) if t not in out]
    return out


def fetch(target: Target, *, force: bool = False, say=print) -> bool:
    """Write one split as JSONL; False when the hub has no such split (train of a test-only
    FlashRAG subset)."""
    from rlvr.data_paths import fetched_file

    repo, config, split = target
    path = fetched_file(repo, config, split)
    if path.is_file() and not force:
        say(f"[fetch-data] {path} (already there)")
        return True
    try:
        import datasets
    except ImportError:
        raise SystemExit("fetch-data needs the hub extra: pip install 'rlvr[hub]'") from None
    try:
        ds = datasets.load_dataset(repo, config, split=split)
    except ValueError as e:  # datasets: 'Unknown split "train". Should be one of [...]'
        if "split" in str(e).lower() and split == "train":
            say(f"[fetch-data] {repo} {config}: no train split (evaluation only)")
            return False
        raise
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        for row in ds:
            f.write(json.dumps(dict(row), default=str, ensure_ascii=False) + "\n")
    say(f"[fetch-data] {repo} {config or ''} {split}: {len(ds)} rows -> {path}")
    return True


def add_fetch_data_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "names",
        nargs="+",
        help="paper, K-and-K/knights-and-knaves, deepscaler, "
        "math500..., flashrag:<subset>[+<subset>]",
    )
    parser.add_argument("--force", action="store_true", help="fetch again even when present")


def run_fetch_data(args: argparse.Namespace) -> int:
    todo: list[Target] = []
    for name in args.names:
        try:
            todo += [t for t in targets(name) if t not in todo]
        except ValueError as e:
            raise SystemExit(str(e)) from None
    for t in todo:
        fetch(t, force=args.force)
    return 0
