"""Table: math accuracy, GRPO vs GRPO-SG (and the base model).

Paper grid: MATH-500, Minerva, OlympiadBench (greedy accuracy), AIME24 and AMC23 (avg@16 and
pass@16 at temperature 1.0, docs/design.md §6). Tiny grid: the synthetic math task by difficulty.
See ``rlvr.reproduce.tables`` for cells and the claim.
"""

from __future__ import annotations

from rlvr.reproduce import paper_numbers, tables
from rlvr.reproduce.common import Context, Output
from rlvr.reproduce.tables import build

NAME = "table_math"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = "Table — math"
REPORT_ORDER = 60


def needs(ctx: Context):
    return tables.needs(ctx, "math")


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    if out.lacks("math", "math table"):
        return out.finish()
    k = ctx.grid.settings["math"].k
    build(
        ctx,
        out,
        "math",
        "Math accuracy",
        [
            ("greedy", "greedy accuracy"),
            ("avg@k", "avg@k at the evaluation temperature"),
            (f"pass@{k}", f"pass@{k}"),
        ],
        "math",
        paper_numbers.math_lines(),
    )
    return out.finish()
