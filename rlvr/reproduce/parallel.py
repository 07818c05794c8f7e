"""``rlvr reproduce ... --jobs N``: everything the named figures need, trained and evaluated in N
processes before they run (the plan of ``rlvr.reproduce.figures``, the pool of
``rlvr.reproduce.pool``).

``required_runs`` lists the training runs of that plan as ``((setting, algo, overrides),
[(base seed, seed), ...])``: what the figures declared, each run once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlvr.reproduce import figures, pool
from rlvr.reproduce.common import Context


def required_runs(ctx: Context, names: Iterable[str]) -> list[tuple[tuple[str, str, dict], Any]]:
    """The training runs (and their draws) that the figures ``names`` use, without duplicates."""
    plan = ctx.plan if ctx.plan is not None else figures.plan_for(ctx, names)
    return plan.grouped()


def prefetch(ctx: Context, names: Iterable[str], jobs: int) -> None:
    """Train, then evaluate, everything the figures ``names`` need, in ``jobs`` processes."""
    pool.prefetch(ctx, ctx.plan if ctx.plan is not None else figures.plan_for(ctx, names), jobs)


__all__ = ["prefetch", "required_runs"]
