"""math-verify, called the way rewards need it (docs/design.md §4).

- Gold first: ``verify(gold, pred)`` is asymmetric; the gold answer is wrapped in ``\\boxed{}``
  and parsed with the same configuration as the prediction.
- ``NormalizationConfig(malformed_operators=False, nits=False)``: the maintainers' advice for
  rewards (the malformed-operator repair produced false positives). TeX shorthand such as
  ``\\frac12`` is rewritten by ``extract.normalize_shorthand`` instead, because with
  math-verify 0.9.0 that configuration alone refuses ``\\frac12`` (measured; see the tests).
- ``boxed="all"`` is harmless here: we hand math-verify one box only (the last one).
- No timeouts inside: math-verify's own use ``signal.alarm`` (main thread only) and raise a
  ``BaseException``. ``verify_answer`` runs with ``parsing_timeout=None, timeout_seconds=None`` in
  worker processes whose deadline ``pool.VerifierPool`` enforces from outside.

Only LaTeX/number text reaches math-verify's own parser; this module never calls ``sympify`` or
``eval`` on model text.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

try:  # math-verify re-exports it from latex2sympy2_extended
    from math_verify import NormalizationConfig
except ImportError:  # pragma: no cover - older math-verify
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig

from rlvr.envs.math.extract import answer_problem, normalize_shorthand

# math-verify warns once per process that its timeout is disabled; the pool enforces it.
logging.getLogger("math_verify").setLevel(logging.ERROR)

REWARD_NORMALIZATION = NormalizationConfig(
    basic_latex=True,
    units=True,
    malformed_operators=False,
    nits=False,
    boxed="all",
    equations=False,
)
EXTRACTION_CONFIG = (
    LatexExtractionConfig(normalization_config=REWARD_NORMALIZATION, boxed_match_priority=0),
    ExprExtractionConfig(),
)


@dataclass(frozen=True)
class Verdict:
    """Outcome of one gold/answer comparison: ``reason`` is "" when correct."""

    correct: bool
    reason: str


def prepare_latex(text: str) -> str:
    """Strip math delimiters and rewrite TeX shorthand; the result goes inside ``\\boxed{}``."""
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            text = text[len(left) : len(text) - len(right)].strip()
            break
    return normalize_shorthand(text)


def _parse_boxed(latex: str, parsing_timeout: int | None) -> list:
    return parse(
        "\\boxed{" + prepare_latex(latex) + "}",
        extraction_config=EXTRACTION_CONFIG,
        parsing_timeout=parsing_timeout,
    )


@functools.lru_cache(maxsize=4096)
def _parse_gold_cached(gold: str) -> tuple:
    return tuple(_parse_boxed(gold, None))


def verify_answer(gold: str, answer: str) -> Verdict:
    """Compare an extracted ``answer`` with the ``gold`` string, with no deadline of its own.

    Run it where something else bounds the time (``pool.VerifierPool``). Never raises on
    ``Exception``s from the parser; ``MemoryError`` (the pool caps worker memory) reads as a miss.
    """
    for text, who in ((gold, "gold"), (answer, "answer")):
        problem = answer_problem(text)
        if problem:
            return Verdict(False, problem if who == "answer" else f"gold_{problem}")
    try:
        gold_parsed = list(_parse_gold_cached(gold))
        if not gold_parsed:
            return Verdict(False, "gold_unparseable")
        pred_parsed = _parse_boxed(answer, None)
        if not pred_parsed:
            return Verdict(False, "answer_unparseable")
        ok = verify(gold_parsed, pred_parsed, timeout_seconds=None)
    except MemoryError:
        return Verdict(False, "memory")
    except Exception as exc:  # noqa: BLE001 - a parser bug on odd text must read as a miss
        return Verdict(False, f"verifier_error:{type(exc).__name__}")
    return Verdict(True, "") if ok else Verdict(False, "wrong")


def verify_answer_in_process(gold: str, answer: str, timeout_s: float) -> Verdict:
    """The same comparison, bounded by math-verify's own ``signal.alarm`` timeouts (whole seconds).

    The fallback when worker processes cannot be started, and the serial baseline of the bench.
    Only valid in the main thread of the main interpreter; elsewhere math-verify refuses and this
    returns ``Verdict(False, "verifier_error:ValueError")``. math-verify swallows its own
    timeouts and answers False; a comparison that ran for the whole budget is reported "timeout".
    """
    seconds = max(1, int(round(timeout_s)))
    for text, who in ((gold, "gold"), (answer, "answer")):
        problem = answer_problem(text)
        if problem:
            return Verdict(False, problem if who == "answer" else f"gold_{problem}")
    start = time.monotonic()
    try:
        gold_parsed = _parse_boxed(gold, seconds)
        if not gold_parsed:
            return Verdict(False, "gold_unparseable")
        pred_parsed = _parse_boxed(answer, seconds)
        if not pred_parsed:
            reason = "timeout" if time.monotonic() - start >= seconds else "answer_unparseable"
            return Verdict(False, reason)
        ok = verify(gold_parsed, pred_parsed, timeout_seconds=seconds)
    except TimeoutException:  # a BaseException: it must be named to be caught
        return Verdict(False, "timeout")
    except MemoryError:
        return Verdict(False, "memory")
    except Exception as exc:  # noqa: BLE001
        return Verdict(False, f"verifier_error:{type(exc).__name__}")
    if ok:
        return Verdict(True, "")
    return Verdict(False, "timeout" if time.monotonic() - start >= seconds else "wrong")
