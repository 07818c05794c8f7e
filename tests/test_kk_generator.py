"""K&K generator: uniqueness, rendering round-trip, determinism across processes, splits, CoT."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.envs.kk import (
    canonical_key,
    generate_puzzle,
    make_split,
    parse_quiz,
    parse_statement,
    render_statement,
)
from rlvr.envs.kk.cot import solve_with_trace, solver_cot
from rlvr.envs.kk.generator import NAME_POOL, held_out_keys, puzzle_at
from rlvr.envs.kk.logic import (
    KNAVE,
    LEAVES,
    evaluate,
    parse_statements_repr,
    solutions,
    statement_depth,
    truth_mask,
)


def _max_width(s) -> int:
    if s[0] in LEAVES:
        return 0
    return max([len(s) - 1] + [_max_width(c) for c in s[1:]])


def _self_paradox(s, speaker) -> bool:
    if s[0] in LEAVES:
        return s == (KNAVE, speaker)
    return any(_self_paradox(c, speaker) for c in s[1:])


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    n=st.integers(2, 8),
    depth=st.integers(2, 4),
    width=st.integers(2, 3),
)
def test_generated_puzzle_is_unique_and_round_trips(seed, n, depth, width):
    p = generate_puzzle(seed, n, depth, width)
    assert len(p.names) == len(set(p.names)) == n and set(p.names) <= set(NAME_POOL)
    # Exactly one solution, checked by the reference evaluator over all 2^n assignments.
    consistent = [
        a
        for a in itertools.product([True, False], repeat=n)
        if all(evaluate(s, a) == a[i] for i, s in enumerate(p.statements))
    ]
    assert consistent == [p.solution] == solutions(p.statements)
    # The rendered text parses back to the same trees, hence to the same unique solution.
    parsed = parse_quiz(p.quiz, p.names)
    assert parsed == p.statements and solutions(parsed) == [p.solution]
    for i, s in enumerate(p.statements):
        assert statement_depth(s) <= depth and _max_width(s) <= max(width, 2)
        assert not _self_paradox(s, i)
    assert p.ground_truth == {
        nm: ("knight" if k else "knave") for nm, k in zip(p.names, p.solution)
    }


def _trees(n):
    leaf = st.tuples(st.sampled_from(LEAVES), st.integers(0, n - 1))
    return st.recursive(
        leaf,
        lambda sub: st.one_of(
            st.tuples(st.just("not"), sub),
            st.builds(
                lambda op, xs: (op, *xs),
                st.sampled_from(["and", "or"]),
                st.lists(sub, min_size=2, max_size=4),
            ),
            st.builds(lambda op, a, b: (op, a, b), st.sampled_from(["->", "<=>"]), sub, sub),
        ),
        max_leaves=12,
    )


@settings(max_examples=200, deadline=None)
@given(_trees(4))
def test_any_tree_renders_unambiguously(tree):
    names = ["Zoey", "Liam", "Ava", "Oscar"]
    text = render_statement(tree, names)
    assert parse_statement(text, names) == tree
    assert truth_mask(tree, 4) == sum(
        1 << a for a in range(16) if evaluate(tree, [bool((a >> p) & 1) for p in range(4)])
    )


def test_nested_rendering_reads_naturally():
    names = ["Zoey", "Liam"]
    tree = (
        "not",
        ("and", ("telling-truth", 0), ("->", ("lying", 1), ("not", ("telling-truth", 0)))),
    )
    assert render_statement(tree, names) == (
        "It is not the case that (Zoey is a knight and (if Liam is a knave then Zoey is not a "
        "knight))"
    )


def _fingerprint(cases) -> list:
    return [
        [p.names, repr(p.statements), p.quiz, p.solution]
        for p in (generate_puzzle(*c) for c in cases)
    ]


CASES = [
    (s, n, d, w)
    for s, n, d, w in [
        (0, 2, 2, 2),
        (1, 3, 2, 2),
        (7, 5, 2, 2),
        (123456789, 7, 3, 3),
        (2**63, 8, 2, 2),
    ]
]


def test_same_puzzle_in_another_process():
    code = (
        "import json; from rlvr.envs.kk import generate_puzzle\n"
        f"cases = {CASES!r}\n"
        "print(json.dumps([[p.names, repr(p.statements), p.quiz, p.solution] "
        "for p in (generate_puzzle(*c) for c in cases)]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert json.loads(out) == json.loads(json.dumps(_fingerprint(CASES)))


def test_generator_output_is_pinned():
    # Pins the sampler so that an accidental change (and a different puzzle on another machine)
    # is caught: the digest of 50 quizzes for fixed seeds.
    text = "\n".join(generate_puzzle(s, 2 + s % 7).quiz for s in range(50))
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == PINNED_DIGEST


PINNED_DIGEST = "5273f6f7a2ee2a8b"


@pytest.mark.parametrize(
    "kwargs,word",
    [
        ({"n_people": 1}, "n_people"),
        ({"n_people": 9}, "n_people"),
        ({"depth": 1}, "depth"),
        ({"width": 1}, "width"),
        ({"n_people": 3.0}, "n_people"),
    ],
)
def test_bad_parameters_name_the_parameter(kwargs, word):
    with pytest.raises(ValueError, match=word):
        generate_puzzle(0, **{"n_people": 3, **kwargs})


@pytest.mark.parametrize("n", [2, 3])
def test_train_never_contains_test_puzzles(n):
    test = make_split(n, 100, "test")
    keys = {canonical_key(p) for p in test}
    assert keys == held_out_keys(n)
    train = make_split(n, 300, "train")
    assert not keys & {canonical_key(p) for p in train}
    assert make_split(n, 5, "train") == train[:5]  # deterministic


def test_split_errors():
    with pytest.raises(ValueError, match="split"):
        puzzle_at("dev", 0)
    with pytest.raises(ValueError, match="test_size"):
        puzzle_at("test", 100)
    with pytest.raises(ValueError, match="index"):
        puzzle_at("train", -1)


def test_canonical_key_ignores_names_and_operand_order():
    a = (
        ("and", ("telling-truth", 1), ("lying", 2)),
        ("telling-truth", 0),
        ("<=>", ("lying", 0), ("telling-truth", 1)),
    )
    b = (
        ("and", ("lying", 2), ("telling-truth", 1)),
        ("telling-truth", 0),
        ("<=>", ("telling-truth", 1), ("lying", 0)),
    )
    c = (
        ("->", ("lying", 2), ("telling-truth", 1)),
        ("telling-truth", 0),
        ("<=>", ("telling-truth", 1), ("lying", 0)),
    )
    assert canonical_key(a) == canonical_key(b) != canonical_key(c)
    p = generate_puzzle(5, 3)
    q = generate_puzzle(5, 3, names=["Xavier", "Quinn", "Ruby"])
    assert canonical_key(p) == canonical_key(q) and p.quiz != q.quiz


def test_cot_reaches_the_solution():
    for seed in range(60):
        p = generate_puzzle(seed, 2 + seed % 7, depth=2 + seed % 2)
        sol, lines = solve_with_trace(p.statements, p.names)
        assert sol == p.solution and lines
        text = solver_cot(p.statements, p.names)
        assert text.endswith(p.solution_text_format)
    # A paradox ("I am a knave" spoken by a lone person) has no solution.
    sol, _ = solve_with_trace((("lying", 0), ("telling-truth", 1)), ["Zoey", "Liam"])
    assert sol is None


def test_parse_statements_repr_is_safe():
    assert parse_statements_repr("(('telling-truth', 1), ('not', ('lying', 0)))", 2)[1] == (
        "not",
        ("lying", 0),
    )
    for bad in [
        "__import__('os')",
        "(('telling-truth', 5), ('lying', 0))",
        "(('xor', ('lying', 0)),)",
    ]:
        with pytest.raises(ValueError):
            parse_statements_repr(bad, 2)


def test_wide_nodes_over_few_people_terminate():
    # and/or over leaves can only use 2n - 1 distinct leaves; a wider limit must not hang.
    for seed in range(10):
        p = generate_puzzle(seed, 2, depth=2, width=6)
        assert solutions(p.statements) == [p.solution]
