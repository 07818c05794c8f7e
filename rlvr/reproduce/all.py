"""``rlvr reproduce all``: every figure, table and the sweep, then ``REPORT.md``.

Scripts share the run cache, so each training run (e.g. K&K GRPO, seed 0) is trained once and
used by fig1, fig2, fig3, fig4, table_kk and the sweep.
"""

from __future__ import annotations

import importlib
import time

from rlvr.reproduce.common import Context
from rlvr.reproduce.report import write_report

SCRIPTS = ("table_kk", "fig2", "fig1", "fig3", "fig4", "table_math", "table_qa", "sweep")


def run(ctx: Context) -> dict:
    metas = {}
    for name in SCRIPTS:
        ctx.say(f"[reproduce] == {name} ==")
        metas[name] = importlib.import_module(f"rlvr.reproduce.{name}").run(ctx)
    path = write_report(ctx, time.perf_counter() - ctx.started)
    ctx.say(f"[reproduce] wrote {path}")
    return {"name": "all", "scripts": list(metas), "report": str(path)}
