"""Pulling the final answer out of a model response, and making its LaTeX safe to parse.

Pure string code, linear in the input: no regex backtracking, no recursion deeper than the brace
depth cap. Nothing here evaluates the text.

- ``last_boxed``: the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or the TeX form
  ``\\boxed 5``), braces matched, escaped ``\\{``/``\\}`` ignored. The reward convention of
  DeepScaleR/verl is the *last* box; an unterminated last box means the answer was cut off.
- ``brace_depth``: how deeply ``{}`` nest. The LaTeX parser behind math-verify is superlinear
  in nesting (measured with math-verify 0.9.0 / latex2sympy2_extended: 16 nested ``\\frac`` take
  ~8 s, 20 take minutes), so answers deeper than ``MAX_BRACE_DEPTH`` are rejected up front.
- ``is_number``: whether an answer is a written-out value (``-14``, ``2.5``, ``3/4``,
  ``\\frac{3}{4}``) rather than an expression math-verify would evaluate (``21 - 35``, or
  ``15 / 3``: a fraction counts only in lowest terms); ``written_value``: that value, alone or
  at the end of an equation (``21 - 35 = -14``).
- ``normalize_shorthand``: TeX's unbraced arguments (``\\frac12``, ``\\frac1{2}``, ``\\dfrac``,
  ``\\tfrac``, ``\\sqrt2``, ``\\sqrt[3]8``) rewritten to braced form. math-verify only repairs
  these under ``malformed_operators=True``, which its maintainers advise against for rewards
  because the same repair invents answers (``sqrt(2)``-style text). TeX reads exactly one token
  per unbraced argument (one character or one control word), so ``\\frac123`` is
  ``\\frac{1}{2}3``; we follow TeX, which keeps ``\\sqrt(2)`` unrepaired.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: An answer inside the box longer than this is not an answer (the longest gold answer in the six
#: evaluation sets is under 200 characters).
MAX_ANSWER_CHARS = 1000
#: Deepest ``{}`` nesting accepted inside an answer; gold answers in the six evaluation sets nest
#: at most 4 deep (measured), and 12 nested ``\frac`` already take ~1 s to verify.
MAX_BRACE_DEPTH = 10

_BOX_COMMANDS = ("\\boxed", "\\fbox")
#: A written-out number: an integer or decimal (thousands commas allowed), or a fraction a/b or
#: \frac{a}{b}, with an optional sign. Anchored, no nested quantifiers: linear in the input.
_DECIMAL = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_FRACTION = re.compile(r"[-+]?(?:(\d+)\s*/\s*(\d+)|\\[dt]?frac\{(\d+)\}\{(\d+)\})")
_FRAC_COMMANDS = ("\\frac", "\\dfrac", "\\tfrac")


@dataclass(frozen=True)
class Extraction:
    """The last boxed answer of a text, or why there is none (``content`` is None then)."""

    content: str | None
    reason: str = ""


def _match_brace(text: str, open_pos: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_pos``, or -1. Escaped braces do not count."""
    depth = 0
    i, n = open_pos, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2  # skips \{ \} \\ and the first letter of any control word
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _rfind_box(text: str, end: int) -> tuple[int, str]:
    """Start and name of the last box command starting before ``end`` (-1 when none)."""
    best, name = -1, ""
    for cmd in _BOX_COMMANDS:
        pos = text.rfind(cmd, 0, end)
        # `\boxed` must not be the prefix of a longer control word such as `\boxedanswer`.
        while pos >= 0 and pos + len(cmd) < len(text) and text[pos + len(cmd)].isalpha():
            pos = text.rfind(cmd, 0, pos)
        if pos > best:
            best, name = pos, cmd
    return best, name


def last_boxed(text: str) -> Extraction:
    """The content of the last ``\\boxed{}``/``\\fbox{}`` in ``text`` (see module docstring)."""
    start, cmd = _rfind_box(text, len(text))
    if start < 0:
        return Extraction(None, "no_boxed")
    i = start + len(cmd)
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "{":
        close = _match_brace(text, i)
        if close < 0:
            return Extraction(None, "unterminated_boxed")
        content = text[i + 1 : close]
    elif i > start + len(cmd):
        # TeX form `\boxed 5`: the argument runs to the next space or `$`.
        j = i
        while j < len(text) and not text[j].isspace() and text[j] != "$":
            j += 1
        content = text[i:j]
    else:
        return Extraction(None, "unterminated_boxed")
    content = content.strip()
    if not content:
        return Extraction(None, "empty_boxed")
    return Extraction(content)


