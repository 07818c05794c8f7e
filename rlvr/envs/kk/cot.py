"""A chain of thought derived from a solver trace (warm-start data for supervised fine-tuning).

The solver keeps the set ``C`` of role assignments still possible (a bitmask, see
:mod:`rlvr.envs.kk.logic`) and repeats two deductions until neither applies:

1. the speaker's role is known, so their statement is true (knight) or false (knave): restrict
   ``C`` to that; an empty ``C`` is a contradiction, newly fixed roles are reported;
2. the speaker's role is unknown but their statement is already true (false) on all of ``C``:
   the speaker is a knight (knave).

When stuck it assumes the first undecided person is a knight, then a knave, backtracking on a
contradiction (depth-first, like the case analysis in mem-kk-logic's ``cot_repeat_steps``).
"""

from __future__ import annotations

from typing import Sequence

from rlvr.envs.kk.logic import Statement, full_mask, knight_masks, truth_mask
from rlvr.envs.kk.render import render_statement, solution_text_format

COT_HEAD = (
    "Let's think step by step, by considering whether each person is lying and if that leads to "
    "contradiction."
)


def _role(k: bool) -> str:
    return "a knight" if k else "a knave"


def solve_with_trace(
    statements: Sequence[Statement], names: Sequence[str]
) -> tuple[tuple[bool, ...] | None, list[str]]:
    """Solve by deduction and case analysis; return (first solution found or None, trace lines)."""
    n = len(statements)
    kmasks, full = knight_masks(n), full_mask(n)
    truths = [truth_mask(s, n) for s in statements]
    quoted = [f'"{render_statement(s, names)}"' for s in statements]
    lines: list[str] = []

    def known(c: int) -> dict[int, bool]:
        out = {}
        for p in range(n):
            if c & kmasks[p] == c:
                out[p] = True
            elif c & kmasks[p] == 0:
                out[p] = False
        return out

    def propagate(c: int, used: frozenset[int]) -> tuple[int, frozenset[int]]:
        changed = True
        while changed and c:
            changed = False
            roles = known(c)
            for p in range(n):
                if p in used:
                    continue
                t = truths[p]
                if p in roles:
                    new = c & (t if roles[p] else full ^ t)
                    used = used | {p}
                    changed = True
                    if not new:
                        lines.append(
                            f"{names[p]} is {_role(roles[p])}, but {names[p]}'s statement "
                            f"{quoted[p]} "
                            f"would then be {'false' if roles[p] else 'true'}. Contradiction."
                        )
                        return 0, used
                    fixed = {q: r for q, r in known(new).items() if q not in roles}
                    if fixed:
                        why = "true" if roles[p] else "false"
                        what = ", and ".join(
                            f"{names[q]} is {_role(r)}" for q, r in sorted(fixed.items())
                        )
                        lines.append(
                            f"Since {names[p]} is {_role(roles[p])}, "
                            f"{quoted[p]} is {why}, so {what}."
                        )
                    c = new
                    break
                if c & t == c or c & t == 0:
                    value = c & t == c
                    lines.append(
                        f"{names[p]}'s statement {quoted[p]} is "
                        f"{'true' if value else 'false'} given what we know, "
                        f"so {names[p]} is {_role(value)}."
                    )
                    c &= kmasks[p] if value else full ^ kmasks[p]
                    used = used | {p}
                    changed = True
                    break
        return c, used

    def search(c: int, used: frozenset[int]) -> int:
        c, used = propagate(c, used)
        if not c:
            return 0
        roles = known(c)
        if len(roles) == n:
            # Every role is fixed; the statements not used yet must still hold.
            for p in range(n):
                if p not in used and bool(c & truths[p]) != roles[p]:
                    lines.append(f"{names[p]}'s statement {quoted[p]} does not fit. Contradiction.")
                    return 0
            return c
        p = next(q for q in range(n) if q not in roles)
        for k in (True, False):
            lines.append(f"Assume {names[p]} is {_role(k)}.")
            found = search(c & (kmasks[p] if k else full ^ kmasks[p]), used)
            if found:
                return found
            lines.append(f"So {names[p]} cannot be {_role(k)}.")
        return 0

    found = search(full, frozenset())
    if not found:
        return None, lines
    bit = found.bit_length() - 1
    return tuple(bool((bit >> p) & 1) for p in range(n)), lines


def solver_cot(statements: Sequence[Statement], names: Sequence[str]) -> str:
    """The chain of thought text: head, deduction lines, and the conclusion in answer layout."""
    solution, lines = solve_with_trace(statements, names)
    if solution is None:
        return "\n".join(
            [COT_HEAD, *lines, "Every case leads to a contradiction: the puzzle has no solution."]
        )
    return "\n".join(
        [
            COT_HEAD,
            *lines,
            "This leads to a feasible solution:",
            solution_text_format(names, solution),
        ]
    )
