"""Table: search-QA exact match, GRPO vs GRPO-SG (and the base model).

Paper grid: NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, Bamboogle. Tiny grid: the
synthetic single- and two-hop questions. EM after SQuAD normalisation of the parsed answer
(``rlvr.eval.metrics``), greedy; F1, EM at the training temperature and the share of
sampled episodes that call the search tool beside it. See ``rlvr.reproduce.tables``.
"""

from __future__ import annotations

from rlvr.reproduce import paper_numbers, tables
from rlvr.reproduce.common import Context, Output
from rlvr.reproduce.tables import build

NAME = "table_qa"
#: REPORT.md's heading of its section, and the section's place (ascending).
CAPTION = "Table — search QA"
REPORT_ORDER = 70


def needs(ctx: Context):
    return tables.needs(ctx, "searchqa")


def run(ctx: Context) -> dict:
    out = Output(ctx, NAME)
    if out.lacks("searchqa", "search-QA table"):
        return out.finish()
    build(
        ctx,
        out,
        "searchqa",
        "Search QA exact match",
        [
            ("greedy_em", "exact match (greedy)"),
            ("greedy_f1", "F1 (greedy)"),
            ("avg@k", "avg@k (EM at the training temperature)"),
            (
                "sample_tool_use",
                "tool use at the training temperature (share of episodes with a search call)",
            ),
        ],
        "search QA",
        paper_numbers.qa_lines(),
        key="em",
    )
    return out.finish()
