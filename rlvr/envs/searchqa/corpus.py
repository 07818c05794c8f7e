"""Passage corpora: JSONL ``{id, title, text}``, read lazily by byte offset.

The paper setup is the 2018 Wikipedia dump (21M passages, DPR/FlashRAG ``wiki-18.jsonl``). Those
files store ``{"id", "contents"}`` with ``contents = '"Title"\\ntext'``; both layouts are read.
A ``JsonlCorpus`` keeps only one int64 offset per passage in memory (168 MB for 21M passages)
and parses a line when it is asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Search-R1/FlashRAG ``contents`` field: ``'"Title"\\ntext'``."""
        return f'"{self.title}"\n{self.text}'

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "text": self.text}


def split_contents(contents: str) -> tuple[str, str]:
    """Inverse of ``Passage.contents``: first line (quotes stripped) is the title."""
    title, _, text = contents.partition("\n")
    return title.strip().strip('"'), text


def passage_from_record(record: dict, fallback_id: str) -> Passage:
    """A passage from a JSON record with ``title``/``text`` or Search-R1's ``contents``."""
    if not isinstance(record, dict):
        raise ValueError(f"passage record must be a JSON object, got {type(record).__name__}")
    pid = str(record.get("id", record.get("_id", fallback_id)))
    if "text" in record:
        return Passage(pid, str(record.get("title", "")), str(record["text"]))
    if "contents" in record:
        return Passage(pid, *split_contents(str(record["contents"])))
    raise ValueError(f"passage {pid} has neither 'text' nor 'contents' (keys: {sorted(record)})")


class Corpus(Sequence[Passage]):
    """Passages held in memory (the synthetic task, tests, small corpora)."""

    def __init__(self, passages: Iterable[Passage | dict]):
        self._passages = [
            p if isinstance(p, Passage) else passage_from_record(p, str(i))
            for i, p in enumerate(passages)
        ]

    def __len__(self) -> int:
        return len(self._passages)

    def __getitem__(self, i):
        return self._passages[i]

    def texts(self, with_title: bool = True) -> list[str]:
        return [f"{p.title}\n{p.text}" if with_title else p.text for p in self._passages]


class JsonlCorpus(Sequence[Passage]):
    """A JSONL passage file read lazily: ``corpus[i]`` seeks to line ``i`` and parses it."""

    def __init__(self, path: str | Path, progress: bool = False):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"corpus file not found: {self.path}")
        self._offsets = self._scan(progress)
        self._fh = None

    def _scan(self, progress: bool) -> np.ndarray:
        offsets = []
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(
                total=self.path.stat().st_size, unit="B", unit_scale=True, desc="scan corpus"
            )
        with open(self.path, "rb") as fh:
            pos = 0
            for line in fh:
                if line.strip():
                    offsets.append(pos)
                pos += len(line)
                if bar is not None:
                    bar.update(len(line))
        if bar is not None:
            bar.close()
        return np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._fh is None:
            self._fh = open(self.path, "rb")
        self._fh.seek(int(self._offsets[i]))
        line = self._fh.readline().decode("utf-8", errors="replace")
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.path}: passage {i} is not valid JSON: {e}") from None
        return passage_from_record(record, str(i))

    def __iter__(self):
        """Stream the passages in file order (fast sequential read, used to build an index)."""
        with open(self.path, "rb") as fh:
            i = 0
            for line in fh:
                if line.strip():
                    yield passage_from_record(
                        json.loads(line.decode("utf-8", errors="replace")), str(i)
                    )
                    i += 1

    def __getstate__(self):
        return {"path": self.path, "_offsets": self._offsets, "_fh": None}

    def texts(self, with_title: bool = True) -> list[str]:
        return [f"{p.title}\n{p.text}" if with_title else p.text for p in self]


def load_corpus(source, progress: bool = False) -> Corpus | JsonlCorpus:
    """A corpus from a JSONL path, a ``Corpus``, or a list of ``Passage``/dict records."""
    if isinstance(source, (Corpus, JsonlCorpus)):
        return source
    if isinstance(source, (str, Path)):
        return JsonlCorpus(source, progress=progress)
    if isinstance(source, Iterable):
        return Corpus(source)
    raise TypeError(
        f"corpus must be a JSONL path or a list of passages, got {type(source).__name__}"
    )


def write_corpus(passages: Iterable[Passage], path: str | Path) -> Path:
    """Write passages as JSONL ``{id, title, text}``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for p in passages:
            fh.write(json.dumps(p.to_json(), ensure_ascii=False) + "\n")
    return path
