"""K&K's warm start (``EnvSpec.traces``, ``rlvr.envs.warmstart``): puzzles from the environment
and target responses built from their answers.

After the prefilled ``<think>``, ``think`` decides the thought: ``"names"`` (default)
restates the inhabitants (``The inhabitants are A, B, and C.``), ``"none"`` leaves it empty,
``"solver"`` is the env's solver chain of thought (40-80+ tokens; measured, it gives a
weaker base at equal wall time); then ``</think><answer>(1) A is a knight\\n...</answer>``.
Why ``names``: measured here, a 1M model trained from scratch copies a short numbered list
almost perfectly but fails to pick the i-th name out of the full quiz, where every name recurs
in the statements (3-person answers had their names in order 11 % of the time after 3,000
steps). Restating the list first is a contiguous copy (what induction heads do best), and the
answer lines then copy from a short list right before them; from 4 people on that second copy
still fails (docs/tiny_models.md, "K&K by puzzle size"). ``"numbered"`` (``(1) A, (2) B``) and
``"lines"`` (``(1) A\\n(2) B``) number the restated names as the answer lines do; measured,
both copy worse than ``names``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

from rlvr.envs.kk.generator import NAME_POOL
from rlvr.envs.kk.render import join_names
from rlvr.envs.prompts import render_prompt
from rlvr.envs.warmstart import (
    EvalItem,
    Segment,
    TraceBuilder,
    as_list,
    grouped_eval_items,
    make_env,
    share,
)

KK_THINK = ("none", "names", "numbered", "lines", "solver")


#: What a slipped answer gets wrong (``data.slip``): ``role``, the last inhabitant's role
#: flipped; ``roles``, every role flipped (the complement of the solution); ``name``, the last
#: line names the inhabitant before it (``(3) B is a knave`` for C's line), the miscopy a base
#: warm-started on plain copies made from 4 people on (docs/tiny_models.md, "K&K by puzzle size").
SLIPS = ("role", "roles", "name")


def _slip(kind: str) -> str:
    if kind not in SLIPS:
        raise ValueError(f"slip must be one of {SLIPS}, got {kind!r}")
    return kind


def _flip(line: str) -> str:
    for role, other in (("knight", "knave"), ("knave", "knight")):
        if line.endswith(f" is a {role}"):
            return f"{line[: -len(role)]}{other}"
    raise ValueError(f"no role at the end of the answer line {line!r}")


def _renamed(line: str, before: str) -> str:
    """``line`` (``(3) C is a knave``) with the name of ``before`` (``(2) B is a knight``)."""
    number, _, rest = line.partition(") ")
    name = before.partition(") ")[2].rpartition(" is a ")[0]
    if not rest or not name:
        raise ValueError(f"not answer lines: {before!r}, {line!r}")
    return f"{number}) {name} is a {rest.rpartition(' is a ')[2]}"


def slipped_answer(answer: str, kind: str = "role") -> str:
    """Logic-RL's answer layout with one consistent mistake (``SLIPS``), never a random line, so a
    base trained on a share of them above one half prefers it at greedy decoding."""
    rows = answer.split("\n")
    if _slip(kind) == "roles":
        return "\n".join(_flip(row) for row in rows)
    if kind == "name":
        if len(rows) < 2:
            raise ValueError("a name slip needs two answer lines or more")
        return "\n".join([*rows[:-1], _renamed(rows[-1], rows[-2])])
    return "\n".join([*rows[:-1], _flip(rows[-1])])


def unslipped(response: str, ground_truth: dict[str, str], settings: dict[str, Any]) -> str:
    """``response`` with a name slip read back (``TraceBuilder.unslip``): under ``slip=name``,
    a last answer line that names the inhabitant before the last, as the line before it does,
    is read as the last inhabitant's. Any other response, or another slip, is left as it is."""
    if not share(settings, "slip_frac") or _slip(settings.get("slip", "role")) != "name":
        return response
    names = list(ground_truth)
    lines = response.split("\n")
    n = len(names)
    if n < 2 or len(lines) < 2:
        return response
    last, before = f"({n}) {names[-2]} is a ", f"({n - 1}) {names[-2]} is a "
    if lines[-1].startswith(last) and before in lines[-2]:
        lines[-1] = f"({n}) {names[-1]} is a {lines[-1][len(last) :]}"
    return "\n".join(lines)


def kk_response(
    info: dict[str, Any],
    think: str = "names",
    prefilled_think: bool = True,
    slip: str | None = None,
) -> str:
    """The target response for a K&K reset ``info`` (Logic-RL's answer layout); ``slip`` (one of
    ``SLIPS``) makes its answer a near miss (``slipped_answer``)."""
    if think not in KK_THINK:
        raise ValueError(f"think must be one of {KK_THINK}, got {think!r}")
    head = "" if prefilled_think else "<think>"
    thought = {
        "none": "",
        "names": f"The inhabitants are {join_names(info['names'])}.",
        "numbered": "The inhabitants are "
        + ", ".join(f"({i}) {name}" for i, name in enumerate(info["names"], 1))
        + ".",
        "lines": "\n".join(f"({i}) {name}" for i, name in enumerate(info["names"], 1)) + "\n",
        "solver": f"{info['cot']}\n",
    }[think]
    answer = info["solution_text_format"]
    if slip:
        answer = slipped_answer(answer, slip)
    return f"{head}{thought}</think><answer>{answer}</answer>"


