"""Hostile dataset rows are one line naming the file and the row, in every loader; K&K answer
keys are read as booleans or roles, never by truthiness (issue 51, items 7 and 8)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlvr.envs.kk.data import load_dataset as load_kk
from rlvr.envs.rows import RowError

from _rlvr_toys import one_line_exit_2

MATH_ROW = {"problem": "What is 1 + 1?", "answer": "2"}
QA_ROW = {"question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]}
KK_ROW = {
    "quiz": "A says B is a knave. B says A is a knight.",
    "names": ["A", "B"],
    "solution": [True, False],
}
#: What a row may be instead of an object (each a traceback or a RecursionError before).
HOSTILE_LINES = {
    "a list": ("[1, 2]", "a row must be an object, got list"),
    "a string": ('"What is 1 + 1?"', "a row must be an object, got str"),
    "100,000 [": ("[" * 100_000, "not a JSON row"),
    "a 5,000-digit integer": ("9" * 5000, "not a JSON row"),
    "bad JSON": ("{bad", "not a JSON row"),
}


def _dataset(tmp_path: Path, good: dict, line: str) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + line + "\n")
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE_LINES))
@pytest.mark.parametrize("env, good", [("math", MATH_ROW), ("searchqa", QA_ROW), ("kk", KK_ROW)])
def test_a_hostile_row_is_one_line_naming_file_and_line(tmp_path, capsys, case, env, good):
    line, needle = HOSTILE_LINES[case]
    data = _dataset(tmp_path, good, line)
    argv = ["sample", "--env", env, "-n", "1", f"dataset={data}"]
    one_line_exit_2(capsys, argv, f"{data} line 3", needle)


@pytest.mark.parametrize(
    "env, row, needle",
    [
        ("math", {"question": 5, "answer": "2"}, "no problem text"),
        ("math", {"problem": "p"}, "gold answer field"),
        ("math", {"problem": "p", "final_answer": {"a": [1]}, "answer": None}, ""),
        ("searchqa", {"query": "q"}, "no answer field"),
        ("searchqa", {"question": "q", "answers": 7}, "not text or a list"),
        ("searchqa", {"question": "q", "reward_model": [1]}, "no answer field"),
    ],
)
def test_a_row_without_its_fields_names_the_row(tmp_path, capsys, env, row, needle):
    data = _dataset(tmp_path, MATH_ROW if env == "math" else QA_ROW, json.dumps(row))
    argv = ["sample", "--env", env, "-n", "1", f"dataset={data}"]
    if needle:
        one_line_exit_2(capsys, argv, f"{data} line 3", needle)
    else:  # an odd but usable gold answer is read as text, not refused
        from rlvr.cli import main

        assert main(argv) == 0


def test_a_json_list_dataset_names_the_item(tmp_path):
    from rlvr.envs.math.data import load_dataset as load_math
    from rlvr.envs.searchqa.data import load_qa_file

    path = tmp_path / "data.json"
    path.write_text(json.dumps([MATH_ROW, ["a list"]]))
    with pytest.raises(RowError, match=rf"{path} item 2: a row must be an object, got list"):
        load_math(str(path))
    path.write_text(json.dumps([QA_ROW, "a string"]))
    with pytest.raises(RowError, match=rf"{path} item 2: a row must be an object, got str"):
        load_qa_file(path)
    path.write_text("[" * 100_000)
    with pytest.raises(RowError, match="nested too deeply"):
        load_qa_file(path)


@pytest.mark.parametrize(
    "solution, entry",
    [
        (["no", "no"], "entry 1 is 'no'"),
        ([math.nan, True], "entry 1 is 'nan'"),
        ([1, 0], "entry 1 is '1'"),
        ([True, None], "entry 2 is 'None'"),
        ([True, "yes"], "entry 2 is 'yes'"),
    ],
)
def test_kk_solutions_are_booleans_or_roles_never_truthiness(tmp_path, solution, entry):
    """``"no"`` and ``NaN`` are truthy: both used to make a knight, silently."""
    data = tmp_path / "kk.jsonl"
    data.write_text(json.dumps(dict(KK_ROW, solution=solution)) + "\n")
    with pytest.raises(RowError, match=rf"{data} line 1: field 'solution' {entry}"):
        list(load_kk(data))


def test_kk_solutions_as_roles_read_as_the_booleans_do(tmp_path):
    data = tmp_path / "kk.jsonl"
    rows = [KK_ROW, dict(KK_ROW, solution=["knight", "Knave"])]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    first, second = (r["ground_truth"] for r in load_kk(data))
    assert first == second == {"A": "knight", "B": "knave"}
