"""Reward functions in verl's signatures for rlvr's environments.

``compute_score(data_source, solution_str, ground_truth, extra_info)`` is what verl's
``reward.custom_reward_function`` (``path=pkg://rlvr.integrations.verl.reward``,
``name=compute_score``) and verl 0.9.1's reward loop call once per response (from a thread
pool); ``compute_score_batch`` is the form of verl's older ``batch`` reward manager
(``verl/workers/reward_manager/batch.py``) and of custom managers, verifying math items together
on the worker pool. Both dispatch on ``data_source`` to the environment's own
pure scorer (``EnvSpec.scorer``, with the scoring options ``EnvSpec.options`` read from
``extra_info``); no scoring logic lives here. Deadlines are the environments' own: math runs
math-verify on worker processes with a hard per-item deadline (``rlvr.envs.math.DEFAULT_TIMEOUT_S``,
overridable with ``extra_info["timeout_s"]``), which also makes it safe in the threads verl's
reward loop runs scorers in; K&K and search QA scorers are linear-time string code on input capped
at ``MAX_RESPONSE_CHARS``.

``data_source`` values: ``rlvr/<env>`` (``rlvr/kk``, ``rlvr/math``, ``rlvr/searchqa``...),
optionally followed by ``/<dataset>`` (what ``rlvr prepare-verl`` writes), the gymnasium ids, and
the data sources of the upstream recipes' parquet files (``EnvSpec.verl.data_sources``:
Logic-RL's ``kk_logic``, Search-R1's QA set names, common math sets), so their existing data also
scores with our rewards.

Each call returns ``{"score", "acc", "format"}``: the same three keys for every environment, so a
batch that mixes environments still gives verl uniform ``reward_extra_info`` columns.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from rlvr.envs import ENVS, env_spec
from rlvr.envs.base import Score


def env_for(data_source: Any) -> str:
    """The rlvr environment that scores ``data_source`` (``ValueError`` naming it when none
    claims it)."""
    name = str(data_source)
    for spec in ENVS.values():
        if name == spec.id or name in spec.verl.data_sources:
            return spec.name
    parts = name.split("/")
    if len(parts) >= 2 and parts[0] == "rlvr" and parts[1] in ENVS:
        return parts[1]
    aliases = sorted(a for spec in ENVS.values() for a in (spec.id, *spec.verl.data_sources))
    raise ValueError(
        f"data_source: {name!r} is not an rlvr data source; use rlvr/<env> "
        f"(<env> one of {sorted(ENVS)}, optionally /<dataset>) or one of {aliases}"
    )


def _options(env: str, extra_info: Any) -> dict:
    spec = env_spec(env)
    extra = dict(extra_info) if isinstance(extra_info, dict) else {}
    return spec.read_options(extra, spec.verl.defaults)


def _as_result(result: Score) -> dict[str, float]:
    return {
        "score": float(result.reward),
        "acc": float(result.correct),
        "format": float(result.components.get("format", 0.0)),
    }


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[dict] = None,
    **_verl_kwargs: Any,
) -> dict[str, float]:
    """verl's reward signature: score one response with the environment behind ``data_source``.

    ``extra_info`` carries the environment's scoring options (``EnvSpec.options``; K&K's
    ``prefilled_think``, default True as in Logic-RL's data; math's ``require_think`` and
    ``timeout_s``). Extra keyword arguments verl's reward loop may add (e.g. a reward-router
    address) are accepted and ignored.
    """
    env = env_for(data_source)
    return _as_result(env_spec(env).score(solution_str, ground_truth, **_options(env, extra_info)))


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Optional[Sequence[Optional[dict]]] = None,
    **_verl_kwargs: Any,
) -> list[dict[str, float]]:
    """verl's ``batch`` reward-manager signature; math items are verified together on the pool."""
    n = len(solution_strs)
    if not (len(data_sources) == len(ground_truths) == n):
        raise ValueError(
            "data_sources/solution_strs/ground_truths: lengths differ "
            f"({len(data_sources)}, {n}, {len(ground_truths)})"
        )
    extras = list(extra_infos) if extra_infos is not None else [None] * n
    if len(extras) != n:
        raise ValueError(f"extra_infos: length {len(extras)} != {n}")
    envs = [env_for(ds) for ds in data_sources]
    out: list[Optional[dict[str, float]]] = [None] * n
    for env in dict.fromkeys(envs):
        idx = [i for i, e in enumerate(envs) if e == env]
        scores = env_spec(env).score_all(
            [solution_strs[i] for i in idx],
            [ground_truths[i] for i in idx],
            [_options(env, extras[i]) for i in idx],
        )
        for i, s in zip(idx, scores):
            out[i] = _as_result(s)
    return out  # type: ignore[return-value]
