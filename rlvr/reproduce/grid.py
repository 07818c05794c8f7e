"""Reproduction grids: ``tiny`` (CPU, built locally, the default) and ``paper`` (GPUs).

Two levels of configuration, both data, one word each:

- a *profile* (``rlvr/profiles/<name>[_<env>].yaml``, ``rlvr train profile=<name>``) is one
  training recipe: optimiser, loss, batch, sampling, environment settings;
- a *grid* (``rlvr reproduce --grid <name>``) is ``rlvr/reproduce/grids/<name>.yaml``
  (``smoke.yaml`` for ``--grid tiny --smoke``): its *settings* (a task with a base model, the
  profile it runs, and an evaluation protocol), seeds, base builds and the GRPO-SG sweep.

Every training run is ``rlvr train`` with the setting's ``train`` overrides (naming a profile)
plus ``env``/``algo``/``seed``; evaluation uses the run's own prompt format and temperature. This
module loads the grids into ``Grid``/``Setting`` with the one configuration loader
(``rlvr.config``: unknown keys and wrong types are one-line errors naming the file and key) and
validates them; ``rlvr.reproduce.gpu_plan`` sizes their GPU runs.

The paper grid: the paper's exact training settings are not published in any copy we could
find; its profile (``rlvr/profiles/paper*.yaml``) holds the public recipes the paper
builds on (the Logic-RL / AR-Lopti scripts for K&K and math, verl-tool's search recipe for QA;
docs/design.md, "Recipes (paper profile)"), which reviewers say the paper's code followed.
Values that no recipe fixes are marked ``chosen`` there and listed in ``PAPER_CHOICES``.
On a machine without GPUs ``rlvr reproduce ... --grid paper`` validates every config and
prints the plan (engine, GPUs, memory, steps) instead of training. The engine follows the plan:
a setting whose run passes the trainer's own memory check (``rlvr.agents.memory``) on one of the
GPUs it names trains natively; any other is marked ``verl`` and the native path refuses it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.agents.algorithms import algorithm_names
from rlvr.config import ConfigError, load_yaml, merge, nest
from rlvr.envs import ENVS
from rlvr.training.train_config import PROFILE_DIR, load_train_config

#: The grids, one YAML file per ``--grid`` (and ``smoke.yaml``).
GRID_DIR = Path(__file__).resolve().parent / "grids"
#: The profiles the grids name.
TRAIN_PROFILE_DIR = PROFILE_DIR
#: ``--smoke`` runs this grid, under the name of the grid it stands in for.
SMOKE_GRID, SMOKE_OF = "smoke", "tiny"


@dataclass
class Setting:
    """One task of a grid: base model, training overrides, evaluation protocol.

    ``train`` are flat ``key=value`` overrides of ``rlvr train`` (``{"profile": "tiny"}``: a
    profile by name). ``eval_sets`` maps a column name to env keyword arguments (e.g.
    one benchmark file each); empty means one set, grouped by ``group_by`` over
    ``group_values``. Evaluation runs greedy plus ``k`` samples at the training temperature over
    ``n_items`` items per group.
    """

    env: str
    model: str
    train: dict[str, Any] = field(default_factory=dict)
    group_by: str = ""
    group_values: list[Any] = field(default_factory=list)
    eval_sets: dict[str, dict[str, Any]] = field(default_factory=dict)
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    n_items: int = 100
    k: int = 8
    eval_temperature: float | None = None  # None: the training temperature
    eval_max_new_tokens: int | None = None  # None: the training response budget
    eval_batch_size: int = 64
    #: (model, GPU plan) facts used only by the paper plan
    arch: dict[str, int] = field(default_factory=dict)
    #: The GPU the paper plan sizes this setting for (a key of ``GPUS``).
    gpu: str = ""
    #: The env the setting's runs train on when it is not ``env`` (``""``: ``env``). The smoke
    #: grid trains its random micro model on ``digits``, where its groups have reward variance
    #: (on K&K and math every response scores the floor and no method would update), and
    #: evaluates on ``env`` with ``eval_env_kwargs`` alone.
    train_env: str = ""

    @property
    def run_env(self) -> str:
        """The env the setting's training runs use."""
        return self.train_env or self.env


