"""The plan of a reproduction: every run the named figures and tables need, each once, with its
identity computed once.

A figure or table declares what it reads, ``needs(ctx) -> [Need]`` (``rlvr.reproduce.figures``
collects them by name); ``build_plan`` takes the union: one ``PlannedRun`` per (setting, method,
overrides, base seed, RL seed) with its ``TrainConfig`` and run key, plus the base models and
continued-SFT references to evaluate. The figures then take their runs from the plan
(``Plan.runs``); ``--jobs`` trains and evaluates the plan ahead (``rlvr.reproduce.pool``), verl
launch folders are written from it and ``--from-verl`` checks it against what verl trained.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlvr.reproduce.keys import run_key
from rlvr.reproduce.runs import train_config

#: (base seed, RL seed) of a draw.
Unit = tuple[int, int]
#: The two references that are not trained with RL: the untrained base and continued SFT.
REFERENCES = ("base", "sft")


@dataclass(frozen=True)
class Need:
    """What a figure reads: the runs of ``method`` (an algorithm, or ``base``: the untrained
    base, or ``sft``: continued SFT at the compute of the matching GRPO run) on a setting of the
    grid, with ``extra`` ``TrainConfig`` overrides, over ``units`` (None: every draw of the
    context); ``evaluate``: whether it reads their evaluations or only their training metrics."""

    setting: str
    method: str
    extra: tuple[tuple[str, Any], ...] = ()
    units: tuple[Unit, ...] | None = None
    evaluate: bool = True
    #: The figure or table that declares it.
    figure: str = ""

    @classmethod
    def of(cls, setting: str, method: str, extra: Mapping[str, Any] | None = None, **kw) -> Need:
        return cls(setting, method, tuple(sorted((extra or {}).items())), **kw)


@dataclass
class PlannedRun:
    """One training run: where it comes from, its configuration and run key."""

    setting: str
    algo: str
    extra: dict[str, Any]
    base_seed: int
    seed: int
    config: Any  # TrainConfig
    key: str
    #: Its evaluations are read (not only its training metrics).
    evaluate: bool = False
    #: The figures and tables that read it.
    figures: list[str] = field(default_factory=list)


def identity(setting: str, algo: str, extra: Mapping[str, Any] | None, base: int, seed: int):
    return (setting, algo, tuple(sorted((extra or {}).items())), base, seed)


@dataclass
class Plan:
    """The union of the needs of some figures (module docstring)."""

    runs: dict[tuple, PlannedRun] = field(default_factory=dict)
    #: (setting, unit) -> the configuration a reference is evaluated with (GRPO's: the
    #: training run's prompt format, temperature and budget) for ``base`` and ``sft``.
    references: dict[str, dict[tuple[str, Unit], Any]] = field(
        default_factory=lambda: {name: {} for name in REFERENCES}
    )

    def run(self, setting: str, algo: str, extra, base_seed: int, seed: int) -> PlannedRun:
        found = self.runs.get(identity(setting, algo, extra, base_seed, seed))
        if found is None:
            raise KeyError(
                f"the plan has no run {setting}/{algo} {dict(extra or {})} base {base_seed} "
                f"seed {seed}: a figure reads a run its needs() does not declare"
            )
        return found

    def grouped(self) -> list[tuple[tuple[str, str, dict], list[Unit]]]:
        """``[((setting, algo, extra), [units])]`` in plan order."""
        out: dict[tuple, tuple[tuple[str, str, dict], list[Unit]]] = {}
        for r in self.runs.values():
            key = (r.setting, r.algo, tuple(sorted(r.extra.items())))
            out.setdefault(key, ((r.setting, r.algo, dict(r.extra)), []))[1].append(
                (r.base_seed, r.seed)
            )
        return [(need, sorted(units)) for need, units in out.values()]


def build_plan(ctx, needs: Iterable[Need]) -> Plan:
    """The plan of ``needs`` on the context's grid and draws (needs of settings the grid lacks
    are dropped). Continued SFT needs the matching GRPO run, which the plan then holds too."""
    plan = Plan()
    settings = ctx.grid.settings

    def add(setting: str, algo: str, extra: dict, unit: Unit, evaluate: bool, figure: str):
        key = identity(setting, algo, extra, *unit)
        if key not in plan.runs:
            cfg = train_config(settings[setting], algo, unit[1], extra, base_seed=unit[0])
            plan.runs[key] = PlannedRun(setting, algo, dict(extra), *unit, cfg, run_key(cfg))
        run = plan.runs[key]
        run.evaluate |= evaluate
        if figure and figure not in run.figures:
            run.figures.append(figure)

    for need in needs:
        if need.setting not in settings:
            continue
        for unit in ctx.units() if need.units is None else need.units:
            if need.method in REFERENCES:
                if need.method == "sft":
                    add(need.setting, "grpo", {}, unit, False, need.figure)
                cfg = train_config(settings[need.setting], "grpo", unit[1], base_seed=unit[0])
                plan.references[need.method][(need.setting, unit)] = cfg
            else:
                add(need.setting, need.method, dict(need.extra), unit, need.evaluate, need.figure)
    return plan


__all__ = ["Need", "Plan", "PlannedRun", "REFERENCES", "build_plan", "identity"]
