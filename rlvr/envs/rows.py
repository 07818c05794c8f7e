"""Dataset files read row by row, every row named in the error it may cause.

``rows_of_file(path)`` yields ``(where, row)``: ``"<file> line <n>"`` for JSON lines,
``"<file> item <n>"`` for a ``.json`` list, ``"<file> row <n>"`` for parquet. A line that is not
JSON (bad JSON, 100,000 ``[``, an integer of 5,000 digits) is ``RowError`` naming it, as is a
row that is not an object (``object_row``): a dataset row that is a list or a string used to be
an ``AttributeError`` deep in a loader. The K&K, math and search-QA loaders read files through
here (docs/reliability.md, "Bad input gets one line").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

from rlvr.errors import UserError
from rlvr.files import parse_json

#: ``(where, row)``: a row and what names it in an error.
LocatedRow = tuple[str, Any]


class RowError(UserError, ValueError):
    """A dataset row that cannot be used; the message names the file, the row and the field."""


def _parse(text: str, where: str) -> Any:
    return parse_json(text, where, "row", RowError)


def rows_of_file(path: str | Path, *, json_lines: bool = False) -> Iterator[LocatedRow]:
    """``(where, row)`` for each row of a ``.jsonl``, ``.json`` (a list; with ``json_lines``,
    one row per line as in ``.jsonl``) or ``.parquet`` file."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"{path} row {i}", row
    elif path.suffix == ".json" and not json_lines:
        data = _parse(path.read_text(encoding="utf-8"), str(path))
        if not isinstance(data, list):
            raise RowError(f"{path}: a .json dataset must hold a list of records")
        for i, row in enumerate(data, 1):
            yield f"{path} item {i}", row
    elif path.suffix in (".jsonl", ".json"):
        with path.open(encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield f"{path} line {lineno}", _parse(line, f"{path} line {lineno}")
    else:
        raise RowError(f"unsupported dataset file {path} (expected .jsonl, .json or .parquet)")


def numbered(rows: Iterable[Any], source: str) -> Iterator[LocatedRow]:
    """Rows that come without a file (the hub, a list in memory) as ``"<source> row <n>"``."""
    return ((f"{source} row {i}", row) for i, row in enumerate(rows, 1))


def object_row(row: Any, where: str) -> dict[str, Any]:
    """``row`` when it is a JSON object, else ``RowError`` naming ``where``."""
    if not isinstance(row, dict):
        raise RowError(f"{where}: a row must be an object, got {type(row).__name__}")
    return row


__all__ = ["LocatedRow", "RowError", "numbered", "object_row", "rows_of_file"]
