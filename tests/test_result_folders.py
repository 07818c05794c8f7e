"""Every reader of a result folder (``rlvr reproduce --check``, ``--power``, ``--compare``)
answers a hostile folder in one line with a non-zero exit, within seconds, never a traceback,
a hang or unbounded memory (issue 51, item 5). Each case below was a traceback, a hang (a FIFO)
or a read of ``/dev/zero`` until killed before ``rlvr.reproduce.records``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from rlvr.cli import main
from rlvr.reproduce.records import parse_label

from _rlvr_toys import error_lines

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "results" / "tiny"


def _meta(name: str) -> dict:
    meta = json.loads((TINY / f"{name}.meta.json").read_text())
    for rec in meta["run_records"].values():  # never this checkout's keys: nothing is retrained
        rec["key"] = "000000000000"
    return meta


def _raw(content: bytes) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(content)


def _edit(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        meta = _meta(name)
        change(meta)
        p.write_text(json.dumps(meta))

    return make


def _first(meta: dict) -> dict:
    return next(iter(meta["run_records"].values()))


def _first_claim(meta: dict) -> dict:
    return meta["claims"][0]


#: What any record file may be instead of a record.
FILE_CASES: dict[str, Callable[[Path], None]] = {
    "bad JSON": _raw(b"{bad"),
    "a JSON list": _raw(b"[1, 2]"),
    "a JSON string": _raw(b'"fig2"'),
    "empty (a full disk)": _raw(b""),
    "a FIFO": lambda p: os.mkfifo(p),
    "a link to /dev/zero": lambda p: p.symlink_to("/dev/zero"),
    "a dangling link": lambda p: p.symlink_to(p.parent / "nowhere"),
    "a folder": lambda p: p.mkdir(),
    "17 MiB": _raw(b"{" + b" " * (17 * 2**20) + b"}"),
    "bad UTF-8": _raw(b'{"name": "fig2\xff"}'),
    "100,000 [": _raw(b"[" * 100_000),
    "a 5,000-digit integer": _raw(b'{"seeds": [' + b"9" * 5000 + b"]}"),
}
CHECK_CASES = {
    **FILE_CASES,
    "run_records a list": _edit("fig2", lambda m: m.update(run_records=[1])),
    "a run record a string": _edit("fig2", lambda m: m["run_records"].update({"kk/grpo/x": "s"})),
    "a key that is a number": _edit("fig2", lambda m: _first(m).update(key=12)),
    "numbers a list": _edit("fig2", lambda m: _first(m).update(numbers=[0.5])),
    "a number that is text": _edit("fig2", lambda m: _first(m)["numbers"].update(greedy="high")),
    "an infinite number": _edit(
        "fig2", lambda m: _first(m)["numbers"].update(n_items=float("inf"))
    ),
    "machine without its keys": _edit("fig2", lambda m: m.update(machine={})),
    "machine a string": _edit("fig2", lambda m: m.update(machine="AMD")),
    "bases a list": _edit("fig2", lambda m: m.update(bases=["tiny-kk"])),
    "a grid that is a list": _edit("fig2", lambda m: m.update(grid=["tiny"])),
    "an unknown grid": _edit("fig2", lambda m: m.update(grid="huge")),
    "seeds empty": _edit("fig2", lambda m: m.update(seeds=[])),
}
POWER_CASES = {
    **FILE_CASES,
    "claims an object": _edit("table_kk", lambda m: m.update(claims={"a": 1})),
    "a claim a string": _edit("table_kk", lambda m: m["claims"].append("held")),
    "a claim without evidence": _edit("table_kk", lambda m: _first_claim(m).pop("evidence")),
    "a verdict that is a number": _edit("table_kk", lambda m: _first_claim(m).update(verdict=1)),
    "a half-width that is text": _edit(
        "table_kk", lambda m: _first_claim(m).update(half_width="wide")
    ),
    "components without item": _edit(
        "table_kk", lambda m: _first_claim(m)["components"].pop("item")
    ),
    "components a list": _edit("table_kk", lambda m: _first_claim(m).update(components=[1])),
    "design items infinite": _edit(
        "table_kk", lambda m: _first_claim(m)["design"].update(items=float("inf"))
    ),
    "design bases 0": _edit("table_kk", lambda m: _first_claim(m)["design"].update(bases=0)),
    "design without seeds": _edit("table_kk", lambda m: _first_claim(m)["design"].pop("seeds")),
    "a legacy claim and no base seeds": _edit(
        "table_kk",
        lambda m: (
            m.update(base_seeds=[]),
            [c.pop(k, None) for c in m["claims"] for k in ("components", "design")],
        ),
    ),
}


def _report(lines_after_heading: list[str]) -> Callable[[Path], None]:
    from rlvr.reproduce.report import CLAIMS_HEADING

    return lambda p: p.write_text("\n".join(["# r", "", CLAIMS_HEADING, *lines_after_heading]))


HEADER = "| claim | setting | verdict | 95% half-width | MDE (80% power) | evidence |"
COMPARE_CASES = {
    **{k: v for k, v in FILE_CASES.items() if "JSON" not in k and "integer" not in k},
    "one bad UTF-8 byte": lambda p: p.write_bytes(
        (TINY / "REPORT.md").read_bytes().replace(b"GRPO", b"\xff", 1)
    ),
    "a short table row": _report([HEADER, "|---|---|---|---|---|---|", "| GRPO-SG beats GRPO |"]),
    "a row shorter than its evidence column": _report([HEADER, "| a | kk | held | 1 |"]),
    "no claims section": lambda p: p.write_text("# a report\n"),
}


def _one_line_refusal(argv: list[str], capsys) -> str:
    """Run ``rlvr argv`` in this process: a non-zero exit and one line, nothing raised."""
    start = time.monotonic()
    try:
        code = main(argv)
        err = capsys.readouterr().err.strip()
    except SystemExit as e:  # a one-line exit of the sub-command (printed by Python)
        code, err = e.code, str(e.code)
        capsys.readouterr()
    assert time.monotonic() - start < 20
    lines = error_lines(err)
    assert code not in (0, None) and len(lines) == 1, (code, err)
    return lines[0]


@pytest.mark.parametrize("case", sorted(CHECK_CASES))
def test_check_refuses_a_hostile_folder_in_one_line(case, tmp_path, capsys):
    CHECK_CASES[case](tmp_path / "fig2.meta.json")
    err = _one_line_refusal(["reproduce", "--check", str(tmp_path)], capsys)
    assert "fig2.meta.json" in err or "--grid" in err, err


@pytest.mark.parametrize("case", sorted(POWER_CASES))
def test_power_refuses_a_hostile_folder_in_one_line(case, tmp_path, capsys):
    POWER_CASES[case](tmp_path / "table_kk.meta.json")
    err = _one_line_refusal(["reproduce", "--power", str(tmp_path)], capsys)
    assert "table_kk.meta.json" in err, err


@pytest.mark.parametrize("case", sorted(COMPARE_CASES))
def test_compare_refuses_a_hostile_report_in_one_line(case, tmp_path, capsys):
    COMPARE_CASES[case](tmp_path / "REPORT.md")
    err = _one_line_refusal(["reproduce", "--compare", str(TINY), str(tmp_path)], capsys)
    assert "REPORT.md" in err, err


def test_a_label_with_an_absurd_seed_is_no_run_label():
    assert parse_label("kk/grpo/seed" + "9" * 5000) is None  # int() of it raised ValueError
    assert parse_label("kk/grpo/seed\u0663") is None  # Arabic-Indic three: \\d took it
    assert parse_label("kk/grpo_sg[tau=1]/seed0") is None  # a sweep's run: never rerun
    assert parse_label("kk/grpo/base2/seed1") == {
        "setting": "kk",
        "what": "grpo",
        "base": 2,
        "seed": 1,
    }


def test_a_label_of_a_setting_the_grid_lacks_is_not_comparable(tmp_path, capsys):
    meta = _meta("fig2")
    meta["run_records"] = {"zzz/grpo/seed0": {"key": "000000000000"}}
    (tmp_path / "fig2.meta.json").write_text(json.dumps(meta))
    assert main(["reproduce", "--check", str(tmp_path)]) == 1
    assert "grid tiny has no setting 'zzz'" in capsys.readouterr().out


def test_the_committed_results_still_read(capsys):
    assert main(["reproduce", "--power", str(TINY)]) == 0
    assert main(["reproduce", "--compare", str(TINY), str(TINY)]) == 0
    assert "0 of" in capsys.readouterr().out


def test_a_fifo_meta_is_refused_by_the_command_itself(tmp_path):
    os.mkfifo(tmp_path / "fig2.meta.json")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "reproduce", "--check", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.strip() == (
        f"rlvr reproduce: {tmp_path / 'fig2.meta.json'} is a FIFO, not a regular file; "
        "refused unread"
    )


@pytest.mark.parametrize("case", sorted({**FILE_CASES, "no ops": _raw(b'{"machine": {}}')}))
def test_a_saved_fingerprint_is_read_as_a_record(case, tmp_path):
    """``rlvr machine --fingerprint --against FILE`` reads another machine's fingerprint."""
    from rlvr.files import RecordError
    from rlvr.machine import load

    path = tmp_path / "fingerprint.json"
    {**FILE_CASES, "no ops": _raw(b'{"machine": {}}')}[case](path)
    start = time.monotonic()
    with pytest.raises(RecordError, match="fingerprint.json"):
        load(path)
    assert time.monotonic() - start < 5
