"""Question-answer sets for the search env: local samples, JSONL/Parquet files, Hugging Face names.

- Local samples in ``../shared/data`` (see its SOURCES.md): ``nq`` (NQ-open dev, 3610, the set
  DPR/FlashRAG/Search-R1 call "NQ test"), and R1-Searcher's 500-question samples ``hotpotqa``,
  ``2wiki``, ``musique`` plus the full ``bamboogle`` (125).
- Any ``.jsonl``/``.json``/``.parquet`` path with a question field and one of the answer fields
  ``golden_answers`` (FlashRAG), ``answer``/``answers`` (string or list) or
  ``reward_model.ground_truth.target`` (Search-R1 parquet).
- Hugging Face names (need ``pip install 'rlvr[hub]'`` and a network): ``flashrag:<subset>``
  loads ``RUC-NLPIR/FlashRAG_datasets`` (the collection Search-R1 trains and evaluates on);
  ``triviaqa`` and ``popqa`` (and the names above when no local copy exists) map to their
  FlashRAG subsets.

A row that cannot be used (not an object, no question or answer field) is one ``RowError``
naming the file and the line (``rlvr.envs.rows``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from rlvr.data_paths import shared_data_dir
from rlvr.envs.rows import LocatedRow, RowError, numbered, object_row, rows_of_file


@dataclass(frozen=True)
class QAItem:
    question: str
    answers: tuple[str, ...]
    id: str = ""
    source: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)


#: name -> path under shared data
LOCAL_SAMPLES = {
    "nq": "nq_open/NQ-open.dev.jsonl",
    "hotpotqa": "hotpotqa/hotpotqa_500.jsonl",
    "2wiki": "2wikimultihopqa/2wiki_500.jsonl",
    "musique": "musique/musique_500.jsonl",
    "bamboogle": "bamboogle/bamboogle.jsonl",
}

#: name -> FlashRAG subset in RUC-NLPIR/FlashRAG_datasets
FLASHRAG_SUBSETS = {
    "nq": "nq",
    "triviaqa": "triviaqa",
    "popqa": "popqa",
    "hotpotqa": "hotpotqa",
    "2wiki": "2wikimultihopqa",
    "musique": "musique",
    "bamboogle": "bamboogle",
}
FLASHRAG_REPO = "RUC-NLPIR/FlashRAG_datasets"
#: FlashRAG subsets without a test split are evaluated on dev, as Search-R1's
#: ``scripts/data_process/qa_search_test_merge.py`` does (test, else dev).
FLASHRAG_DEV_ONLY = ("hotpotqa", "2wikimultihopqa", "musique")


def flashrag_split(subset: str, split: str) -> str:
    """The FlashRAG split read for ``split`` (``test`` means dev for the dev-only subsets)."""
    return "dev" if split == "test" and subset in FLASHRAG_DEV_ONLY else split


_ANSWER_FIELDS = ("golden_answers", "answers", "answer", "target")


def _answers_of(record: dict) -> list[str]:
    for key in _ANSWER_FIELDS:
        if key in record and record[key] is not None:
            value = record[key]
            break
    else:
        reward_model = record.get("reward_model")
        gt = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
        value = gt.get("target") if isinstance(gt, dict) else gt
    if value is None:
        raise ValueError(
            f"record has no answer field (tried {_ANSWER_FIELDS}); keys: {sorted(record)}"
        )
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"the answers are a {type(value).__name__}, not text or a list of texts")
    return [str(v) for v in value]


def _question_of(record: dict) -> str:
    for key in ("question", "query", "problem"):
        if key in record:
            return str(record[key])
    raise ValueError(f"record has no question field; keys: {sorted(record)}")


def items_from_records(records, source: str) -> list[QAItem]:
    return items_from_located(numbered(records, source), source)


def items_from_located(rows: Iterable[LocatedRow], source: str) -> list[QAItem]:
    """``items_from_records`` of ``(where, row)`` pairs: a row that cannot be used is
    ``RowError`` naming ``where``."""
    out = []
    for i, (where, row) in enumerate(rows):
        r = object_row(row, where)
        try:
            rid = str(r.get("id", r.get("idx", i)))[:200]
            out.append(QAItem(_question_of(r), tuple(_answers_of(r)), rid, source))
        except (ValueError, TypeError, RecursionError) as e:
            raise RowError(f"{where}: {str(e)[:200] or type(e).__name__}") from None
    return out


def load_qa_file(path: str | Path) -> list[QAItem]:
    """Questions and gold answers from a ``.jsonl``, ``.json`` or ``.parquet`` file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset file not found: {path}")
    return items_from_located(rows_of_file(path), path.stem)


def load_flashrag(subset: str, split: str = "test") -> list[QAItem]:
    """FlashRAG subsets (``nq+hotpotqa``: concatenated, Search-R1's training mix): a copy written
    by ``rlvr fetch-data flashrag:<subset>``, else the hub (needs ``datasets`` and a network)."""
    from rlvr.data_paths import hub_rows

    items: list[QAItem] = []
    for name in subset.split("+"):
        rows = hub_rows(
            FLASHRAG_REPO, name, flashrag_split(name, split), fetch=f"flashrag:{subset}"
        )
        items += items_from_records(rows, f"flashrag:{name}")
    return items


def load_qa(name: str, split: str = "test") -> list[QAItem]:
    """Questions by name (local sample first, then FlashRAG) or by file path."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"dataset must be a non-empty name or path, got {name!r}")
    if name.startswith("flashrag:"):
        return load_flashrag(name.split(":", 1)[1], split)
    if name in LOCAL_SAMPLES:
        root = shared_data_dir()
        if root is not None and (root / LOCAL_SAMPLES[name]).is_file():
            return [
                QAItem(it.question, it.answers, it.id, name)
                for it in load_qa_file(root / LOCAL_SAMPLES[name])
            ]
    if name in FLASHRAG_SUBSETS:
        return load_flashrag(FLASHRAG_SUBSETS[name], split)
    if Path(name).suffix in (".jsonl", ".json", ".parquet"):
        return load_qa_file(name)
    known = sorted(set(LOCAL_SAMPLES) | set(FLASHRAG_SUBSETS) | {"synthetic"})
    raise ValueError(
        f"unknown dataset {name!r}: use one of {known}, 'flashrag:<subset>' "
        "or a .jsonl/.json/.parquet path"
    )
