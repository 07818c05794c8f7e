"""The math reward: 1 when the last ``\\boxed{}`` of the response verifies against the gold answer,
else 0 (DeepScaleR / verl convention, docs/design.md §4).

``score`` and ``score_batch`` are pure in their result: the same (response, gold) always gives the
same Score, except that a verification past its deadline scores 0 with ``reason="timeout"``.
The cheap checks (length cap, ``</think>`` rule, box extraction, size and depth caps) run here;
only the math-verify comparison goes to the worker pool, which enforces the deadline.

``answer_form="number"`` also requires the box to end with a written-out number
(``extract.written_value``: ``-14``, or ``21 - 35 = -14``), and verifies that number alone:
math-verify compares values, so ``\\boxed{21 - 35}`` verifies against ``-14``, and a policy
asked to compute an expression can earn the reward by restating it (measured on SmolLM2-135M:
results/smollm2/history/README.md). The default ``"any"`` is the paper's reward.

Components: ``answer`` (1/0, equals the reward) and ``format`` (1 when a final boxed answer was
found where the rules want it, else 0). Reasons: "" (correct), ``wrong``, ``empty``,
``no_boxed``, ``unterminated_boxed``, ``empty_boxed``, ``missing_think_end``,
``answer_too_long``, ``answer_too_deep``, ``not_a_number``, ``answer_unparseable``, ``gold_empty``,
``gold_unparseable``, ``timeout``, ``memory``, ``worker_crashed``, ``verifier_error:<type>``.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from rlvr.envs.base import MAX_RESPONSE_CHARS, Score, coerce_text
from rlvr.envs.math.extract import answer_problem, last_boxed, written_value
from rlvr.envs.math.pool import WorkerStartError, check_timeout, shared_pool
from rlvr.envs.math.verify import Verdict, verify_answer_in_process

#: Seconds one verification may take (math-verify's own default per parse/compare is 5 s).
DEFAULT_TIMEOUT_S = 5.0
THINK_END = "</think>"
#: What a boxed answer may be: anything math-verify reads ("any"), or a written-out number.
ANSWER_FORMS = ("any", "number")

log = logging.getLogger(__name__)


def gold_to_text(value: Any) -> str:
    """A gold answer as a string: ``27.0`` -> ``"27"`` (AMC23 stores floats), strings stripped
    of surrounding ``$``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    text = coerce_text(value).strip()
    if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    return text


def final_answer(response: str, *, require_think: bool = False) -> tuple[str | None, str]:
    """The answer a response commits to (last box) and why there is none ("" when found).

    ``require_think``: the DeepScaleR format rule, the answer must come after ``</think>``; only
    the text after the first ``</think>`` is searched.
    """
    if not response.strip():
        return None, "empty"
    if require_think:
        head, sep, tail = response.partition(THINK_END)
        if not sep:
            return None, "missing_think_end"
        response = tail
    found = last_boxed(response)
    return found.content, found.reason


def _fail(reason: str, fmt: float, parsed: str | None = None) -> Score:
    return Score(0.0, False, {"answer": 0.0, "format": fmt}, reason, parsed)


def _verdict_score(verdict: Verdict, answer: str) -> Score:
    if verdict.correct:
        return Score(1.0, True, {"answer": 1.0, "format": 1.0}, "", answer)
    return _fail(verdict.reason, 1.0, answer)


