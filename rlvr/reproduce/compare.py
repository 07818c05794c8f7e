"""``rlvr reproduce --compare OLD NEW``: the paper's claims of two reproductions side by side.

Each side is a results folder or its ``REPORT.md``; the claims are read back from the report's
claims table (``rlvr.reproduce.report`` writes it: claim | setting | **verdict** | half-width |
MDE | evidence; reports before issue 28 have no half-width and MDE columns), so
any committed report can be compared, e.g. an earlier commit's with
``git show REV:results/tiny/REPORT.md > /tmp/old.md``. Claims are matched by (claim, setting),
an earlier report's claim under the name it has now (``fig3.EARLIER_NAMES``, marked in the
change column); one present on one side only is listed as such.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlvr.files import RecordError, read_text
from rlvr.reproduce import fig3
from rlvr.reproduce.common import markdown_table
from rlvr.reproduce.records import MAX_REPORT_BYTES
from rlvr.reproduce.report import CLAIMS_HEADING


def read_claims(path: Path) -> list[dict[str, str]]:
    """The claims table of a ``REPORT.md`` (or of ``<folder>/REPORT.md``), in its order. The
    report is read as a record (``rlvr.files.read_text``: a regular file of at most
    ``MAX_REPORT_BYTES``, UTF-8), and a row of the table with fewer cells than its header is
    ``RecordError`` naming its line."""
    path = Path(path)
    report = path / "REPORT.md" if path.is_dir() else path
    if not os.path.lexists(report):
        raise RecordError(f"--compare: no report at {report}")
    lines = read_text(report, MAX_REPORT_BYTES).splitlines()
    try:
        start = lines.index(CLAIMS_HEADING)
    except ValueError:
        raise RecordError(f"--compare: {report} has no claims section") from None
    claims = []
    evidence = 3  # claim | setting | **verdict** | evidence (reports before the precision columns)
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "claim" and "evidence" in cells:
            evidence = cells.index("evidence")
        if not line.startswith("|") or cells[0] in ("claim", "---"):
            continue
        if len(cells) <= max(evidence, 2):
            raise RecordError(
                f"--compare: {report} line {number}: a claims row of {len(cells)} cells, "
                f"fewer than the table's {max(evidence, 2) + 1}; refused"
            )
        claims.append(
            {
                "claim": cells[0],
                "setting": cells[1],
                "verdict": cells[2].strip("*"),
                "evidence": " | ".join(cells[evidence:]),
            }
        )
    return claims


#: The change column of a claim that one report lacks (not a verdict that changed).
ONLY_OLD, ONLY_NEW = "absent from the new report", "new in this report"


def compare_claims(old: list[dict], new: list[dict]) -> list[list[str]]:
    """Rows ``[claim, setting, old verdict, new verdict, change]``, the new report's order first
    and then the claims only the old one has; a claim on one side only is marked ``ONLY_OLD`` /
    ``ONLY_NEW``, never as a changed verdict. An old claim named in ``fig3.EARLIER_NAMES`` is read
    under its new name (unless the old report also has the new name), and its change says so."""
    names = {c["claim"] for c in old}
    before = {}
    for c in old:
        name = fig3.EARLIER_NAMES.get(c["claim"], c["claim"])
        before[(c["claim"] if name in names else name, c["setting"])] = c
    after = {(c["claim"], c["setting"]): c for c in new}
    rows = []
    for key in list(after) + [k for k in before if k not in after]:
        a, b = before.get(key), after.get(key)
        va = a["verdict"] if a else "(absent)"
        vb = b["verdict"] if b else "(absent)"
        if a is None or b is None:
            change = ONLY_NEW if a is None else ONLY_OLD
        else:
            change = "same" if va == vb else f"**{va} -> {vb}**"
            if a["claim"] != key[0]:
                change += f" (was: {a['claim']})"
        rows.append([key[0], key[1], va, vb, change])
    return rows


def summary_line(rows: list[list[str]]) -> str:
    """``N of M verdicts changed`` over the claims both reports hold, then the one-sided ones."""
    both = [r for r in rows if r[4] not in (ONLY_OLD, ONLY_NEW)]
    changed = sum(not r[4].startswith("same") for r in both)
    line = f"{changed} of {len(both)} verdicts changed"
    n_old, n_new = (sum(r[4] == side for r in rows) for side in (ONLY_OLD, ONLY_NEW))
    if n_old:
        line += f"; {n_old} claim(s) absent from the new report (not run there)"
    if n_new:
        line += f"; {n_new} claim(s) only in the new report"
    return line


def run_compare(old: Path, new: Path) -> int:
    rows = compare_claims(read_claims(old), read_claims(new))
    print(markdown_table(["claim", "setting", "before", "now", "change"], rows))
    print(f"\n{summary_line(rows)}")
    return 0


__all__ = ["compare_claims", "read_claims", "run_compare", "summary_line"]