@dataclass
class Ablation:
    """An arm beyond the methods' defaults: algorithm ``algo`` with ``train`` overrides on the
    setting ``setting``, a row of that setting's table, and the claim "``a`` beats ``b``" it
    decides (``a``, ``b``: an algorithm or an ablation of the grid, by name)."""

    algo: str
    label: str
    train: dict[str, Any] = field(default_factory=dict)
    setting: str = "kk"
    claim: str = ""
    a: str = ""
    b: str = ""


@dataclass
class Grid:
    """A reproduction grid: ``rlvr/reproduce/grids/<name>.yaml``."""

    name: str
    settings: dict[str, Setting]
    seeds: int = 3
    #: GRPO-SG sensitivity sweep on K&K: parameter -> values (others at their defaults).
    sweep: dict[str, list[float]] = field(default_factory=dict)
    #: Training overrides every sweep point shares, the default point included.
    sweep_extra: dict[str, Any] = field(default_factory=dict)
    #: Seeds per non-default sweep point (0: all); the default point reuses table_kk's runs.
    sweep_seeds: int = 0
    #: Needs GPUs to train (the paper grid); without them the plan is printed instead.
    needs_gpu: bool = False
    #: Margin (absolute accuracy) within which "Reverse is close to GRPO" counts as held.
    close_margin: float = 0.05
    #: Margin (absolute accuracy) inside which an interval around zero is reported as "no effect
    #: beyond ±margin" rather than underpowered: issue 28's precision target, just above the
    #: smallest gain the paper reports (+2.7 points on math).
    no_effect_margin: float = 0.03
    #: Continued-SFT references at the RL run's compute, in forward-backward tokens.
    sft_reference: bool = True
    #: Base builds per setting (``tiny-kk``, ``tiny-kk@1``...): each method is trained on each
    #: (base seed x RL seed), so intervals cover the base's draw too. 1 for hub models.
    base_seeds: int = 1
    #: Values no public recipe fixes (our choices): config key -> the choice and why.
    choices: dict[str, str] = field(default_factory=dict)
    #: Arms beyond the methods' defaults, by name (``Ablation``): the placement ablation and the
    #: KL control of the tiny grid.
    ablations: dict[str, Ablation] = field(default_factory=dict)
    #: A comparison of methods is decided only on an endpoint (task, greedy or avg@k) where GRPO
    #: gained at least this much over the base, its interval above 0; elsewhere the claim is
    #: "not testable at this scale" (issue 48: RL must move what the methods are compared on).
    min_grpo_gain: float = 0.05
    #: The RL methods the grid trains (algorithm names; GRPO and GRPO-SG always among them);
    #: empty: every method a figure or table names. A figure shows the ones it names that the
    #: grid trains, and decides only the claims between two of them.
    methods: list[str] = field(default_factory=list)
    #: Keep the records of every finished run and evaluation in the results folder
    #: (``<out>/records/``, ``rlvr.reproduce.archive``), so a grid longer than one machine's
    #: session goes on from them on another.
    records: bool = False

    def arms(self, methods: Iterable[str]) -> tuple[str, ...]:
        """``methods`` that the grid trains, in their order; the references ``base`` and
        ``sft`` are kept (the figure decides whether it has them)."""
        return tuple(
            m for m in methods if not self.methods or m in self.methods or m in ("base", "sft")
        )


# -- the grids -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _read_grid(stem: str) -> dict[str, Any]:
    path = GRID_DIR / f"{stem}.yaml"
    if not path.exists():
        raise ConfigError(f"--grid: {stem!r} is not one of {grid_names()}")
    return load_yaml(path)