def score_batch(
    responses: Sequence[Any],
    ground_truths: Sequence[Any],
    *,
    require_think: bool = False,
    answer_form: str = "any",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    workers: int | None = 2,
    prefill: str = "",
) -> list[Score]:
    """Score many responses on the shared worker pool (``workers`` processes, ``None`` = reuse
    any); each comparison has a hard ``timeout_s`` deadline. Never raises on any response.
    ``prefill``: the text that started the assistant turn (``\\boxed{``), scored in front of
    each response as the env scores it."""
    check_answer_form(answer_form)
    if len(responses) != len(ground_truths):
        raise ValueError(
            f"responses and ground_truths differ in length: "
            f"{len(responses)} != {len(ground_truths)}"
        )
    timeout_s = check_timeout(timeout_s)
    scores: list[Score | None] = [None] * len(responses)
    jobs: list[tuple[int, str, str]] = []
    for i, (response, gold) in enumerate(zip(responses, ground_truths)):
        gold_text = gold_to_text(gold)
        answer, reason = final_answer(
            (prefill + coerce_text(response))[:MAX_RESPONSE_CHARS], require_think=require_think
        )
        if answer is None:
            scores[i] = _fail(reason, 0.0)
        elif not gold_text:
            scores[i] = _fail("gold_empty", 1.0, answer)
        elif answer_problem(answer):
            scores[i] = _fail(answer_problem(answer), 1.0, answer[:200])
        elif answer_form == "number":
            value = written_value(answer)
            if value is None:
                scores[i] = _fail("not_a_number", 1.0, answer[:200])
            else:
                jobs.append((i, gold_text, value))
        else:
            jobs.append((i, gold_text, answer))
    if jobs:
        for (i, _, answer), verdict in zip(jobs, _verify(jobs, timeout_s, workers)):
            scores[i] = _verdict_score(verdict, answer)
    return scores  # type: ignore[return-value]


def check_answer_form(answer_form: str) -> str:
    if answer_form not in ANSWER_FORMS:
        raise ValueError(f"answer_form must be one of {ANSWER_FORMS}, got {answer_form!r}")
    return answer_form


def _verify(
    jobs: list[tuple[int, str, str]], timeout_s: float, workers: int | None
) -> list[Verdict]:
    pairs = [(gold, answer) for _, gold, answer in jobs]
    try:
        return shared_pool(workers).verify_many(pairs, timeout_s)
    except (WorkerStartError, OSError) as exc:
        # No worker processes here (sandbox, fd limits): math-verify's own signal timeouts, which
        # only work in the main thread, are the best deadline left.
        log.warning("math verifier pool unavailable (%s); verifying in-process", exc)
        return [verify_answer_in_process(g, a, timeout_s) for g, a in pairs]


def score(
    response: Any,
    ground_truth: Any,
    *,
    require_think: bool = False,
    answer_form: str = "any",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    prefill: str = "",
) -> Score:
    """Reward 1/0 for one response (``prefill`` in front): its last ``\\boxed{}`` verified
    against ``ground_truth`` (gold parsed first, ``verify(gold, pred)``). Never raises, never
    runs past ``timeout_s`` plus process overhead."""
    return score_batch(
        [response],
        [ground_truth],
        require_think=require_think,
        answer_form=answer_form,
        timeout_s=timeout_s,
        workers=None,
        prefill=str(prefill),
    )[0]


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> float:
    """verl's reward-function signature (``custom_reward_function``): the 1/0 reward."""
    return score(solution_str, ground_truth).reward


# -- how exported rows carry a task (rlvr.envs.registry: the math spec) --------------------------
def gold_of(info: dict) -> str:
    """A reset ``info``'s gold answer as text (``gold_to_text``)."""
    return gold_to_text(info["ground_truth"])


def row_options(env_kwargs: dict, prompt: str | None) -> dict[str, Any]:
    """``require_think``: the env's own setting (the DSR recipe's ``</think>`` requirement);
    ``answer_form`` only when it is not the default; ``prefill`` when the exported prompt ends
    with the env's assistant prefill (a chat export, ``prompt=None``, is rendered by the
    consumer without it), so that ``rlvr score`` scores a sampled row's response as the env
    did."""
    out: dict[str, Any] = {"require_think": bool(env_kwargs.get("require_think", False))}
    form = check_answer_form(str(env_kwargs.get("answer_form", "any")))
    if form != "any":
        out["answer_form"] = form
    prefill = str(env_kwargs.get("prefill") or "")
    if prefill and prompt is not None and prompt.endswith(prefill):
        out["prefill"] = prefill
    return out
