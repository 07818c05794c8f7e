"""The paper's figures and tables by name (``rlvr reproduce <name>``): the figure registry.

A figure is one module that declares ``NAME``, ``CAPTION`` (its REPORT.md heading),
``REPORT_ORDER`` (its section's place in REPORT.md and ``--power``), ``needs(ctx) -> [Need]``
(the runs and references it reads, ``rlvr.reproduce.plan``) and ``run(ctx)``, plus one
``register_figure`` below (the order of registration is the order ``rlvr reproduce all`` runs
them). ``plan_for`` is the union of the needs of the named ones, computed once per invocation;
the report, ``--power`` and ``--check`` read the registry, so a new figure is in all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from rlvr import registries
from rlvr.reproduce import (
    curve,
    fig1,
    fig2,
    fig3,
    fig4,
    mechanism,
    sweep,
    table_kk,
    table_math,
    table_qa,
)
from rlvr.reproduce.plan import Need, Plan, build_plan


@dataclasses.dataclass(frozen=True)
class Figure:
    """A figure or table of a reproduction (module docstring)."""

    name: str
    caption: str
    report_order: int
    needs: Callable[[Any], list[Need]]
    run: Callable[[Any], dict]

    @classmethod
    def of(cls, module: ModuleType) -> Figure:
        """The figure a module declares."""
        m = module
        return cls(m.NAME, m.CAPTION, m.REPORT_ORDER, m.needs, m.run)


#: The registered figures, in the order ``rlvr reproduce all`` runs them.
FIGURES: dict[str, Figure] = {}


def register_figure(figure: Figure) -> Figure:
    """Add ``figure`` to the registry (a different one under a known name raises)."""
    return registries.add(FIGURES, figure.name, figure, "figure")


for _module in (table_kk, fig2, curve, fig1, fig3, fig4, mechanism, table_math, table_qa, sweep):
    register_figure(Figure.of(_module))


def names() -> tuple[str, ...]:
    """What ``rlvr reproduce`` accepts: a figure or table, or ``all`` (every one, then
    REPORT.md)."""
    return (*FIGURES, "all")


def report_order() -> list[str]:
    """The figures in the order of their REPORT.md sections."""
    return sorted(FIGURES, key=lambda n: FIGURES[n].report_order)


def expand(chosen: Iterable[str]) -> list[str]:
    """The figures ``chosen`` stand for, in ``FIGURES`` order (``all``: every one)."""
    chosen = set(chosen)
    unknown = chosen - set(names())
    if unknown:
        raise ValueError(f"reproduce: {sorted(unknown)} not among {list(names())}")
    return [n for n in FIGURES if n in chosen or "all" in chosen]


def needs(ctx, chosen: Iterable[str]) -> list[Need]:
    """Every need of the figures ``chosen`` on ``ctx``'s grid, each tagged with its figure."""
    return [
        dataclasses.replace(need, figure=name)
        for name in expand(chosen)
        for need in FIGURES[name].needs(ctx)
    ]


def plan_for(ctx, chosen: Iterable[str]) -> Plan:
    return build_plan(ctx, needs(ctx, chosen))


__all__ = [
    "FIGURES",
    "Figure",
    "expand",
    "names",
    "needs",
    "plan_for",
    "register_figure",
    "report_order",
]