def grid_names() -> list[str]:
    """The ``--grid`` names: one per grid file (the smoke grid runs under ``tiny``)."""
    stems = [p.stem for p in GRID_DIR.glob("*.yaml") if p.stem != SMOKE_GRID]
    return sorted(stems, key=lambda n: (n != SMOKE_OF, n))


def load_grid(stem: str, name: str | None = None) -> Grid:
    """The ``Grid`` of ``grids/<stem>.yaml`` (named ``name``, default ``stem``). Keys are the
    fields of ``Grid`` and ``Setting`` plus ``architectures`` (model -> shape, named by a
    setting's ``arch``); an unknown key or a wrong type is a one-line ``ConfigError`` naming
    the file and the key."""
    where = f"rlvr/reproduce/grids/{stem}.yaml"
    data = copy.deepcopy(_read_grid(stem))  # the cached file stays as read
    try:
        archs = data.pop("architectures", {}) or {}
        raw_settings = data.pop("settings", None)
        if not isinstance(raw_settings, dict) or not raw_settings:
            raise ConfigError("settings: a grid needs a mapping of settings")
        if "name" in data:
            raise ConfigError("name: a grid is named by its file")
        grid = merge(Grid(name or stem, {}), data)
        for key, raw in raw_settings.items():
            grid.settings[str(key)] = _setting(str(key), raw, archs)
        _check_methods(grid)
        grid.ablations = {str(k): _ablation(str(k), v, grid) for k, v in grid.ablations.items()}
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return grid


def _setting(key: str, raw: Any, archs: dict[str, Any]) -> Setting:
    prefix = f"settings.{key}."
    if not isinstance(raw, dict):
        raise ConfigError(f"settings.{key}: expected a mapping, got {raw!r}")
    values = dict(raw)
    for required in ("env", "model"):
        if not isinstance(values.get(required), str):
            raise ConfigError(f"{prefix}{required}: required (a string)")
    for name in ("env", "train_env"):
        if name in values and values[name] not in ENVS:
            raise ConfigError(f"{prefix}{name}: {values[name]!r} is not one of {sorted(ENVS)}")
    if isinstance(values.get("arch"), str):
        if values["arch"] not in archs:
            raise ConfigError(
                f"{prefix}arch: {values['arch']!r} is not in architectures ({sorted(archs)})"
            )
        values["arch"] = dict(archs[values["arch"]])
    if values.get("gpu") and values["gpu"] not in GPUS:
        raise ConfigError(f"{prefix}gpu: {values['gpu']!r} is not one of {sorted(GPUS)}")
    base = Setting(values.pop("env"), values.pop("model"))
    return merge(base, values, prefix=prefix)


def _check_methods(grid: Grid) -> None:
    unknown = [m for m in grid.methods if m not in algorithm_names()]
    if unknown:
        raise ConfigError(f"methods: {unknown} not among {algorithm_names()}")
    missing = [m for m in ("grpo", "grpo_sg") if grid.methods and m not in grid.methods]
    if missing:
        raise ConfigError(f"methods: needs {missing} (the figures compare GRPO-SG with GRPO)")


def _ablation(name: str, raw: Any, grid: Grid) -> Ablation:
    prefix = f"ablations.{name}."
    if not isinstance(raw, dict) or not isinstance(raw.get("algo"), str):
        raise ConfigError(f"ablations.{name}: a mapping with algo, label, train, claim, a, b")
    ab = merge(Ablation(raw["algo"], str(raw.get("label", name))), raw, prefix=prefix)
    if ab.algo not in (grid.methods or algorithm_names()):
        raise ConfigError(
            f"{prefix}algo: {ab.algo!r} is not one of {grid.methods or algorithm_names()}"
        )
    if ab.setting not in grid.settings:
        raise ConfigError(f"{prefix}setting: {ab.setting!r} is not a setting of the grid")
    arms = {*grid.arms(algorithm_names()), *(grid.ablations or {})}
    for side in ("a", "b"):
        if ab.claim and getattr(ab, side) not in arms:
            raise ConfigError(f"{prefix}{side}: {getattr(ab, side)!r} names no method or ablation")
    return ab


