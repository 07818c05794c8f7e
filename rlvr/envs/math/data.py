"""Math evaluation sets with per-dataset gold normalisation (docs/design.md §4,
shared/data/SOURCES.md).

Every loader returns records ``{"problem", "ground_truth", "source", "id"}`` (plus ``solution``
when the set has one). Gold answers, by set:

- MATH-500, AIME24: ``answer`` as given (a string).
- AMC23: ``answer`` is a float (``27.0``) -> ``"27"``.
- Minerva: no answer field; the gold is the last ``\\boxed{}`` of ``solution``.
- OlympiadBench: ``final_answer`` is a list of strings wrapped in ``$``; ``$`` stripped, several
  entries joined with ``", "``; ``context`` (when present) is put before ``question``.
- GSM8K: ``answer`` ends in ``#### n``; ``n`` with thousands separators removed.

Named sets are read from the shared data folder (``rlvr.data_paths.shared_data_dir()``) when it
has them, else from the Hugging Face hub when ``datasets`` is installed and a network is there.
Any other argument is a local ``.jsonl``/``.json``/``.parquet`` path; its gold format is guessed
from its fields unless ``answer_format`` says it. A row that cannot be used (not an object, no
problem text, no gold answer) is one ``RowError`` naming the file and the line
(``rlvr.envs.rows``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from rlvr.data_paths import shared_data_dir
from rlvr.envs.math.extract import last_boxed
from rlvr.envs.math.reward import gold_to_text
from rlvr.envs.math.synthetic import generate_dataset
from rlvr.envs.rows import LocatedRow, RowError, numbered, object_row, rows_of_file

ANSWER_FORMATS = (
    "auto",
    "answer",
    "amc",
    "solution_boxed",
    "final_answer",
    "gsm8k",
    "ground_truth",
)


@dataclass(frozen=True)
class DatasetSpec:
    local_path: str  # relative to the shared data folder
    answer_format: str
    hub: tuple[str, str | None, str]  # (name, config, split) on the Hugging Face hub
    size: int


DATASETS: dict[str, DatasetSpec] = {
    "math500": DatasetSpec(
        "math500/test.jsonl", "answer", ("HuggingFaceH4/MATH-500", None, "test"), 500
    ),
    "aime24": DatasetSpec(
        "aime24/test.jsonl", "answer", ("HuggingFaceH4/aime_2024", None, "train"), 30
    ),
    "amc23": DatasetSpec("amc23/test.jsonl", "amc", ("math-ai/amc23", None, "test"), 40),
    "minerva": DatasetSpec(
        "minerva_math/test.jsonl", "solution_boxed", ("math-ai/minervamath", None, "test"), 272
    ),
    "olympiadbench": DatasetSpec(
        "olympiadbench/test.jsonl",
        "final_answer",
        ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
        675,
    ),
    "gsm8k": DatasetSpec("gsm8k/test.jsonl", "gsm8k", ("openai/gsm8k", "main", "test"), 1319),
}
#: Training sets (hub only; split "train"): DeepScaleR's 40,315 problems (the DSR recipe's data).
TRAIN_SETS: dict[str, DatasetSpec] = {
    "deepscaler": DatasetSpec(
        "", "answer", ("agentica-org/DeepScaleR-Preview-Dataset", None, "train"), 40315
    ),
}
_ALIASES = {
    "math-500": "math500",
    "minerva_math": "minerva",
    "olympiad": "olympiadbench",
    "aime2024": "aime24",
    "agentica-org/deepscaler-preview-dataset": "deepscaler",
}


# -- gold normalisation --------------------------------------------------------------------------
def gsm8k_gold(answer: str) -> str:
    """``"... #### 1,234"`` -> ``"1234"``."""
    _, sep, tail = str(answer).rpartition("####")
    return (tail if sep else str(answer)).strip().replace(",", "")


def olympiad_gold(final_answer: Any) -> str:
    """``["$(1,2)$", "$3$"]`` -> ``"(1,2), 3"``; ``["$69$,$84$"]`` -> ``"69,84"``.

    OlympiadBench puts several answers either in several list entries or in one entry as
    ``$a$,$b$``; every unescaped ``$`` goes, and a trailing full stop with it.
    """
    items = final_answer if isinstance(final_answer, (list, tuple)) else [final_answer]
    cleaned = []
    for item in items:
        text = re.sub(r"(?<!\\)\$", "", str(item)).strip().rstrip(".").strip()
        if text:
            cleaned.append(text)
    return ", ".join(cleaned)


def _guess_format(row: dict) -> str:
    if "final_answer" in row:
        return "final_answer"
    if "ground_truth" in row or isinstance(row.get("reward_model"), dict):
        return "ground_truth"
    answer = row.get("answer")
    if isinstance(answer, str) and "####" in answer:
        return "gsm8k"
    if answer is not None:
        return "amc" if isinstance(answer, float) else "answer"
    if "solution" in row:
        return "solution_boxed"
    raise ValueError(f"cannot tell the gold answer field of a record with keys {sorted(row)}")


def gold_answer(row: dict, answer_format: str = "auto") -> str:
    """The gold answer string of one raw record (see the module docstring)."""
    _check_format(answer_format)
    fmt = _guess_format(row) if answer_format == "auto" else answer_format
    if fmt in ("answer", "amc"):
        if "answer" not in row and "solution" in row:  # hub copies differ in field names
            return gold_answer(row, "solution_boxed")
        return gold_to_text(row["answer"])
    if fmt == "gsm8k":
        return gsm8k_gold(row["answer"])
    if fmt == "final_answer":
        return olympiad_gold(row["final_answer"])
    if fmt == "solution_boxed":
        if row.get("answer") not in (None, ""):
            return gold_to_text(row["answer"])
        found = last_boxed(str(row["solution"]))
        return found.content or ""
    # "ground_truth", the one format left
    gt = row["ground_truth"] if "ground_truth" in row else row["reward_model"]["ground_truth"]
    return gold_to_text(gt)


def _check_format(answer_format: str) -> None:
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")


def _problem_text(row: dict) -> str:
    for key in ("problem", "question", "prompt"):
        if isinstance(row.get(key), str) and row[key].strip():
            text = row[key]
            context = row.get("context")
            return f"{context}\n{text}" if isinstance(context, str) and context.strip() else text
    raise ValueError(f"no problem text (problem/question) in a record with keys {sorted(row)}")


def normalize_records(rows: Iterable[dict], source: str, answer_format: str = "auto") -> list[dict]:
    """Raw rows -> ``{"problem", "ground_truth", "source", "id"[, "solution"]}``."""
    return normalize_located(numbered(rows, source), source, answer_format)


def normalize_located(
    rows: Iterable[LocatedRow], source: str, answer_format: str = "auto"
) -> list[dict]:
    """``normalize_records`` of ``(where, row)`` pairs (``rlvr.envs.rows``): a row that cannot
    be used is ``RowError`` naming ``where``."""
    _check_format(answer_format)
    out = []
    for i, (where, row) in enumerate(rows):
        row = object_row(row, where)
        try:
            rid = next(
                (row[k] for k in ("unique_id", "id", "idx") if row.get(k) not in (None, "")), i
            )
            rec = {
                "problem": _problem_text(row),
                "ground_truth": gold_answer(row, answer_format),
                "source": source,
                "id": f"{source}/{str(rid)[:200]}",
            }
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            raise RowError(f"{where}: {str(e)[:200] or type(e).__name__}") from None
        if isinstance(row.get("solution"), str):
            rec["solution"] = row["solution"]
        out.append(rec)
    return out


# -- file and hub readers ------------------------------------------------------------------------
def read_rows(path: str | Path) -> list[LocatedRow]:
    """``(where, row)`` of each row of a ``.jsonl``, ``.json`` (a list) or ``.parquet`` file."""
    return list(rows_of_file(path))


def _from_hub(name: str, spec: DatasetSpec) -> list[dict]:
    """A copy written by ``rlvr fetch-data name``, else the hub; one-line errors name both that
    command and ``RLVR_SHARED_DATA`` (a folder holding ``spec.local_path``)."""
    from rlvr.data_paths import hub_rows

    hub_name, config, split = spec.hub
    try:
        return hub_rows(hub_name, config, split, fetch=name)
    except (ImportError, FileNotFoundError) as e:
        where = (
            f"no copy in a shared data folder (RLVR_SHARED_DATA holding {spec.local_path}); "
            if spec.local_path
            else ""
        )
        raise FileNotFoundError(f"dataset {name!r}: {where}{e}") from None


def load_dataset(
    name_or_path: str | Path,
    split: str = "test",
    *,
    data_dir: str | Path | None = None,
    answer_format: str = "auto",
    n: int = 500,
    difficulty: Any = None,
    seed: int = 0,
) -> list[dict]:
    """Records of a named math set, a local file, or ``"synthetic"`` (``n`` problems of the
    ``split`` stream at ``difficulty``, see ``synthetic.py``).

    Named sets (``DATASETS``) are test sets: ``split`` must be ``"test"`` for them.
    """
    _check_format(answer_format)
    key = str(name_or_path)
    key = _ALIASES.get(key.lower(), key.lower()) if not Path(key).suffix else key
    if key == "synthetic":
        return generate_dataset(n, split=split, difficulty=difficulty, seed=seed)
    if key in TRAIN_SETS:
        if split != "train":
            raise ValueError(f"dataset {key!r} is a training set: use split='train', got {split!r}")
        spec = TRAIN_SETS[key]
        return normalize_records(
            _from_hub(key, spec),
            key,
            spec.answer_format if answer_format == "auto" else answer_format,
        )
    if key in DATASETS:
        if split != "test":
            raise ValueError(f"dataset {key!r} has only a 'test' split, got split={split!r}")
        spec = DATASETS[key]
        root = Path(data_dir) if data_dir is not None else shared_data_dir()
        local = root / spec.local_path if root is not None else None
        fmt = spec.answer_format if answer_format == "auto" else answer_format
        if local is not None and local.is_file():
            return normalize_located(read_rows(local), key, fmt)
        return normalize_records(_from_hub(key, spec), key, fmt)
    path = Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset {name_or_path!r} is neither a known name "
            f"({', '.join([*DATASETS, *TRAIN_SETS])}, synthetic) "
            "nor an existing .jsonl/.json/.parquet file"
        )
    return normalize_located(read_rows(path), path.stem, answer_format)
