"""The paper's figures and tables by name (``rlvr reproduce <name>``) and what they need.

Each module declares ``NAME``, ``needs(ctx) -> [Need]`` (the runs and references it reads,
``rlvr.reproduce.plan``) and ``run(ctx)``; ``plan_for`` is the union of the needs of the named
ones, computed once per invocation.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the plan reads the run cache (torch): named here, imported when used
    from rlvr.reproduce.plan import Need, Plan

#: In the order ``rlvr reproduce all`` runs them; each is the module ``rlvr.reproduce.<name>``.
RUN_ORDER = ("table_kk", "fig2", "fig1", "fig3", "fig4", "table_math", "table_qa", "sweep")
#: What ``rlvr reproduce`` accepts: a figure or table, or ``all`` (every one, then REPORT.md).
NAMES = (*RUN_ORDER, "all")


class Figures(Mapping):
    """Name -> figure module, each imported when first asked for (``rlvr reproduce --help``
    lists the names without loading what draws them)."""

    def __getitem__(self, name: str) -> ModuleType:
        if name not in RUN_ORDER:
            raise KeyError(name)
        return importlib.import_module(f"rlvr.reproduce.{name}")

    def __iter__(self) -> Iterator[str]:
        return iter(RUN_ORDER)

    def __len__(self) -> int:
        return len(RUN_ORDER)


FIGURES = Figures()


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
    from rlvr.reproduce.plan import build_plan

    return build_plan(ctx, needs(ctx, names))


__all__ = ["FIGURES", "NAMES", "expand", "needs", "plan_for"]
