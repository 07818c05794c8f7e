"""Reward functions in verl's signatures for rlvr's three environments.

``compute_score(data_source, solution_str, ground_truth, extra_info)`` is what verl's
``reward.custom_reward_function`` (``path=pkg://rlvr.integrations.verl_reward``,
``name=compute_score``) and verl 0.9.1's reward loop call once per response (from a thread
pool); ``compute_score_batch`` is the form of verl's older ``batch`` reward manager
(``verl/workers/reward_manager/batch.py``) and of custom managers, verifying math items together
on the worker pool. Both dispatch on ``data_source`` to the environment's own
pure scorer; no scoring logic lives here. Deadlines are the environments' own: math runs
math-verify on worker processes with a hard per-item deadline (``rlvr.envs.math.DEFAULT_TIMEOUT_S``,
overridable with ``extra_info["timeout_s"]``), which also makes it safe in the threads verl's
reward loop runs scorers in; K&K and search QA scorers are linear-time string code on input capped
at ``MAX_RESPONSE_CHARS``.

``data_source`` values: ``rlvr/kk``, ``rlvr/math``, ``rlvr/searchqa``, optionally followed by
``/<dataset>`` (what ``rlvr prepare-verl`` writes), the gymnasium ids, and the data sources of the
upstream recipes' parquet files (``DATA_SOURCE_ALIASES``: Logic-RL's ``kk_logic``, Search-R1's
QA set names, common math sets), so their existing data also scores with our rewards.

Each call returns ``{"score", "acc", "format"}``: the same three keys for every environment, so a
batch that mixes environments still gives verl uniform ``reward_extra_info`` columns.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from rlvr.envs.base import Score

#: Exact data-source names of upstream recipes' parquet files -> our environment.
DATA_SOURCE_ALIASES = {
    "kk_logic": "kk",  # Logic-RL
    "knights-and-knaves": "kk",
    "K-and-K/knights-and-knaves": "kk",
    "rlvr/KnightsKnaves-v0": "kk",
    "rlvr/Math-v0": "math",
    "rlvr/SearchQA-v0": "searchqa",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
    "openai/gsm8k": "math",
    "agentica-org/DeepScaleR-Preview-Dataset": "math",
    "deepscaler": "math",
    "aime24": "math",
    "amc23": "math",
    # Search-R1 (``scripts/data_process/qa_search_*.py``) names its sources after the QA sets.
    **{
        name: "searchqa"
        for name in (
            "nq",
            "triviaqa",
            "popqa",
            "hotpotqa",
            "2wikimultihopqa",
            "musique",
            "bamboogle",
            "searchR1_nq",
            "searchR1_hotpotqa",
        )
    },
}
ENVS = ("kk", "math", "searchqa")


def env_for(data_source: Any) -> str:
    """The rlvr environment (``kk``/``math``/``searchqa``) that scores ``data_source``.

    Raises ``ValueError`` naming ``data_source`` when no environment claims it.
    """
    name = str(data_source)
    if name in DATA_SOURCE_ALIASES:
        return DATA_SOURCE_ALIASES[name]
    parts = name.split("/")
    if len(parts) >= 2 and parts[0] == "rlvr" and parts[1] in ENVS:
        return parts[1]
    raise ValueError(
        f"data_source: {name!r} is not an rlvr data source; "
        "use rlvr/kk, rlvr/math or rlvr/searchqa "
        f"(optionally /<dataset>) or one of {sorted(DATA_SOURCE_ALIASES)}"
    )


def _extra(extra_info: Any) -> dict:
    return dict(extra_info) if isinstance(extra_info, dict) else {}


def _as_result(result: Score) -> dict[str, float]:
    return {
        "score": float(result.reward),
        "acc": float(result.correct),
        "format": float(result.components.get("format", 0.0)),
    }


def _kk_score(solution_str: Any, ground_truth: Any, extra: dict) -> Score:
    from rlvr.envs.kk import score

    # Logic-RL prompts end with an assistant-turn "<think>" that verl does not pass back with the
    # response; count it unless the export said the prompt was not prefilled.
    return score(
        solution_str, ground_truth, prefilled_think=bool(extra.get("prefilled_think", True))
    )


def _searchqa_score(solution_str: Any, ground_truth: Any, extra: dict) -> Score:
    from rlvr.envs.searchqa.reward import score

    return score(solution_str, ground_truth)


def _math_kwargs(extra: dict) -> dict:
    from rlvr.envs.math import DEFAULT_TIMEOUT_S

    return {
        "require_think": bool(extra.get("require_think", False)),
        "timeout_s": float(extra.get("timeout_s", DEFAULT_TIMEOUT_S)),
    }


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[dict] = None,
    **_verl_kwargs: Any,
) -> dict[str, float]:
    """verl's reward signature: score one response with the environment behind ``data_source``.

    ``extra_info`` keys read: ``prefilled_think`` (K&K, default True), ``require_think`` and
    ``timeout_s`` (math). Extra keyword arguments verl's reward loop may add (e.g. a reward-router
    address) are accepted and ignored.
    """
    env = env_for(data_source)
    extra = _extra(extra_info)
    if env == "kk":
        return _as_result(_kk_score(solution_str, ground_truth, extra))
    if env == "searchqa":
        return _as_result(_searchqa_score(solution_str, ground_truth, extra))
    from rlvr.envs.math import score

    return _as_result(score(solution_str, ground_truth, **_math_kwargs(extra)))


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
    extras = [_extra(e) for e in (extra_infos if extra_infos is not None else [None] * n)]
    if len(extras) != n:
        raise ValueError(f"extra_infos: length {len(extras)} != {n}")
    envs = [env_for(ds) for ds in data_sources]
    out: list[Optional[dict[str, float]]] = [None] * n
    math_groups: dict[tuple, list[int]] = {}
    for i, env in enumerate(envs):
        if env == "math":
            kw = _math_kwargs(extras[i])
            math_groups.setdefault((kw["require_think"], kw["timeout_s"]), []).append(i)
        elif env == "kk":
            out[i] = _as_result(_kk_score(solution_strs[i], ground_truths[i], extras[i]))
        else:
            out[i] = _as_result(_searchqa_score(solution_strs[i], ground_truths[i], extras[i]))
    if math_groups:
        from rlvr.envs.math import score_batch

        for (require_think, timeout_s), idx in math_groups.items():
            scores = score_batch(
                [solution_strs[i] for i in idx],
                [ground_truths[i] for i in idx],
                require_think=require_think,
                timeout_s=timeout_s,
            )
            for i, s in zip(idx, scores):
                out[i] = _as_result(s)
    return out  # type: ignore[return-value]
