"""Knights & Knaves statements: trees, truth tables as bitmasks, brute-force solutions.

A statement is a nested tuple in the notation of mem-kk-logic (Xie et al. 2024, arXiv 2410.23123)
and of Logic-RL's parquet ``statements`` field:

- ``("telling-truth", p)``: person ``p`` is a knight; ``("lying", p)``: person ``p`` is a knave
- ``("not", s)``, ``("and", s1, ..., sk)``, ``("or", s1, ..., sk)`` (k >= 2),
  ``("->", a, b)`` (if a then b), ``("<=>", a, b)`` (a if and only if b)

Brute force over all 2^n role assignments is done at once with Python ints as bit sets: bit ``a``
of a mask stands for assignment ``a``, in which person ``p`` is a knight iff bit ``p`` of ``a`` is
set. A statement's truth table is then one int, and/or/not are ``&``/``|``/xor with the full mask,
and the puzzle's solutions are the set bits of AND_i (knight_i <=> statement_i).
"""

from __future__ import annotations

import ast
import functools
from typing import Any, Sequence

KNIGHT = "telling-truth"
KNAVE = "lying"
LEAVES = (KNIGHT, KNAVE)
OPERATORS = ("not", "and", "or", "->", "<=>")
MAX_PEOPLE = 8
#: The longest ``statements`` text parsed: eight people's depth-2 statements take about 2,000
#: characters; a longer field is refused before ``ast`` sees it.
MAX_STATEMENTS_CHARS = 100_000

Statement = tuple


@functools.lru_cache(maxsize=None)
def knight_masks(n_people: int) -> tuple[int, ...]:
    """``masks[p]`` = the set of assignments (bits over 0..2^n-1) in which person ``p`` is a
    knight."""
    return tuple(sum(1 << a for a in range(1 << n_people) if (a >> p) & 1) for p in range(n_people))


def full_mask(n_people: int) -> int:
    return (1 << (1 << n_people)) - 1


def truth_mask(stmt: Statement, n_people: int) -> int:
    """The truth table of ``stmt`` over all 2^n assignments, as a bit set."""
    kmasks, full = knight_masks(n_people), full_mask(n_people)

    def go(s: Statement) -> int:
        op = s[0]
        if op == KNIGHT:
            return kmasks[s[1]]
        if op == KNAVE:
            return full ^ kmasks[s[1]]
        if op == "not":
            return full ^ go(s[1])
        if op == "and":
            m = full
            for c in s[1:]:
                m &= go(c)
            return m
        if op == "or":
            m = 0
            for c in s[1:]:
                m |= go(c)
            return m
        if op == "->":
            return (full ^ go(s[1])) | go(s[2])
        if op == "<=>":
            return full ^ (go(s[1]) ^ go(s[2]))
        raise ValueError(f"unknown statement operator {op!r}")

    return go(stmt)


def evaluate(stmt: Statement, knights: Sequence[bool]) -> bool:
    """Truth of ``stmt`` when ``knights[p]`` says whether person ``p`` is a knight (reference
    evaluator, one assignment at a time; the bitmask path must agree with it)."""
    op = stmt[0]
    if op == KNIGHT:
        return bool(knights[stmt[1]])
    if op == KNAVE:
        return not knights[stmt[1]]
    if op == "not":
        return not evaluate(stmt[1], knights)
    if op == "and":
        return all(evaluate(c, knights) for c in stmt[1:])
    if op == "or":
        return any(evaluate(c, knights) for c in stmt[1:])
    if op == "->":
        return (not evaluate(stmt[1], knights)) or evaluate(stmt[2], knights)
    if op == "<=>":
        return evaluate(stmt[1], knights) == evaluate(stmt[2], knights)
    raise ValueError(f"unknown statement operator {op!r}")


def consistency_mask(statements: Sequence[Statement]) -> int:
    """Assignments in which every knight's statement is true and every knave's is false."""
    n = len(statements)
    kmasks, full = knight_masks(n), full_mask(n)
    mask = full
    for p, s in enumerate(statements):
        mask &= full ^ (kmasks[p] ^ truth_mask(s, n))
    return mask


def assignment_of(bit: int, n_people: int) -> tuple[bool, ...]:
    """Assignment number ``bit`` as a tuple of knight flags (person 0 first)."""
    return tuple(bool((bit >> p) & 1) for p in range(n_people))


def solutions(statements: Sequence[Statement]) -> list[tuple[bool, ...]]:
    """Every assignment consistent with the statements (``True`` = knight), in bit order."""
    mask, n = consistency_mask(statements), len(statements)
    out = []
    while mask:
        low = mask & -mask
        out.append(assignment_of(low.bit_length() - 1, n))
        mask ^= low
    return out


def referenced_people(stmt: Statement) -> set[int]:
    if stmt[0] in LEAVES:
        return {stmt[1]}
    out: set[int] = set()
    for c in stmt[1:]:
        out |= referenced_people(c)
    return out


def statement_depth(stmt: Statement) -> int:
    """Leaves have depth 1; mem-kk-logic's ``depth_constraint`` bounds this."""
    if stmt[0] in LEAVES:
        return 1
    return 1 + max(statement_depth(c) for c in stmt[1:])


def validate_statement(stmt: Any, n_people: int) -> Statement:
    """Check that ``stmt`` is a well-formed statement over people 0..n-1; return it as tuples."""
    if not isinstance(stmt, (tuple, list)) or not stmt:
        raise ValueError(f"statement must be a non-empty tuple, got {stmt!r}")
    op = stmt[0]
    if op in LEAVES:
        if len(stmt) != 2 or not isinstance(stmt[1], int) or isinstance(stmt[1], bool):
            raise ValueError(f"leaf must be (op, person_index), got {stmt!r}")
        if not 0 <= stmt[1] < n_people:
            raise ValueError(f"person index {stmt[1]} out of range for {n_people} people")
        return (op, stmt[1])
    arity = {"not": (1, 1), "and": (2, None), "or": (2, None), "->": (2, 2), "<=>": (2, 2)}
    if op not in arity:
        raise ValueError(f"unknown statement operator {op!r}")
    lo, hi = arity[op]
    k = len(stmt) - 1
    if k < lo or (hi is not None and k > hi):
        raise ValueError(f"operator {op!r} takes {lo}..{hi or 'any'} operands, got {k}")
    return (op, *(validate_statement(c, n_people) for c in stmt[1:]))


def parse_statements_repr(text: str, n_people: int) -> tuple[Statement, ...]:
    """Parse Logic-RL's ``statements`` field (a Python tuple literal) safely.

    ``ast.literal_eval`` only builds literals, so no code runs; the result is validated. Text it
    cannot take (too long, nested past the parser's limit, an integer past Python's int-string
    limit, not a literal) raises ``ValueError`` like any malformed statement.
    """
    if len(text) > MAX_STATEMENTS_CHARS:
        raise ValueError(
            f"statements text of {len(text)} characters (at most {MAX_STATEMENTS_CHARS})"
        )
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as e:
        reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise ValueError(f"statements are not a tuple literal ({reason})") from None
    if not isinstance(value, (tuple, list)) or len(value) != n_people:
        raise ValueError(f"expected {n_people} statements, got {value!r:.200}")
    return tuple(validate_statement(s, n_people) for s in value)
