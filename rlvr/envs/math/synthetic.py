"""Seeded arithmetic and small-algebra problems with graded difficulty, for the CPU profile.

Levels:
  1. one operation on small integers: ``Compute 7 + 5.``
  2. three or four integers, ``+ - *``, with parentheses: ``Compute (3 + 4) * 5 - 2.``
  3. two fractions: ``Compute 1/2 + 2/3.``
  4. a linear equation: ``Solve for x: 3x + 5 = 20.``
  5. a 2x2 linear system or a quadratic with integer roots:
     ``Solve x + 2y = 7 and 3x - y = 7. Find y.`` / ``Find the larger root of x^2 - 5x + 6 = 0.``

Answers come from sympy on the generator's own expression objects (never from the rendered text);
each problem has a short worked solution ending in ``\\boxed{answer}`` for SFT warm starts.

Determinism: problem ``index`` of ``(seed, split, difficulty)`` is drawn from a ``random.Random``
seeded with a string (hashed with SHA-512 by CPython, so identical across machines, processes and
``PYTHONHASHSEED``). Train/test separation: a problem belongs to the test split iff the SHA-256
of its text falls in the first 10 % of buckets; each stream skips the other split's problems, so
no test problem text ever appears in the train stream, whatever the seed.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Sequence

import sympy

LEVELS = (1, 2, 3, 4, 5)
SPLITS = ("train", "test")
#: Fraction of the problem space (by text hash) reserved for the test split, in 1/1000.
TEST_PER_MILLE = 100
X, Y = sympy.symbols("x y")


@dataclass(frozen=True)
class SyntheticProblem:
    problem: str
    answer: str
    solution: str
    difficulty: int
    split: str
    index: int
    seed: int

    @property
    def id(self) -> str:
        return f"synthetic-{self.split}-s{self.seed}-d{self.difficulty}-{self.index}"

    def as_record(self) -> dict:
        return {
            "problem": self.problem,
            "ground_truth": self.answer,
            "solution": self.solution,
            "source": "synthetic",
            "id": self.id,
            "difficulty": self.difficulty,
        }


# -- rendering helpers ---------------------------------------------------------------------------
def _num(value: sympy.Rational) -> str:
    """Integers as ``7``, fractions as ``7/6`` (short for tiny byte-level models)."""
    value = sympy.Rational(value)
    return str(value.p) if value.q == 1 else f"{value.p}/{value.q}"


def _linear(coeffs: Sequence[tuple[int, str]], const: int = 0) -> str:
    """``[(3, "x"), (-1, "y")], 5`` -> ``3x - y + 5``."""
    parts: list[str] = []
    for c, var in list(coeffs) + [(const, "")]:
        if c == 0 and (var or parts):
            continue
        mag = abs(c)
        body = (var if mag == 1 else f"{mag}{var}") if var else str(mag)
        if not parts:
            parts.append(("-" if c < 0 else "") + body)
        else:
            parts.append(("- " if c < 0 else "+ ") + body)
    return " ".join(parts) if parts else "0"


# -- level 1 and 2: integer expression trees -----------------------------------------------------
_OPS = {"+": (1, lambda a, b: a + b), "-": (1, lambda a, b: a - b), "*": (2, lambda a, b: a * b)}


@dataclass(frozen=True)
class _Node:
    op: str | None
    value: sympy.Integer
    left: "_Node | None" = None
    right: "_Node | None" = None


def _leaf(n: int) -> _Node:
    return _Node(None, sympy.Integer(n))


def _combine(op: str, left: _Node, right: _Node) -> _Node:
    return _Node(op, _OPS[op][1](left.value, right.value), left, right)


def _render(node: _Node) -> str:
    if node.op is None:
        return str(node.value)
    prec = _OPS[node.op][0]

    def side(child: _Node, right: bool) -> str:
        text = _render(child)
        if child.op is None:
            return text
        cprec = _OPS[child.op][0]
        if cprec < prec or (right and cprec == prec and node.op in "-"):
            return f"({text})"
        return text

    return f"{side(node.left, False)} {node.op} {side(node.right, True)}"


def _reduce_once(node: _Node) -> _Node:
    """Evaluate the leftmost operation whose operands are both numbers (one worked step)."""
    if node.op is None:
        return node
    if node.left.op is None and node.right.op is None:
        return _leaf(int(node.value))
    if node.left.op is not None:
        left = _reduce_once(node.left)
        return _combine(node.op, left, node.right)
    return _combine(node.op, node.left, _reduce_once(node.right))


def _steps(node: _Node) -> str:
    chain = [_render(node)]
    while node.op is not None:
        node = _reduce_once(node)
        chain.append(_render(node))
    return " = ".join(chain)


def _level1(rng: random.Random) -> tuple[str, sympy.Rational, str]:
    op = rng.choice(["+", "-", "*", "/"])
    if op == "/":
        b, q = rng.randint(2, 9), rng.randint(1, 12)
        expr = sympy.Integer(b * q) / sympy.Integer(b)
        text = f"{b * q} / {b}"
        return f"Compute {text}.", expr, f"{text} = {_num(expr)}."
    a, b = (
        (rng.randint(2, 12), rng.randint(2, 12))
        if op == "*"
        else (rng.randint(0, 50), rng.randint(0, 50))
    )
    node = _combine(op, _leaf(a), _leaf(b))
    return f"Compute {_render(node)}.", node.value, f"{_steps(node)}."


def _level2(rng: random.Random) -> tuple[str, sympy.Rational, str]:
    while True:  # until the rendering needs parentheses (terminates: ~half the trees do)
        nodes = [_leaf(rng.randint(1, 12)) for _ in range(rng.choice([3, 3, 4]))]
        while len(nodes) > 1:
            i = rng.randrange(len(nodes) - 1)
            op = rng.choice(["+", "-", "*"])
            nodes[i : i + 2] = [_combine(op, nodes[i], nodes[i + 1])]
        node = nodes[0]
        if "(" in _render(node):
            break
    return f"Compute {_render(node)}.", node.value, f"{_steps(node)}."


# -- level 3: fractions ---------------------------------------------------------------------------
def _level3(rng: random.Random) -> tuple[str, sympy.Rational, str]:
    def frac() -> sympy.Rational:
        q = rng.randint(2, 9)
        return sympy.Rational(rng.randint(1, q - 1), q)

    a, b, op = frac(), frac(), rng.choice(["+", "-", "*"])
    text = f"{_num(a)} {op} {_num(b)}"
    if op == "*":
        value = a * b
        raw = f"{a.p * b.p}/{a.q * b.q}"
        trace = f"{text} = {raw}." if raw == _num(value) else f"{text} = {raw} = {_num(value)}."
    else:
        value = a + b if op == "+" else a - b
        lcm = sympy.ilcm(a.q, b.q)
        na, nb = a.p * (lcm // a.q), b.p * (lcm // b.q)
        num = na + nb if op == "+" else na - nb
        trace = f"{text} = {na}/{lcm} {op} {nb}/{lcm} = {num}/{lcm}"
        trace += "." if _num(value) == f"{num}/{lcm}" else f" = {_num(value)}."
    return f"Compute {text}.", value, trace


# -- level 4: linear equations -------------------------------------------------------------------
def _level4(rng: random.Random) -> tuple[str, sympy.Rational, str]:
    x0 = rng.randint(-10, 10)
    a = rng.choice([-1, 1]) * rng.randint(2, 9)
    b = rng.randint(-20, 20)
    c = a * x0 + b
    (root,) = sympy.solve(sympy.Eq(a * X + b, c), X)
    lhs = _linear([(a, "x")], b)
    move = f"{c} - {b}" if b >= 0 else f"{c} + {-b}"
    trace = (
        f"{lhs} = {c}, so {a}x = {move} = {c - b}, "
        f"so x = {c - b}/{a if a > 0 else f'({a})'} = {_num(root)}."
    )
    return f"Solve for x: {lhs} = {c}.", root, trace


# -- level 5: systems and quadratics -------------------------------------------------------------
def _level5_system(rng: random.Random) -> tuple[str, sympy.Rational, str]:
    x0, y0 = rng.randint(-9, 9), rng.randint(-9, 9)
    b1 = rng.choice([-3, -2, -1, 1, 2, 3])
    a2 = rng.choice([-3, -2, 2, 3])
    b2 = rng.choice([b for b in range(-4, 5) if b != 0 and b != a2 * b1])
    c1, c2 = x0 + b1 * y0, a2 * x0 + b2 * y0
    eq1, eq2 = sympy.Eq(X + b1 * Y, c1), sympy.Eq(a2 * X + b2 * Y, c2)
    sol = sympy.solve([eq1, eq2], [X, Y], dict=True)[0]
    ask = rng.choice(["x", "y"])
    value = sol[X] if ask == "x" else sol[Y]
    e1, e2 = _linear([(1, "x"), (b1, "y")]), _linear([(a2, "x"), (b2, "y")])
    ycoef, rhs = b2 - a2 * b1, c2 - a2 * c1
    trace = (
        f"From {e1} = {c1}, x = {_linear([(-b1, 'y')], c1)}. "
        f"Substitute: {ycoef}y = {rhs}, so y = {_num(sol[Y])}, "
        f"and x = {_num(sol[X])}."
    )
    return f"Solve {e1} = {c1} and {e2} = {c2}. Find {ask}.", value, trace


def _level5_quadratic(rng: random.Random) -> tuple[str, sympy.Rational, str]:
    r1, r2 = rng.sample(range(-9, 10), 2)
    poly = sympy.Poly(sympy.expand((X - r1) * (X - r2)), X)
    _, p, q = (int(c) for c in poly.all_coeffs())
    roots = sorted(sympy.solve(poly.as_expr(), X))
    which = rng.choice(["larger", "smaller"])
    value = roots[-1] if which == "larger" else roots[0]
    text = "x^2" + "".join(
        f" {'-' if c < 0 else '+'} {body}"
        for c, body in ((p, "x" if abs(p) == 1 else f"{abs(p)}x"), (q, str(abs(q))))
        if c != 0
    )
    f1, f2 = _linear([(1, "x")], -roots[0]), _linear([(1, "x")], -roots[1])
    trace = (
        f"{text} = ({f1})({f2}), so x = {roots[0]} or x = {roots[1]}; the {which} root is {value}."
    )
    return f"Find the {which} root of {text} = 0.", value, trace


def _level5(rng: random.Random) -> tuple[str, sympy.Rational, str]:
    return (_level5_system if rng.random() < 0.5 else _level5_quadratic)(rng)


_GENERATORS = {1: _level1, 2: _level2, 3: _level3, 4: _level4, 5: _level5}


# -- public API ----------------------------------------------------------------------------------
def parse_difficulty(difficulty: int | Sequence[int] | None) -> tuple[int, ...]:
    """``None`` -> all levels; an int or a list of ints in 1..5 otherwise (ValueError if not)."""
    if difficulty is None:
        return LEVELS
    levels = (difficulty,) if isinstance(difficulty, int) else tuple(difficulty)
    if not levels or any(
        not isinstance(d, int) or isinstance(d, bool) or d not in LEVELS for d in levels
    ):
        raise ValueError(
            f"difficulty must be an int in {LEVELS} or a list of them, got {difficulty!r}"
        )
    return levels


def problem_split(text: str) -> str:
    """The split a problem text belongs to, by SHA-256 bucket (see module docstring)."""
    bucket = int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % 1000
    return "test" if bucket < TEST_PER_MILLE else "train"


def generate_problem(
    index: int,
    *,
    split: str = "train",
    difficulty: int | Sequence[int] | None = None,
    seed: int = 0,
) -> SyntheticProblem:
    """Problem ``index`` of the ``(seed, split, difficulty)`` stream; pure and deterministic."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not isinstance(index, int) or index < 0:
        raise ValueError(f"index must be a non-negative int, got {index!r}")
    levels = parse_difficulty(difficulty)
    levels_key = ",".join(map(str, levels))
    for attempt in range(10_000):
        rng = random.Random(f"rlvr-math-synthetic/{seed}/{split}/{levels_key}/{index}/{attempt}")
        level = rng.choice(levels)
        problem, value, trace = _GENERATORS[level](rng)
        if problem_split(problem) == split:
            answer = _num(value)
            solution = f"{trace} The answer is \\boxed{{{answer}}}."
            return SyntheticProblem(problem, answer, solution, level, split, index, seed)
    raise RuntimeError(f"no {split} problem found for index {index} at difficulty {levels}")


def generate_dataset(
    n: int, *, split: str = "train", difficulty: int | Sequence[int] | None = None, seed: int = 0
) -> list[dict]:
    """The first ``n`` problems of a stream as records (``problem``, ``ground_truth``, ...)."""
    return [
        generate_problem(i, split=split, difficulty=difficulty, seed=seed).as_record()
        for i in range(n)
    ]
