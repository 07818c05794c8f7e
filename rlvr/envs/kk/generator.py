"""Seeded Knights & Knaves puzzle generator with brute-force uniqueness (mem-kk-logic's sampler).

Sampling follows mem-kk-logic's ``KKProblemSampler`` (Xie et al. 2024, arXiv 2410.23123): at each
node a fair six-sided die picks leaf / not / and / or / -> / <=>, a leaf is forced at depth 1,
and/or take 2..width distinct operands, a speaker never says the paradox "I am a knave", and a
puzzle is kept only when exactly one role assignment is consistent. Truth tables are bitmasks
(:mod:`rlvr.envs.kk.logic`), so the brute force over 2^n assignments costs a few int operations
per node and an assignment prefix with no consistent completion is rejected at once (which does
not change the distribution of accepted puzzles).

Determinism: everything is drawn from one ``random.Random(seed)`` (Mersenne Twister, identical on
every platform and Python 3 version); split seeds come from BLAKE2b, never from ``hash()``.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass
from typing import Sequence

from rlvr.envs.kk.logic import (
    KNAVE,
    KNIGHT,
    LEAVES,
    MAX_PEOPLE,
    Statement,
    assignment_of,
    full_mask,
    knight_masks,
)
from rlvr.envs.kk.render import SPEECH_VERBS, render_quiz, solution_text_format

NAME_POOL = (
    "Aiden",
    "Amelia",
    "Aria",
    "Aurora",
    "Ava",
    "Avery",
    "Benjamin",
    "Caleb",
    "Charlotte",
    "Chloe",
    "Daniel",
    "David",
    "Elena",
    "Elijah",
    "Ella",
    "Emily",
    "Emma",
    "Ethan",
    "Evelyn",
    "Felix",
    "Grace",
    "Hannah",
    "Harper",
    "Henry",
    "Hudson",
    "Isaac",
    "Isabella",
    "Jack",
    "Jacob",
    "James",
    "Jasper",
    "Leo",
    "Liam",
    "Lily",
    "Logan",
    "Lucas",
    "Luna",
    "Mason",
    "Mateo",
    "Mia",
    "Michael",
    "Nora",
    "Oliver",
    "Olivia",
    "Oscar",
    "Owen",
    "Penelope",
    "Quinn",
    "Riley",
    "Ruby",
    "Samuel",
    "Scarlett",
    "Sebastian",
    "Sofia",
    "Sophia",
    "Stella",
    "Theo",
    "Victoria",
    "Violet",
    "William",
    "Xavier",
    "Zoey",
)
SPLITS = ("train", "test")
#: Test puzzles per (n_people, depth, width): like the K&K and Logic-RL test sets (100 per size).
DEFAULT_TEST_SIZE = 100
_MAX_TRAIN_ATTEMPTS = 10_000
#: Acceptance is above 1% for every allowed size/depth/width; this only bounds a pathological loop.
_MAX_SAMPLE_ATTEMPTS = 1_000_000


@dataclass(frozen=True)
class Puzzle:
    """One puzzle. ``solution[p]`` is True when person ``p`` is a knight."""

    n_people: int
    names: tuple[str, ...]
    statements: tuple[Statement, ...]
    solution: tuple[bool, ...]
    quiz: str
    seed: int
    depth: int
    width: int

    @property
    def ground_truth(self) -> dict[str, str]:
        return {n: ("knight" if k else "knave") for n, k in zip(self.names, self.solution)}

    @property
    def solution_text_format(self) -> str:
        return solution_text_format(self.names, self.solution)


def check_params(n_people: int, depth: int, width: int) -> None:
    # depth 1 (leaves only) cannot give a unique solution: every leaf says "i and j have the same
    # role" or "different roles", which stays true when every role is flipped.
    for name, value, lo in (("n_people", n_people, 2), ("depth", depth, 2), ("width", width, 2)):
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
    if n_people > MAX_PEOPLE:
        raise ValueError(f"n_people must be <= {MAX_PEOPLE}, got {n_people}")


def _sample_statement(
    r, n: int, speaker: int, depth: int, width: int, kmasks, full
) -> tuple[Statement, int]:
    """One statement tree and its truth mask (mem-kk-logic ``_sample_statement``)."""
    dice = int(r() * 6)
    if depth == 1 or dice == 0:
        while True:
            lying = r() < 0.5
            p = int(r() * n)
            if not (lying and p == speaker):  # "I am a knave" has no consistent reading
                break
        return ((KNAVE, p), full ^ kmasks[p]) if lying else ((KNIGHT, p), kmasks[p])
    if dice == 1:
        s, m = _sample_statement(r, n, speaker, depth - 1, width, kmasks, full)
        return ("not", s), full ^ m
    if dice <= 3:
        op, k = ("and", "or")[dice - 2], 2 + int(r() * (width - 1))
    else:
        op, k = ("->", "<=>")[dice - 4], 2
    if depth == 2:  # operands are leaves, and a speaker has only 2n - 1 distinct ones
        k = min(k, 2 * n - 1)
    children: list[Statement] = []
    masks: list[int] = []
    while len(children) < k:  # operands of one node are distinct
        s, m = _sample_statement(r, n, speaker, depth - 1, width, kmasks, full)
        if s not in children:
            children.append(s)
            masks.append(m)
    if op == "and":
        m = full
        for x in masks:
            m &= x
    elif op == "or":
        m = 0
        for x in masks:
            m |= x
    elif op == "->":
        m = (full ^ masks[0]) | masks[1]
    else:
        m = full ^ (masks[0] ^ masks[1])
    return (op, *children), m


def sample_statements(
    r, n_people: int, depth: int, width: int
) -> tuple[tuple[Statement, ...], tuple[bool, ...]]:
    """Draw statement sets from ``r`` (a ``random.Random().random``) until exactly one solution."""
    kmasks, full = knight_masks(n_people), full_mask(n_people)
    for _ in range(_MAX_SAMPLE_ATTEMPTS):
        consistent, stmts = full, []
        for p in range(n_people):
            s, m = _sample_statement(r, n_people, p, depth, width, kmasks, full)
            consistent &= full ^ (kmasks[p] ^ m)
            if not consistent:
                break
            stmts.append(s)
        else:
            if consistent & (consistent - 1) == 0:  # exactly one bit: a unique solution
                return tuple(stmts), assignment_of(consistent.bit_length() - 1, n_people)
    raise RuntimeError(
        f"no uniquely solvable puzzle in {_MAX_SAMPLE_ATTEMPTS} draws "
        f"(n_people={n_people}, depth={depth}, width={width})"
    )


def generate_puzzle(
    seed: int, n_people: int = 3, depth: int = 2, width: int = 2, names: Sequence[str] | None = None
) -> Puzzle:
    """The puzzle for ``(seed, n_people, depth, width)``: the same on every machine and process."""
    check_params(n_people, depth, width)
    rng = random.Random(seed)
    statements, solution = sample_statements(rng.random, n_people, depth, width)
    if names is None:
        names = rng.sample(NAME_POOL, n_people)
    elif len(names) != n_people or len(set(names)) != n_people:
        raise ValueError(f"names must be {n_people} distinct names, got {names!r}")
    names = tuple(names)
    verb_ids = [int(rng.random() * len(SPEECH_VERBS)) for _ in range(n_people)]
    return Puzzle(
        n_people=n_people,
        names=names,
        statements=statements,
        solution=solution,
        quiz=render_quiz(names, statements, verb_ids),
        seed=seed,
        depth=depth,
        width=width,
    )


# -- canonical keys and splits --------------------------------------------------------------------
def _canonical(s: Statement) -> Statement:
    if s[0] in LEAVES:
        return s
    children = tuple(_canonical(c) for c in s[1:])
    if s[0] in ("and", "or", "<=>"):  # commutative: operand order does not change the puzzle
        children = tuple(sorted(children, key=repr))
    return (s[0], *children)


def canonical_key(puzzle: Puzzle | Sequence[Statement]) -> str:
    """A string that is equal for puzzles with the same statements up to names, wording and the
    order of commutative operands. Used to keep test puzzles out of the train stream."""
    statements = puzzle.statements if isinstance(puzzle, Puzzle) else puzzle
    return repr(tuple(_canonical(s) for s in statements))


def split_seed(
    split: str,
    n_people: int,
    index: int,
    depth: int = 2,
    width: int = 2,
    base_seed: int = 0,
    attempt: int = 0,
) -> int:
    """A 64-bit seed from (split, n_people, depth, width, base_seed, index, attempt) via BLAKE2b."""
    text = f"rlvr.kk|{split}|{n_people}|{depth}|{width}|{base_seed}|{index}|{attempt}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _check_split(split: str, index: int, test_size: int) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not isinstance(index, int) or index < 0:
        raise ValueError(f"index must be a non-negative int, got {index!r}")
    if split == "test" and index >= test_size:
        raise ValueError(
            f"test index {index} out of range: the test split has test_size={test_size} puzzles"
        )


@functools.lru_cache(maxsize=64)
def held_out_keys(
    n_people: int,
    depth: int = 2,
    width: int = 2,
    base_seed: int = 0,
    test_size: int = DEFAULT_TEST_SIZE,
) -> frozenset[str]:
    """Canonical keys of the procedural test split (excluded from train)."""
    return frozenset(
        canonical_key(
            generate_puzzle(
                split_seed("test", n_people, i, depth, width, base_seed), n_people, depth, width
            )
        )
        for i in range(test_size)
    )


def puzzle_at(
    split: str,
    index: int,
    n_people: int = 3,
    depth: int = 2,
    width: int = 2,
    base_seed: int = 0,
    test_size: int = DEFAULT_TEST_SIZE,
) -> Puzzle:
    """Puzzle ``index`` of a split. The test split has ``test_size`` puzzles; the train split is
    unbounded and never yields a puzzle whose canonical key is in the test split."""
    check_params(n_people, depth, width)
    _check_split(split, index, test_size)
    if split == "test":
        return generate_puzzle(
            split_seed("test", n_people, index, depth, width, base_seed), n_people, depth, width
        )
    excluded = held_out_keys(n_people, depth, width, base_seed, test_size)
    for attempt in range(_MAX_TRAIN_ATTEMPTS):
        seed = split_seed("train", n_people, index, depth, width, base_seed, attempt)
        puzzle = generate_puzzle(seed, n_people, depth, width)
        if canonical_key(puzzle) not in excluded:
            return puzzle
    raise ValueError(
        f"no train puzzle outside the test split after {_MAX_TRAIN_ATTEMPTS} draws "
        f"(n_people={n_people}, depth={depth}, width={width}, test_size={test_size}): "
        "lower test_size"
    )


def make_split(
    n_people: int,
    n: int,
    split: str = "test",
    seed: int = 0,
    depth: int = 2,
    width: int = 2,
    test_size: int = DEFAULT_TEST_SIZE,
) -> list[Puzzle]:
    """The first ``n`` puzzles of a split (for evaluation: ``make_split(5, 100, "test")``)."""
    if split == "test" and n > test_size:
        raise ValueError(f"n={n} exceeds test_size={test_size}; pass a larger test_size")
    return [puzzle_at(split, i, n_people, depth, width, seed, test_size) for i in range(n)]