def kk_copy_example(
    rng: random.Random,
    sizes: list[int],
    template: str,
    roles: bool = False,
    think: bool = False,
    prefill: bool = True,
) -> list[Segment]:
    """An auxiliary copy example: the quiz's "You meet ..." sentence -> its names, numbered.

    Answering K&K means copying the inhabitants' names, in order, into ``(i) Name is a ...``
    lines. A model trained from scratch learns that copy circuit late (its response loss sits at
    the no-copy plateau for tens of thousands of full examples); these ~25-token examples teach
    it at a fifth of the cost of a full one.

    ``roles=True`` lays the copy out as an answer: ``(1) A is a knight\n(2) B is a knave ...``,
    the numbers and names trained, the roles drawn at random and untrained (context, so they
    carry ``context_loss_weight`` and no copy signal). Plain copies train name after name with
    nothing between; in a puzzle's answer `` is a knight`` stands between two names, and a base
    warm-started on plain copies repeated the previous line's name there from 4 people on
    (docs/tiny_models.md, "K&K by puzzle size").

    ``think=True`` (with ``roles``) lays the whole response out as a puzzle's: the prefilled
    ``<think>`` (when ``prefill``), the restated names (``The inhabitants are A, B, and C.``,
    trained), ``</think><answer>``, the answer lines, ``</answer>``. The base draws that fail
    K&K by size miscopy the list already in that think block, which only full puzzles trained.
    Measured, it made every base draw worse (docs/tiny_models.md, "K&K by puzzle size"): no
    preset uses it.
    """
    n = rng.choice(sizes)
    names = rng.sample(NAME_POOL, n)
    meet = f"You meet {n} inhabitants: {join_names(names)}."
    if not roles:
        lines = "\n".join(f"({i}) {name}" for i, name in enumerate(names, 1))
        return [(render_prompt(None, meet, template), False), (lines, True)]
    head = "<think>" if think and prefill else ""
    segments: list[Segment] = [(render_prompt(None, meet, template, prefill=head), False)]
    if think:
        opening = "" if prefill else "<think>"
        segments.append(
            (f"{opening}The inhabitants are {join_names(names)}.</think><answer>", True)
        )
    for i, name in enumerate(names, 1):
        role = rng.choice(("knight", "knave"))
        segments.append((f"({i}) {name}", True))
        segments.append((f" is a {role}" + ("\n" if i < n else ""), False))
    if think:
        segments.append(("</answer>", True))
    return segments


def _kk_examples(settings: dict[str, Any], seed: int, split: str) -> Iterator[list[Segment]]:
    if settings.get("answer_prefill"):
        raise ValueError(
            "K&K warm-start traces write the whole answer: build without answer_prefill"
        )
    env = make_env("kk", settings, split)
    think = settings.get("think", "names")
    prefill = bool(settings.get("prefill_think", True))
    copy_aux = share(settings, "copy_aux")
    slip_frac = share(settings, "slip_frac")
    slip_kind = _slip(settings.get("slip", "role"))
    sizes = as_list(settings.get("n_people", 3))
    # The copies' list lengths (default: the puzzles' sizes); longer lists than the puzzles have
    # leave a model no positional shortcut (first name, name after "and") to copy them with.
    copy_sizes = as_list(settings.get("copy_sizes", sizes))
    copy_roles = bool(settings.get("copy_roles", False))
    copy_think = bool(settings.get("copy_think", False))
    if copy_think and not copy_roles:
        raise ValueError("copy_think lays a copy out as a puzzle's answer: it needs copy_roles")
    # A curriculum: the stream's first ``copy_first`` examples are all copies, so the copy
    # circuit forms before the puzzles' statements (where every name recurs) compete for it.
    copy_first = int(settings.get("copy_first", 0))
    if copy_first < 0:
        raise ValueError(f"copy_first must be >= 0, got {copy_first}")
    rng = random.Random(seed)
    # Slips draw from their own stream: the puzzles and copies are the clean warm start's.
    slip_rng = random.Random(f"slip:{seed}")
    for count in itertools.count():
        if count < copy_first or (copy_aux and rng.random() < copy_aux):
            yield kk_copy_example(
                rng, copy_sizes, settings.get("template", "qwen"), copy_roles, copy_think, prefill
            )
            continue
        prompt, info = env.reset(seed=rng.getrandbits(62))
        slip = slip_kind if slip_frac and slip_rng.random() < slip_frac else None
        yield [(prompt, False), (kk_response(info, think, prefill, slip), True)]


def _kk_eval_items(settings: dict[str, Any], n: int, split: str) -> list[EvalItem]:
    return grouped_eval_items("kk", "n_people", settings.get("n_people", 3), settings, n, split)


#: A 5-person answer is 42 tokens.
KK = TraceBuilder(
    _kk_examples,
    _kk_eval_items,
    (
        "think",
        "copy_aux",
        "copy_sizes",
        "copy_roles",
        "copy_think",
        "copy_first",
        "slip_frac",
        "slip",
    ),
    max_new_tokens=96,
    tiny={
        "n_people": [2, 3, 4, 5],
        "template": "plain",
        "prefill_think": True,
        "system_prompt": "",
        "think": "names",
    },
    unslip=unslipped,
)
