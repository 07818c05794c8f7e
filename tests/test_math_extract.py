"""Answer extraction and TeX-shorthand rewriting (pure string code, no math-verify)."""

from __future__ import annotations

import pytest

from rlvr.envs.math.extract import (
    MAX_ANSWER_CHARS,
    MAX_BRACE_DEPTH,
    answer_problem,
    brace_depth,
    is_number,
    last_boxed,
    normalize_shorthand,
    written_value,
)


@pytest.mark.parametrize(
    "text, content, reason",
    [
        (r"so \boxed{42}.", "42", ""),
        (r"\boxed{1} no wait \boxed{2}", "2", ""),
        (r"\boxed{\frac{1}{\sqrt{2}}}", r"\frac{1}{\sqrt{2}}", ""),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}", ""),  # escaped braces are not grouping
        (r"\fbox{7}", "7", ""),
        (r"$\boxed 5$", "5", ""),
        (r"\boxed{ 3 }", "3", ""),
        ("no box here", None, "no_boxed"),
        (r"\boxed{12", None, "unterminated_boxed"),
        (r"\boxed{1} then \boxed{", None, "unterminated_boxed"),
        (r"\boxed{}", None, "empty_boxed"),
        (r"\boxed", None, "unterminated_boxed"),
        (r"\boxedanswer{3}", None, "no_boxed"),
        ("", None, "no_boxed"),
    ],
)
def test_last_boxed(text, content, reason):
    found = last_boxed(text)
    assert found.content == content
    assert found.reason == reason


def test_last_boxed_is_linear_on_huge_input():
    text = "{" * 500_000 + r"\boxed{9}" + "}" * 10
    assert last_boxed(text).content == "9"


@pytest.mark.parametrize(
    "src, out",
    [
        (r"\frac12", r"\frac{1}{2}"),
        (r"\frac1{2}", r"\frac{1}{2}"),
        (r"\frac{1}2", r"\frac{1}{2}"),
        (r"\dfrac12", r"\frac{1}{2}"),
        (r"\tfrac{3}{4}", r"\frac{3}{4}"),
        (r"\frac123", r"\frac{1}{2}3"),  # TeX reads one token per argument
        (r"\frac\pi2", r"\frac{\pi}{2}"),
        (r"\frac{\sqrt3}2", r"\frac{\sqrt{3}}{2}"),
        (r"\sqrt2", r"\sqrt{2}"),
        (r"\sqrt[3]8", r"\sqrt[3]{8}"),
        (r"\sqrt[3]{8}", r"\sqrt[3]{8}"),
        (r"\sqrt(2)", r"\sqrt(2)"),  # not TeX: left for the parser to refuse
        (r"\frac{1}{2}", r"\frac{1}{2}"),
        (r"\frac", r"\frac"),
        (r"\frac1", r"\frac1"),
        (r"\fracture", r"\fracture"),
        (r"x^{2} + \alpha", r"x^{2} + \alpha"),
    ],
)
def test_normalize_shorthand(src, out):
    assert normalize_shorthand(src) == out


def test_brace_depth_and_caps():
    assert brace_depth("1") == 0
    assert brace_depth(r"\frac{\sqrt{3}}{2}") == 2
    assert brace_depth(r"\{\{1\}\}") == 0
    deep = r"\frac{1}{" * (MAX_BRACE_DEPTH + 1) + "2" + "}" * (MAX_BRACE_DEPTH + 1)
    assert answer_problem(deep) == "answer_too_deep"
    assert answer_problem("1" * (MAX_ANSWER_CHARS + 1)) == "answer_too_long"
    assert answer_problem(r"\frac{1}{2}") == ""


@pytest.mark.parametrize(
    "text, number",
    [
        ("12", True),
        (" -3.25 ", True),
        ("+7", True),
        ("1,234,567", True),
        ("3/4", True),
        ("3 / 4", True),
        ("15 / 3", False),
        ("4/2", False),
        ("0/1", False),
        ("3/0", False),
        (r"\frac{3}{4}", True),
        (r"-\dfrac{3}{4}", True),
        ("$5$", True),
        ("12,34", False),
        ("2 + 3", False),
        ("2^3", False),
        (r"\frac{x}{4}", False),
        ("1e5", False),
        ("", False),
        ("x", False),
        ("9" * 5000 + "+", False),
    ],
)
def test_is_number(text, number):
    assert is_number(text) is number


def test_written_value_is_the_number_an_answer_ends_with():
    assert written_value(" 12 ") == "12"
    assert written_value("31 + 47 = 78") == "78"
    assert written_value("a = b = $-3/4$") == "-3/4"
    assert written_value("31 + 47") is None
    assert written_value("78 = 31 + 47") is None
    assert written_value("= 78") is None
