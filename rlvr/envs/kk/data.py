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

from pathlib import Path
from typing import Any, Iterator, Sequence

from rlvr.envs.kk.cot import solver_cot
from rlvr.envs.kk.logic import MAX_PEOPLE, parse_statements_repr
from rlvr.envs.kk.prompts import kk_prompt
from rlvr.envs.kk.render import solution_text_format
from rlvr.envs.kk.reward import parse_solution_text_format
from rlvr.envs.rows import RowError, object_row, rows_of_file

HF_NAME = "K-and-K/knights-and-knaves"
HF_SIZES = tuple(range(2, 9))


def _prompt_text(prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], dict):
        return "".join(str(m.get("content", "")) for m in prompt)
    return None


def _field_error(where: str, field: str, problem: str) -> RowError:
    return RowError(f"{where}: field {field!r} {problem}")


#: What a ``solution`` entry may be: a JSON boolean (true: a knight), or the role by name.
_ROLES = {"knight": True, "knave": False}


def _knight_flags(solution: Any, where: str) -> list[bool]:
    """``solution`` as knight flags: each entry ``true``/``false`` or ``"knight"``/``"knave"``;
    anything else (``"no"``, ``NaN``, ``0``) is refused, never read by its truthiness (``"no"`` and
    ``NaN`` are truthy: both used to make a knight)."""
    if not isinstance(solution, (list, tuple)):
        raise _field_error(where, "solution", "is not a list of knight flags")
    flags = []
    for i, value in enumerate(solution, 1):
        if isinstance(value, bool):
            flags.append(value)
        elif isinstance(value, str) and value.strip().lower() in _ROLES:
            flags.append(_ROLES[value.strip().lower()])
        else:
            raise _field_error(
                where,
                "solution",
                f"entry {i} is {str(value)[:40]!r}: a knight flag is true or false "
                "(or 'knight'/'knave')",
            )
    return flags


def record_from_row(row: dict[str, Any], source: str, where: str | None = None) -> dict[str, Any]:
    """Normalise one K&K / Logic-RL row (fields ``quiz``, ``names``, ``solution``, ...).

    A row that cannot be used raises ``RowError`` naming ``where`` (the file and line; default
    ``source``) and the field at fault."""
    where = where or source
    row = object_row(row, where)
    names = row.get("names")
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise _field_error(where, "names", "is missing or not a list of names")
    if not 1 <= len(names) <= MAX_PEOPLE:
        raise _field_error(where, "names", f"must name 1..{MAX_PEOPLE} people, got {len(names)}")
    names = list(names)
    if row.get("solution") is not None:
        knights = _knight_flags(row["solution"], where)
    else:
        reward_model = row.get("reward_model")
        gt = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
        gold = row.get("solution_text_format") or (
            gt.get("solution_text_format", "") if isinstance(gt, dict) else ""
        )
        roles = parse_solution_text_format(str(gold))
        if set(names) - set(roles):
            raise _field_error(where, "solution_text_format", "does not give every name a role")
        knights = [roles[n] == "knight" for n in names]
    if len(knights) != len(names):
        raise _field_error(where, "solution", f"has {len(knights)} roles for {len(names)} names")
    statements = None
    try:
        if isinstance(row.get("statements"), str):
            statements = parse_statements_repr(row["statements"], len(names))
        elif row.get("statements") is not None:
            statements = parse_statements_repr(repr(row["statements"]), len(names))
    except (ValueError, RecursionError) as e:  # repr of a nested list may recurse too deeply
        raise _field_error(where, "statements", f"is malformed: {str(e)[:160]}") from None
    if not isinstance(row.get("quiz"), str):
        raise _field_error(where, "quiz", "is missing or not text")
    quiz = row["quiz"]
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
        records = (
            record_from_row(row, str(f), where)
            for f in files
            for where, row in rows_of_file(f, json_lines=True)
        )
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