def tiny_grid(smoke: bool = False) -> Grid:
    """The CPU grid on the locally built tiny bases (``--smoke``: the micro model, 2 steps)."""
    return load_grid(SMOKE_GRID, SMOKE_OF) if smoke else load_grid("tiny")


def paper_grid() -> Grid:
    """The paper's models on GPUs (``grids/paper.yaml``, profile ``paper``)."""
    return load_grid("paper")


def get_grid(name: str, smoke: bool = False) -> Grid:
    if name not in grid_names():
        raise ConfigError(f"--grid: {name!r} is not one of {grid_names()}")
    if smoke:
        if name != SMOKE_OF:
            raise ConfigError("--smoke runs the tiny grid's code path; use --grid tiny")
        return tiny_grid(smoke=True)
    return load_grid(name)


def _grid_value(stem: str, *path: str) -> Any:
    node: Any = _read_grid(stem)
    for key in path:
        node = node[key]
    return node


# -- paper ---------------------------------------------------------------------------------------
#: Public architecture facts (the models' ``config.json`` on the Hugging Face hub), for the plan.
QWEN_ARCH = {m: dict(a) for m, a in _grid_value("paper", "architectures").items()}
#: Values of the paper grid that no public recipe fixes (our choices, stated in docs).
PAPER_CHOICES = dict(_grid_value("paper", "choices"))
#: Column -> the math env's dataset name (``rlvr.envs.math.data.DATASETS``).
PAPER_MATH_SETS = {
    n: s["dataset"] for n, s in _grid_value("paper", "settings", "math", "eval_sets").items()
}
#: Column -> FlashRAG subset: Search-R1's seven evaluation sets (test split, dev where FlashRAG
#: has no test split: ``rlvr.envs.searchqa.data.flashrag_split``).
PAPER_QA_SETS = {
    n: s["dataset"] for n, s in _grid_value("paper", "settings", "searchqa", "eval_sets").items()
}
#: Search-R1's retrieval service (``rlvr retrieval-serve`` over an e5 index of wiki-18, or
#: Search-R1's own ``retrieval_server.py``), as the paper's search-QA profile names it.
QA_RETRIEVER = load_yaml(TRAIN_PROFILE_DIR / "paper_searchqa.yaml")["env_kwargs"]["retriever"]

#: GPUs a paper setting can name: memory in GiB as ``torch.cuda.mem_get_info`` reports it.
GPUS = {"H200-141GB": 139.8, "H100-80GB": 79.6}
#: Kept free on every GPU: the CUDA context, NCCL buffers and allocator slack.
GPU_RESERVE_GIB = 1.0


# -- runs and validation -----------------------------------------------------------------
def setting_overrides(
    setting: Setting, algo: str, seed: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Flat ``key=value`` overrides of one training run of ``setting``."""
    return {
        **setting.train,
        "env": setting.run_env,
        "algo": algo,
        "model": setting.model,
        "seed": seed,
        **(extra or {}),
    }


def validate(grid: Grid, algos: tuple[str, ...] | None = None) -> int:
    """Load every training config of ``grid`` (the methods it trains by default) through
    the trainer's typed config (errors name the bad key); returns how many were checked."""
    count = 0
    for key, s in grid.settings.items():
        for algo in algos or grid.arms(algorithm_names()):
            try:
                load_train_config(nest(setting_overrides(s, algo, 0, {"out": "validate"})))
            except ConfigError as e:
                raise ConfigError(f"grid {grid.name}, setting {key}, algo {algo}: {e}") from e
            count += 1
    for name, ab in grid.ablations.items():
        extra = {**ab.train, "out": "validate"}
        try:
            load_train_config(nest(setting_overrides(grid.settings[ab.setting], ab.algo, 0, extra)))
        except ConfigError as e:
            raise ConfigError(f"grid {grid.name}, ablation {name}: {e}") from e
        count += 1
    return count


def replace(setting: Setting, **changes) -> Setting:
    return dataclasses.replace(setting, **changes)
