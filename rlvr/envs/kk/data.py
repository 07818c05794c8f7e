"""Loading published Knights & Knaves data: Logic-RL parquet files, K&K JSONL, or the HF hub.

Every loader yields the same record layout::

    prompt                the prompt text (Logic-RL's, with its embedded Qwen template, when the
                          file has one; else the quiz rendered with ``kk_prompt``)
    quiz, names, n_people
    ground_truth          {name: "knight"/"knave"}, ordered as ``names``
    solution_text_format  "(1) Name is a knight\\n..."
    statements            the statement trees (None when the file has none)
    cot                   the solver chain of thought (None without statements)
    index, source

The K&K data (Xie et al. 2024) on the hub is ``K-and-K/knights-and-knaves`` with configs
``train``/``test`` and splits ``2ppl``..``8ppl``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from rlvr.envs.kk.cot import solver_cot
from rlvr.envs.kk.logic import parse_statements_repr
from rlvr.envs.kk.prompts import kk_prompt
from rlvr.envs.kk.render import solution_text_format
from rlvr.envs.kk.reward import parse_solution_text_format

HF_NAME = "K-and-K/knights-and-knaves"
HF_SIZES = tuple(range(2, 9))


def _prompt_text(prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], dict):
        return "".join(str(m.get("content", "")) for m in prompt)
    return None


def record_from_row(row: dict[str, Any], source: str) -> dict[str, Any]:
    """Normalise one K&K / Logic-RL row (fields ``quiz``, ``names``, ``solution``, ...)."""
    names = [str(n) for n in row["names"]]
    if row.get("solution") is not None:
        knights = [bool(k) for k in row["solution"]]
    else:
        gold = row.get("solution_text_format") or (row.get("reward_model") or {}).get(
            "ground_truth", {}
        ).get("solution_text_format", "")
        roles = parse_solution_text_format(gold)
        knights = [roles[n] == "knight" for n in names]
    if len(knights) != len(names):
        raise ValueError(f"{source}: {len(names)} names but {len(knights)} roles")
    statements = None
    if isinstance(row.get("statements"), str):
        statements = parse_statements_repr(row["statements"], len(names))
    elif row.get("statements") is not None:
        statements = parse_statements_repr(repr(row["statements"]), len(names))
    quiz = str(row["quiz"])
    prompt = _prompt_text(row.get("prompt")) or kk_prompt(quiz)[0]
    return {
        "prompt": prompt,
        "quiz": quiz,
        "names": names,
        "n_people": len(names),
        "ground_truth": {n: ("knight" if k else "knave") for n, k in zip(names, knights)},
        "solution_text_format": row.get("solution_text_format")
        or solution_text_format(names, knights),
        "statements": statements,
        "cot": solver_cot(statements, names) if statements is not None else None,
        "index": row.get("index"),
        "source": source,
    }


def _rows_from_file(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
    elif path.suffix in (".jsonl", ".json"):
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)
    else:
        raise ValueError(f"unsupported K&K data file {path} (expected .parquet or .jsonl)")


def _load_hub(name: str, split: str, sizes: Sequence[int]) -> Iterator[dict[str, Any]]:
    """Config ``split`` (train/test), one hub split per size (``3ppl``...): a copy written by
    ``rlvr fetch-data`` when there is one, else the hub (``rlvr.data_paths.hub_rows``)."""
    from rlvr.data_paths import hub_rows

    rows = [(n, hub_rows(name, split, f"{n}ppl", fetch=name)) for n in sizes]  # fail here, early
    return (
        record_from_row(dict(row), f"{name}:{split}:{n}ppl") for n, part in rows for row in part
    )


def load_dataset(
    path_or_name: str | Path, *, split: str = "test", n_people: int | Sequence[int] | None = None
) -> Iterator[dict[str, Any]]:
    """Iterate over K&K records from a file, a directory of files (sorted, recursive), or a hub
    name.

    ``split`` picks the hub config (``train``/``test``); ``n_people`` keeps only those sizes.
    """
    sizes = (
        None if n_people is None else ({n_people} if isinstance(n_people, int) else set(n_people))
    )
    path, text = Path(path_or_name), str(path_or_name)
    if path.exists():
        files = (
            [path]
            if path.is_file()
            else sorted(p for p in path.rglob("*") if p.suffix in (".parquet", ".jsonl"))
        )
        if not files:
            raise FileNotFoundError(f"no .parquet or .jsonl files under {path}")
        records = (record_from_row(row, str(f)) for f in files for row in _rows_from_file(f))
    elif (
        path.suffix in (".parquet", ".jsonl", ".json")
        or text.count("/") != 1
        or text.startswith((".", "/", "~"))
    ):
        raise FileNotFoundError(
            f"K&K dataset {text!r} is neither an existing path nor a hub name like {HF_NAME!r}"
        )
    else:
        records = _load_hub(text, split, sorted(sizes) if sizes else HF_SIZES)
    return (rec for rec in records if sizes is None or rec["n_people"] in sizes)
