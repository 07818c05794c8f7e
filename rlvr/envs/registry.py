"""The environment registry: one ``EnvSpec`` per environment, the one place the rest of rlvr reads.

Gymnasium's contract stays the anchor: ``register_env`` calls ``gymnasium.register(id,
entry_point)``, and an environment knows nothing of trainers. The spec adds what the trainer,
the evaluation, the warm start and every stack adapter need to know about a task, so that a new
environment is one package plus one ``register_env`` (``rlvr/envs/__init__.py`` registers the
built-ins; ``tests/test_env_registry.py`` registers one inside a test and runs it everywhere).
Callables may be given as ``"module:attr"`` strings, imported on first use, so that importing
one environment never imports another.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from rlvr import registries
from rlvr.config import ConfigError, did_you_mean
from rlvr.envs.base import Score, Tool


def load(ref: Any) -> Any:
    """The object a ``"module:attr"`` reference names (anything else as it is)."""
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)
    return ref


@dataclass(frozen=True)
class VerlService:
    """A service a multi-turn environment's verl agent loop calls (search QA: the retrieval
    service), which a launch folder's run.sh starts on the node unless ``url_var`` names a running
    one (``rlvr.reproduce.verl.run_script``)."""

    #: What it is, for run.sh's comment (``the retrieval service (Search-R1's POST /retrieve)``).
    what: str
    #: The key of its URL in the agent loop's config section.
    url_key: str
    #: The ``rlvr`` command line that serves it, formatted with ``host``, ``port`` and the
    #: section's settings (``retrieval-serve --index "$RLVR_INDEX" --host {host} ...``).
    serve: str
    #: The environment variable naming a running service instead.
    url_var: str
    #: The environment variable the serving command needs, and what it names.
    source_var: str
    source_help: str
    #: The path that answers when the service is up.
    health: str = "/health"
    #: The environment variable bounding the wait for it, in seconds (default one hour).
    wait_var: str = "RLVR_SERVICE_WAIT_S"


@dataclass(frozen=True)
class VerlSpec:
    """How the environment's tasks are written for verl (``rlvr.integrations.verl.data``) and
    scored back (``rlvr.integrations.verl.reward``)."""

    #: verl's ``ability`` column (default: the environment's name).
    ability: str = ""
    #: ``info -> reward_model.ground_truth`` (default: the environment's ``gold``).
    gold: Any = None
    #: Scoring options of rows that lack them, where upstream data differs from the scorer's
    #: defaults (Logic-RL's K&K prompts are prefilled with ``<think>``).
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: Reset-info keys copied into ``extra_info`` (what an agent loop reads).
    info_keys: tuple[str, ...] = ()
    #: The verl agent loop rows name in ``agent_name`` (multi-turn environments).
    agent_loop: str = ""
    #: ``env_kwargs -> settings`` of the run's config section ``rlvr.<name>`` that the agent loop
    #: reads (``rlvr.integrations.verl.config`` writes it).
    section: Any = None
    #: Keys of that section -> the environment keyword argument each sets in the loop's episodes.
    section_keys: Mapping[str, str] = field(default_factory=dict)
    #: ``(extra_info, ground_truth) -> env_kwargs`` of the one-task environment the agent loop
    #: plays a row on.
    task: Any = None
    #: The service the agent loop calls (``None``: none).
    service: VerlService | None = None
    #: Data-source names of upstream recipes' parquet files this environment scores.
    data_sources: tuple[str, ...] = ()
    #: ``env_kwargs -> env_kwargs`` an export builds the environment with (search QA: a
    #: retrieval address that is never contacted, since exporting does not search).
    export_kwargs: Any = None


@dataclass(frozen=True)
class EnvSpec:
    """Everything rlvr knows about one environment besides its Gymnasium class."""

    #: Short name used in configs and on the command line (``kk``).
    name: str
    #: Gymnasium id (``rlvr/KnightsKnaves-v0``).
    id: str
    #: Gymnasium entry point: the class or ``"module:Class"``.
    entry_point: Any
    #: The pure reward ``score(response, ground_truth, **options) -> Score`` (never raises).
    scorer: Any
    #: The lowest reward the scorer gives: what an episode whose env raised scores.
    min_reward: float
    #: Name in figure titles (default: ``name``).
    title: str = ""
    #: Episodes go on after the first response (observations between turns).
    multi_turn: bool = False
    #: Tools a multi-turn environment understands (stacks that call tools by name).
    tools: tuple[Tool, ...] = ()
    #: Strings that end a policy turn (``</search>``, ``</answer>``).
    stop: tuple[str, ...] = ()
    #: The keyword argument that splits the evaluation items into groups (``n_people``).
    group_key: str = ""
    #: Reset-info keys kept with each evaluation record (``rlvr.eval.runner``).
    record_keys: tuple[str, ...] = ()
    #: Answer metrics of the evaluation (names in ``rlvr.eval.metrics.ANSWER_METRICS``).
    answer_metrics: tuple[str, ...] = ()
    #: ``score_batch(responses, ground_truths, **options) -> [Score]`` when scoring together is
    #: cheaper (math: the verifier pool); else ``scorer`` per response.
    batch_scorer: Any = None
    #: Scoring options (keywords of ``scorer``) a row may carry -> their type (or a converter, as
    #: ``"module:attr"`` too); a row without one takes the scorer's default.
    options: Mapping[str, type] = field(default_factory=dict)
    #: ``(env_kwargs, prompt or None for a chat export) -> options`` an exported row records.
    row_options: Any = None
    #: ``info -> ground truth`` as exported rows carry it (default ``info["ground_truth"]``).
    gold: Any = None
    #: The warm start of its tiny base (``rlvr.envs.warmstart.TraceBuilder``: trace builders,
    #: tiny settings); ``None``: no tiny base.
    traces: Any = None
    #: The keyword arguments that change the text a model sees around a task (template, system
    #: prompt, assistant prefill): a model's prompt format (``rlvr.models.prompt_format``) is
    #: checked against an explicit value of these, and evaluations record them.
    prompt_keys: tuple[str, ...] = ("template",)
    #: Keyword arguments that only mean something together (the custom task's reward functions,
    #: their weights and threshold): one given explicitly replaces the whole group of settings
    #: a model carries (``rlvr.models.prompt_formats.with_format``).
    setting_groups: tuple[tuple[str, ...], ...] = ()
    #: Keys ``rlvr train`` and ``rlvr eval`` take at the top level for this env, standing for
    #: ``env_kwargs.<key>`` (the custom task's ``dataset=``, ``reward=``: ``lift_env_keys``).
    top_level_keys: tuple[str, ...] = ()
    verl: VerlSpec = field(default_factory=VerlSpec)

    # -- what consumers call ------------------------------------------------------------------
    def entry(self) -> type:
        """The environment class (the entry point, imported)."""
        return load(self.entry_point)

    def score(self, response: Any, ground_truth: Any, **options: Any) -> Score:
        return load(self.scorer)(response, ground_truth, **options)

    def score_all(self, responses, ground_truths, options: list[dict]) -> list[Score]:
        """One ``Score`` per response; rows with the same options are scored together by the
        batch scorer when there is one."""
        if self.batch_scorer is None:
            return [self.score(r, g, **o) for r, g, o in zip(responses, ground_truths, options)]
        out: list[Score | None] = [None] * len(responses)
        groups: dict[tuple, list[int]] = {}
        for i, o in enumerate(options):
            groups.setdefault(tuple(sorted(o.items())), []).append(i)
        for key, idx in groups.items():
            scores = load(self.batch_scorer)(
                [responses[i] for i in idx], [ground_truths[i] for i in idx], **dict(key)
            )
            for i, s in zip(idx, scores):
                out[i] = s
        return out  # type: ignore[return-value]

    def read_options(self, row: Mapping[str, Any], defaults: Mapping[str, Any] = {}) -> dict:
        """The scoring options a row (``extra_info``, dataset columns) carries, typed; a missing
        one takes ``defaults`` or else stays unset (the scorer's default)."""
        out = {}
        for name, kind in self.options.items():
            value = row.get(name, defaults.get(name)) if hasattr(row, "get") else None
            if value is not None:
                out[name] = load(kind)(value)
        return out

    def export_gold(self, info: dict, stack: str = "") -> Any:
        """The ground truth of a task as exported rows carry it (``stack="verl"``: verl's)."""
        ref = (self.verl.gold if stack == "verl" else None) or self.gold
        return info["ground_truth"] if ref is None else load(ref)(info)

    def export_options(self, env_kwargs: dict, prompt: str | None = None) -> dict:
        return {} if self.row_options is None else load(self.row_options)(env_kwargs, prompt)

    def prompt_settings(self, env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The ``prompt_keys`` an environment made with ``env_kwargs`` uses: the given value, else
        the constructor's default (``None`` where the environment picks its own text)."""
        params = inspect.signature(self.entry()).parameters
        out = {}
        for key in self.prompt_keys:
            if key in env_kwargs:
                out[key] = env_kwargs[key]
            elif key in params and params[key].default is not inspect.Parameter.empty:
                out[key] = params[key].default
        return out

    def tool_calls(self, text: str) -> int:
        """Tool calls in a response (closing tags of the tools' templates)."""
        return sum(text.count(t.end) for t in self.tools)

    def accepts(self, kwarg: str) -> bool:
        """Whether the environment's constructor takes keyword ``kwarg``."""
        return _accepts(self.entry(), kwarg)

    def check_kwargs(self, kwargs: Mapping[str, Any], prefix: str = "env_kwargs.") -> None:
        """``ConfigError`` naming the first key of ``kwargs`` the constructor does not take."""
        params = inspect.signature(self.entry()).parameters
        accepted = sorted(n for n, p in params.items() if p.kind is not p.VAR_POSITIONAL)
        for key in kwargs:
            if not self.accepts(key):
                raise ConfigError(
                    f"{prefix}{key}: not an argument of {self.id}"
                    f"{did_you_mean(key, accepted, prefix)} (accepted: {', '.join(accepted)})"
                )


def _accepts(entry: Any, kwarg: str) -> bool:
    params = inspect.signature(load(entry)).parameters
    return kwarg in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


ENVS: dict[str, EnvSpec] = {}


def register_env(spec: EnvSpec) -> EnvSpec:
    """Add ``spec`` to the registry and ``gymnasium.register`` its id (a different spec under a
    known name raises)."""
    registries.add(ENVS, spec.name, spec, "env")
    if spec.id not in gym.registry:
        gym.register(id=spec.id, entry_point=spec.entry_point, disable_env_checker=True)
    return spec


def env_names() -> list[str]:
    """Short names of the registered environments, in registration order."""
    return list(ENVS)


def env_spec(name: str) -> EnvSpec:
    """The spec of an environment by short name (``kk``) or gymnasium id."""
    if name in ENVS:
        return ENVS[name]
    for spec in ENVS.values():
        if spec.id == name:
            return spec
    raise ValueError(
        f"unknown env {name!r}{did_you_mean(name, ENVS)}; choose one of {sorted(ENVS)} "
        f"or {sorted(s.id for s in ENVS.values())}"
    )


def lift_env_keys(values: Mapping[str, Any], default_env: str) -> dict[str, Any]:
    """A command's configuration mapping with its env's ``top_level_keys`` moved under
    ``env_kwargs`` (``dataset=x`` -> ``env_kwargs.dataset=x``); one key given both ways is a
    ``ConfigError``."""
    spec = ENVS.get(str(values.get("env", default_env)))
    keys = [k for k in (spec.top_level_keys if spec else ()) if k in values]
    if not keys:
        return dict(values)
    kwargs = dict(values.get("env_kwargs") or {})
    both = [k for k in keys if k in kwargs]
    if both:
        raise ConfigError(f"{both[0]}: given both as {both[0]}= and as env_kwargs.{both[0]}=")
    out = {k: v for k, v in values.items() if k not in keys}
    out["env_kwargs"] = {**kwargs, **{k: values[k] for k in keys}}
    return out


def require_env(name: str) -> EnvSpec:
    """The spec of a registered env by short name; ``ConfigError`` naming the closest one."""
    if name not in ENVS:
        raise ConfigError(
            f"env: {name!r} is not one of {sorted(ENVS)}{did_you_mean(name, ENVS)} (an env "
            "registered outside rlvr needs its module in plugins=[...])"
        )
    return ENVS[name]


def reset_tasks(name: str, indices, *, seed: int = 0, **kwargs):
    """``(index, prompt, info)`` of tasks ``indices`` of an environment built with ``kwargs``,
    each reset as ``reset(seed=seed, options={"index": i})``: what an export of tasks reads."""
    handle = gym.make(env_spec(name).id, **kwargs)
    try:
        for i in indices:
            yield (i, *handle.reset(seed=seed, options={"index": i}))
    finally:
        handle.close()


def env_accepts(name: str, kwarg: str) -> bool:
    """Whether an environment (short name, or any gymnasium id) takes keyword ``kwarg``."""
    if name not in ENVS and name in gym.registry:  # registered with gymnasium alone
        return _accepts(gym.spec(name).entry_point, kwarg)
    return env_spec(name).accepts(kwarg)


def make_env(name: str, split: str | None = None, **kwargs) -> gym.Env:
    """``gymnasium.make`` of an environment by short name or gymnasium id (one registered with
    ``gymnasium.register`` alone works too); ``split`` is passed when given and the environment
    takes one."""
    gid = name if name not in ENVS and name in gym.registry else env_spec(name).id
    if split is not None and env_accepts(gid, "split"):
        kwargs["split"] = split
    return gym.make(gid, **kwargs)