def brace_depth(text: str) -> int:
    """Deepest nesting of unescaped ``{}`` in ``text``."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif c == "}":
            depth = max(depth - 1, 0)
        i += 1
    return deepest


def answer_problem(answer: str) -> str:
    """Why an extracted answer is refused before parsing ("" when it may be parsed)."""
    if len(answer) > MAX_ANSWER_CHARS:
        return "answer_too_long"
    if brace_depth(answer) > MAX_BRACE_DEPTH:
        return "answer_too_deep"
    return ""


def _bare(text: str) -> str:
    """``text`` without surrounding spaces and ``$``."""
    return text.strip().strip("$").strip()


def is_number(answer: str) -> bool:
    """Whether ``answer`` is a written-out number (``_DECIMAL``, or ``_FRACTION`` in lowest terms),
    surrounding spaces and ``$`` ignored: the ``answer_form="number"`` rule of the math reward
    (``rlvr.envs.math.reward``)."""
    text = _bare(answer)
    if _DECIMAL.fullmatch(text):
        return True
    frac = _FRACTION.fullmatch(text)
    if frac is None:
        return False
    num, den = (int(g) for g in frac.groups() if g is not None)
    return den > 1 and math.gcd(num, den) == 1  # 15/3 is a division still to do


def written_value(answer: str) -> str | None:
    """The written-out number an answer ends with: all of it (``-14``) or what follows its last
    ``=`` (``21 - 35 = -14``); None when it holds none (``21 - 35``)."""
    if is_number(answer):
        return _bare(answer)
    head, eq, tail = answer.rpartition("=")
    return _bare(tail) if eq and head.strip() and is_number(tail) else None


def _read_arg(text: str, i: int) -> tuple[str | None, int]:
    """One TeX macro argument at ``text[i:]`` (spaces skipped): a braced group, a control word or
    one character. Returns the argument *without* braces and the index after it; ``None`` when
    there is no argument (end of text or a closing brace)."""
    n = len(text)
    while i < n and text[i] == " ":
        i += 1
    if i >= n or text[i] == "}":
        return None, i
    if text[i] == "{":
        close = _match_brace(text, i)
        if close < 0:
            return None, i
        return normalize_shorthand(text[i + 1 : close]), close + 1
    if text[i] == "\\":
        j = i + 1
        while j < n and text[j].isalpha():
            j += 1
        if j == i + 1:  # control symbol such as \{ or \,
            j = min(i + 2, n)
        return text[i:j], j
    return text[i], i + 1


def _starts_command(text: str, i: int, cmd: str) -> bool:
    end = i + len(cmd)
    return text.startswith(cmd, i) and (end >= len(text) or not text[end].isalpha())


def normalize_shorthand(latex: str) -> str:
    """Rewrite ``\\frac``/``\\dfrac``/``\\tfrac``/``\\sqrt`` with unbraced arguments to braced
    ``\\frac{a}{b}`` / ``\\sqrt[n]{a}``; everything else is copied unchanged.

    Callers bound the nesting first (``answer_problem``): recursion follows brace depth.
    """
    out: list[str] = []
    i, n = 0, len(latex)
    while i < n:
        c = latex[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        frac = next((f for f in _FRAC_COMMANDS if _starts_command(latex, i, f)), None)
        if frac is not None:
            num, j = _read_arg(latex, i + len(frac))
            den, k = _read_arg(latex, j) if num is not None else (None, j)
            if num is None or den is None:
                out.append(latex[i : i + len(frac)])
                i += len(frac)
                continue
            out.append("\\frac{" + num + "}{" + den + "}")
            i = k
            continue
        if _starts_command(latex, i, "\\sqrt"):
            j = i + len("\\sqrt")
            index = ""
            while j < n and latex[j] == " ":
                j += 1
            if j < n and latex[j] == "[":
                close = latex.find("]", j)
                if close < 0:
                    out.append("\\sqrt")
                    i += len("\\sqrt")
                    continue
                index = "[" + normalize_shorthand(latex[j + 1 : close]) + "]"
                j = close + 1
            radicand, k = _read_arg(latex, j)
            if radicand is None or radicand == "(":
                # `\sqrt(2)` is not TeX; leave it for the parser to refuse.
                out.append("\\sqrt")
                i += len("\\sqrt")
                continue
            out.append("\\sqrt" + index + "{" + radicand + "}")
            i = k
            continue
        # Any other control word or symbol: copy it whole so `\\f` etc. are never split.
        j = i + 1
        while j < n and latex[j].isalpha():
            j += 1
        if j == i + 1:
            j = min(i + 2, n)
        out.append(latex[i:j])
        i = j
    return "".join(out)
