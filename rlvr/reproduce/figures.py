"""The paper's figures and tables by name (``rlvr reproduce <name>``) and what they need.

Each module declares ``NAME``, ``needs(ctx) -> [Need]`` (the runs and references it reads,
``rlvr.reproduce.plan``) and ``run(ctx)``; ``plan_for`` is the union of the needs of the named
ones, computed once per invocation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rlvr.reproduce import fig1, fig2, fig3, fig4, sweep, table_kk, table_math, table_qa
from rlvr.reproduce.plan import Need, Plan, build_plan

#: In the order ``rlvr reproduce all`` runs them.
FIGURES = {m.NAME: m for m in (table_kk, fig2, fig1, fig3, fig4, table_math, table_qa, sweep)}
#: What ``rlvr reproduce`` accepts: a figure or table, or ``all`` (every one, then REPORT.md).
NAMES = (*FIGURES, "all")


def expand(names: Iterable[str]) -> list[str]:
    """The figures ``names`` stand for, in ``FIGURES`` order (``all``: every one)."""
    names = set(names)
    unknown = names - set(NAMES)
    if unknown:
        raise ValueError(f"reproduce: {sorted(unknown)} not among {list(NAMES)}")
    return [n for n in FIGURES if n in names or "all" in names]


def needs(ctx, names: Iterable[str]) -> list[Need]:
    """Every need of the figures ``names`` on ``ctx``'s grid, each tagged with its figure."""
    return [
        dataclasses.replace(need, figure=name)
        for name in expand(names)
        for need in FIGURES[name].needs(ctx)
    ]


def plan_for(ctx, names: Iterable[str]) -> Plan:
    return build_plan(ctx, needs(ctx, names))


__all__ = ["FIGURES", "NAMES", "expand", "needs", "plan_for"]
