"""Warm-start data: prompts from the environments and target responses built from their answers.

Prompts come from the environments themselves (``reset`` on the ``train`` split), so a base
model is trained on exactly the text the RL trainer will show it; a task's ``settings`` are the
environment's keyword arguments plus the trace options below. Targets:

- ``kk``: after the prefilled ``<think>``, ``think`` decides the thought: ``"names"`` (default)
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
- ``math``: the synthetic generator's worked solution, ending in ``\\boxed{answer}``. With
  ``slip_frac`` a share of the solutions box a near miss instead (``slipped_solution``): noisy
  supervision, like the imperfect text a pretrained model imitates.
- ``searchqa``: the turns of a correct episode: ``<search> entity </search>``, the environment's
  ``<information>`` observation (not trainable), for two-hop questions a second search on the
  bridge entity (the passage named in the first result that holds the answer), then
  ``<answer> gold </answer>``. Questions whose answer the searches do not retrieve are skipped:
  such a trace would pair a search that missed with the right answer. With ``direct_frac`` a
  share of the traces answers at once instead (``direct_trace``); they come from worlds other
  than the RL world, so on the RL world such an answer is a guess.

An example is a list of ``(text, trainable)`` segments (``rlvr.models.sft``).
"""

from __future__ import annotations

import itertools
import queue
import random
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs import ENVS, env_spec, load
from rlvr.envs.kk.generator import NAME_POOL
from rlvr.envs.kk.render import join_names
from rlvr.envs.prompts import render_prompt
from rlvr.envs.searchqa.synthetic import synthetic_task
from rlvr.models.sft import Segment

KK_THINK = ("none", "names", "numbered", "lines", "solver")

#: The tiny profile's settings per task: the ``plain`` template and no system turn. A model
#: trained from scratch learns the response format from the warm start, not from instructions,
#: and training cost is linear in tokens: the shortest system prompt (46 tokens) would be ~30 %
#: of a 3-person K&K example.
TINY_SETTINGS: dict[str, dict[str, Any]] = {
    "kk": {
        "n_people": [2, 3, 4, 5],
        "template": "plain",
        "prefill_think": True,
        "system_prompt": "",
        "think": "names",
    },
    "math": {
        "dataset": "synthetic",
        "difficulty": [1, 2, 3, 4, 5],
        "template": "plain",
        "system_prompt": "",
    },
    "searchqa": {"dataset": "synthetic", "template": "plain", "topk": 2, "max_turns": 3},
}


@dataclass(frozen=True)
class EvalItem:
    prompt: str
    ground_truth: Any
    group: str
    info: dict[str, Any] = field(default_factory=dict)


def take(it, n: int) -> list:
    return list(itertools.islice(it, n))


def epochs(examples: list, seed: int = 0) -> Iterator:
    """Endless passes over ``examples``, each in a fresh seeded order."""
    if not examples:
        raise ValueError("epochs() needs at least one example")
    rng = random.Random(seed)
    while True:
        order = list(range(len(examples)))
        rng.shuffle(order)
        for i in order:
            yield examples[i]


def prefetch(it: Iterator, size: int = 256) -> Iterator:
    """Yield ``it``'s items in order, produced ahead by one background thread.

    Generating examples is pure Python (sympy for math) while a training step is mostly torch
    kernels that release the GIL, so the two overlap. One producer keeps the order (and so the
    build) deterministic.
    """
    buf: queue.Queue = queue.Queue(maxsize=size)
    done = object()
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                buf.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for item in it:
                if not put(item):
                    return
        except Exception as e:  # handed to the consumer, which re-raises it
            put(e)
            return
        put(done)

    thread = threading.Thread(target=produce, daemon=True, name="rlvr-prefetch")
    thread.start()
    try:
        while True:
            item = buf.get()
            if item is done:
                return
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        stop.set()


def _share(settings: dict[str, Any], key: str) -> float:
    """The trace option ``key``: a share of the examples, in [0, 1) (default 0)."""
    value = float(settings.get(key, 0.0))
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{key} must be in [0, 1), got {value}")
    return value


@dataclass(frozen=True)
class TraceBuilder:
    """The warm start of one task (``EnvSpec.traces``): an endless seeded stream of training
    examples, the held-out items a base is checked on, the trace options (``settings`` keys that
    are not env arguments) and the response budget of that check (``rlvr.models.evaluate``)."""

    examples: Callable[[dict[str, Any], int, str], Iterator[list[Segment]]]
    eval_items: Callable[[dict[str, Any], int, str], list[EvalItem]]
    options: tuple[str, ...] = ()
    max_new_tokens: int = 256


def tasks() -> list[str]:
    """The registered environments with a warm start."""
    return [name for name, spec in ENVS.items() if spec.traces is not None]


def builder(task: str) -> TraceBuilder:
    if task not in tasks():
        raise ValueError(f"task must be one of {tuple(tasks())}, got {task!r}")
    return load(env_spec(task).traces)


def env_kwargs(task: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The environment's keyword arguments in ``settings`` (trace options removed)."""
    options = builder(task).options
    return {k: v for k, v in settings.items() if k not in options}


def make_env(task: str, settings: dict[str, Any], split: str = "train"):
    """The environment itself (not a Gymnasium wrapper: traces read its attributes)."""
    return env_spec(task).entry()(split=split, **env_kwargs(task, settings))


# -- K&K ------------------------------------------------------------------------------------------
def kk_response(info: dict[str, Any], think: str = "names", prefilled_think: bool = True) -> str:
    """The target response for a K&K reset ``info`` (Logic-RL's answer layout)."""
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
    return f"{head}{thought}</think><answer>{info['solution_text_format']}</answer>"


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


def _as_list(value) -> list:
    """A setting that takes one size or several (``3`` or ``[2, 3, 4]``) as a list."""
    return [value] if isinstance(value, int) else list(value)


def _kk_examples(settings: dict[str, Any], seed: int, split: str) -> Iterator[list[Segment]]:
    env = make_env("kk", settings, split)
    think = settings.get("think", "names")
    prefill = bool(settings.get("prefill_think", True))
    copy_aux = float(settings.get("copy_aux", 0.0))
    if not 0.0 <= copy_aux < 1.0:
        raise ValueError(f"copy_aux must be in [0, 1), got {copy_aux}")
    sizes = _as_list(settings.get("n_people", 3))
    # The copies' list lengths (default: the puzzles' sizes); longer lists than the puzzles have
    # leave a model no positional shortcut (first name, name after "and") to copy them with.
    copy_sizes = _as_list(settings.get("copy_sizes", sizes))
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
    for count in itertools.count():
        if count < copy_first or (copy_aux and rng.random() < copy_aux):
            yield kk_copy_example(
                rng, copy_sizes, settings.get("template", "qwen"), copy_roles, copy_think, prefill
            )
            continue
        prompt, info = env.reset(seed=rng.getrandbits(62))
        yield [(prompt, False), (kk_response(info, think, prefill), True)]


def _grouped_eval_items(
    task: str, key: str, values, settings: dict[str, Any], n: int, split: str
) -> list[EvalItem]:
    """Items ``0..n-1`` of the ``split`` for each value of the env kwarg ``key`` (one group
    each)."""
    values = _as_list(values)
    items = []
    for value in dict.fromkeys(values):
        env = make_env(task, {**settings, key: value}, split)
        for i in range(n):
            prompt, info = env.reset(seed=0, options={"index": i})
            items.append(EvalItem(prompt, info["ground_truth"], f"{task}{value}", {key: value}))
    return items


def _kk_eval_items(settings: dict[str, Any], n: int, split: str) -> list[EvalItem]:
    return _grouped_eval_items("kk", "n_people", settings.get("n_people", 3), settings, n, split)


# -- math ---------------------------------------------------------------------------------------
_MATH_INDEX_SPACE = 2**31


_BOXED_END = re.compile(r"\\boxed\{(-?)(\d+)(/\d+)?\}\.$")


def slipped_solution(solution: str, rng: random.Random) -> str:
    """``solution`` with its boxed answer off by a small step: ``= 36. ... \\boxed{36}.`` ->
    ``\\boxed{38}.`` (a fraction's numerator moves: ``82/63`` -> ``81/63``).

    The worked steps stay right; only the copy into the box slips, by 1-3 and never to zero, so
    the slipped answer is always wrong. The answer text is the generator's own (``_num``), parsed
    with a regular expression, never evaluated.
    """
    m = _BOXED_END.search(solution)
    if m is None:
        raise ValueError(f"no integer or fraction boxed at the end of {solution!r}")
    value = int(m.group(1) + m.group(2))
    step = rng.choice((-3, -2, -1, 1, 2, 3))
    if value + step == 0:
        step = -step
    return f"{solution[: m.start()]}\\boxed{{{value + step}{m.group(3) or ''}}}."


def _math_examples(settings: dict[str, Any], seed: int, split: str) -> Iterator[list[Segment]]:
    """Worked solutions; with ``slip_frac=p`` a share ``p`` box a near miss (``slipped_solution``).

    Why slips: at this scale the base's math errors are missing arithmetic, which RL cannot teach
    in minutes (measured: GRPO gained +1.9 points of avg@4 on the clean base, whatever the
    learning rate, batch shape or base strength; docs/tiny_models.md). A base that also slips, as
    a pretrained model imitating imperfect text does, has a behaviour the reward can remove.
    """
    env = make_env("math", settings, split)
    if not env.synthetic:
        raise ValueError("math warm-start traces need dataset='synthetic' (worked solutions)")
    slip_frac = _share(settings, "slip_frac")
    rng = random.Random(seed)
    while True:
        index = rng.randrange(_MATH_INDEX_SPACE)
        prompt, _ = env.reset(seed=0, options={"index": index})
        solution = env.record(index)["solution"]
        if slip_frac and rng.random() < slip_frac:
            solution = slipped_solution(solution, rng)
        yield [(prompt, False), (solution, True)]


def _math_eval_items(settings: dict[str, Any], n: int, split: str) -> list[EvalItem]:
    levels = settings.get("difficulty") or [1, 2, 3, 4, 5]
    return _grouped_eval_items("math", "difficulty", levels, settings, n, split)


# -- search QA ----------------------------------------------------------------------------------
def _bridge(first_obs: str, gold: str, passages: dict[str, Any]) -> str | None:
    """The title of a passage named in ``first_obs`` (not a retrieved title) whose text holds
    ``gold``."""
    for title, passage in passages.items():
        if f'(Title: "{title}")' not in first_obs and title in first_obs and gold in passage.text:
            return title
    return None


def direct_trace(env, index: int) -> list[Segment]:
    """An episode that answers item ``index`` of ``env`` at once, without searching.

    It stands for what a pretrained model does when it answers from memory. Drawn from worlds
    other than the RL world, the gold answer is a guess there: on the RL world such episodes
    earn almost no reward (measured: greedy EM 0.02 on world 0 for a base whose greedy episodes
    never search), which gives RL a reason to search.
    """
    prompt, _ = env.reset(seed=0, options={"index": index})
    return [(prompt, False), (f"<answer> {env.items[index].answers[0]} </answer>", True)]


def query_copy_example(env, index: int) -> list[Segment]:
    """An auxiliary copy example: item ``index``'s question -> its first query, the entity.

    A searching episode earns reward only if the query spells the question's entity exactly,
    and small bases miscopy it (measured on three tiny-searchqa builds: the query equals the
    entity in 67 / 41 / 0 % of their searching episodes). These examples stop after the query
    (about half a full trace's tokens) and train only the entity's tokens: ``<search>`` is
    context, so the choice between searching and answering at once is left to the traces.
    No preset uses them: at 0.5 they fixed one base's copy and worsened another's
    (results/tiny/SEARCHQA_DIAGNOSIS.md).
    """
    prompt, _ = env.reset(seed=0, options={"index": index})
    return [
        (prompt, False),
        ("<search>", False),
        (f" {env.items[index].meta['entity']} </search>", True),
    ]


def search_trace(env, index: int, passages: dict[str, Any]) -> list[Segment] | None:
    """The segments of a correct episode for item ``index`` of ``env`` (None: not retrievable)."""
    prompt, info = env.reset(seed=0, options={"index": index})
    item = env.items[index]
    gold = item.answers[0]
    segments: list[Segment] = [(prompt, False)]
    turn = f"<search> {item.meta['entity']} </search>"
    obs = env.step(turn)[0]
    segments += [(turn, True), (obs, False)]
    if info.get("hops", 1) > 1:
        bridge = _bridge(obs, gold, passages)
        if bridge is None:
            return None
        turn = f"<search> {bridge} </search>"
        second = env.step(turn)[0]
        segments += [(turn, True), (second, False)]
        obs += second
    if gold not in obs:
        return None
    answer = f"<answer> {gold} </answer>"
    if not env.step(answer)[4]["correct"]:
        return None
    segments.append((answer, True))
    return segments


def reading_example(env, index: int, passages: dict[str, Any]) -> list[Segment] | None:
    """An auxiliary reading example: item ``index``'s correct episode with only the answer
    trained, after a short prompt (the question alone, without Search-R1's instruction).

    Answering means reading the gold answer out of the retrieved passage that is about the
    question's entity, next to a distractor. In a full trace that answer is a few of its ~900
    characters, most of them the instruction every prompt repeats; these examples (~40 % of a
    trace's tokens) give the reading more of the warm start's gradient for its cost. The
    searches and observations are context, so they leave the choice between searching and
    answering, and the queries, to the traces. None where ``search_trace`` is.
    """
    trace = search_trace(env, index, passages)
    if trace is None:
        return None
    prompt = render_prompt(None, f"Question: {env.items[index].question}\n", env.template)
    return [(prompt, False), *((text, False) for text, _ in trace[1:-1]), trace[-1]]


#: Consecutive warm-start traces drawn from one synthetic world when ``trace_worlds > 0``.
TRACES_PER_WORLD = 32


def _search_passages(settings: dict[str, Any]) -> dict[str, Any]:
    corpus, _ = synthetic_task(
        int(settings.get("seed", 0)), "train", **dict(settings.get("synthetic") or {})
    )
    return {p.title: p for p in corpus}


def _searchqa_examples(settings: dict[str, Any], seed: int, split: str) -> Iterator[list[Segment]]:
    """Correct episodes; with ``trace_worlds=N`` each drawn from one of N other synthetic worlds.

    ``trace_worlds=0``: traces come from the env's own world (``seed``, the world RL trains and
    evaluates on). ``N > 0``: world seeds ``seed+1 .. seed+N``, never the env's own world. The
    warm start trains on observation tokens too (``context_loss_weight``), so on one world a
    small model memorises its ~280 passages and then answers that world's test questions
    without reading them (measured: a one-world base, EM 0.67 on its own world's test split,
    0.01 on another world's). Many worlds leave reading the passage as the only way to answer.
    A world is built (~65 ms) when drawn and gives ``TRACES_PER_WORLD`` consecutive traces.

    ``direct_frac=p`` (needs ``trace_worlds > 0``) replaces a share ``p`` of the traces by
    answer-only episodes (``direct_trace``): a base that searches only part of the time, so RL
    has a tool-use share to raise (with ``p=0`` the base always searches, measured tool use 1.00).
    ``copy_aux=q`` replaces a share ``q`` of the examples, before that choice, by query copies
    (``query_copy_example``); ``read_aux=r`` a share ``r`` by reading examples
    (``reading_example``).
    """
    if settings.get("dataset", "synthetic") != "synthetic":
        raise ValueError("search QA warm-start traces need dataset='synthetic'")
    n_worlds = int(settings.get("trace_worlds", 0))
    if n_worlds < 0:
        raise ValueError(f"trace_worlds must be >= 0, got {n_worlds}")
    direct_frac = _share(settings, "direct_frac")
    copy_aux = _share(settings, "copy_aux")
    read_aux = _share(settings, "read_aux")
    if copy_aux + read_aux >= 1.0:
        raise ValueError(f"copy_aux + read_aux must be < 1, got {copy_aux} + {read_aux}")
    if direct_frac and not n_worlds:
        raise ValueError(
            "direct_frac needs trace_worlds > 0: on the RL world itself the gold "
            "answers of answer-only traces would be memorised facts, not guesses"
        )
    home = int(settings.get("seed", 0))
    rng = random.Random(seed)
    world_seed = home
    misses = 0
    while True:
        if n_worlds:  # one world at a time (~11 MB each), TRACES_PER_WORLD traces from it
            world_seed = home + 1 + rng.randrange(n_worlds)
        ws = {**env_kwargs("searchqa", settings), "seed": world_seed}
        env, passages = make_env("searchqa", ws, split), _search_passages(ws)
        for _ in itertools.islice(itertools.count(), TRACES_PER_WORLD if n_worlds else None):
            index = rng.randrange(len(env.items))
            aux = rng.random() if copy_aux or read_aux else 1.0
            if aux < copy_aux:
                yield query_copy_example(env, index)
                continue
            if aux < copy_aux + read_aux:
                trace = reading_example(env, index, passages)
            elif direct_frac and rng.random() < direct_frac:
                yield direct_trace(env, index)
                continue
            else:
                trace = search_trace(env, index, passages)
            if trace is not None:
                misses = 0
                yield trace
            else:
                misses += 1
                if misses > 1000:
                    raise RuntimeError(
                        "no retrievable search QA item in 1000 draws: check topk/retriever"
                    )


def _searchqa_eval_items(settings: dict[str, Any], n: int, split: str) -> list[EvalItem]:
    env = make_env("searchqa", settings, split)
    items = []
    for i in range(min(n, len(env.items))):
        prompt, info = env.reset(seed=0, options={"index": i})
        items.append(
            EvalItem(
                prompt, info["ground_truth"], "searchqa", {"index": i, "hops": info.get("hops", 1)}
            )
        )
    return items


# -- the builders (``EnvSpec.traces``) ------------------------------------------------------------
#: K&K answers of 5 people are 42 tokens, worked math solutions up to ~70; search QA's budget is
#: the whole episode, observations included.
KK = TraceBuilder(
    _kk_examples,
    _kk_eval_items,
    ("think", "copy_aux", "copy_sizes", "copy_roles", "copy_think", "copy_first"),
    max_new_tokens=96,
)
MATH = TraceBuilder(_math_examples, _math_eval_items, ("slip_frac",), max_new_tokens=160)
SEARCHQA = TraceBuilder(
    _searchqa_examples,
    _searchqa_eval_items,
    ("trace_worlds", "direct_frac", "copy_aux", "read_aux"),
    max_new_tokens=512,
)


def example_stream(
    task: str, settings: dict[str, Any], seed: int = 0, split: str = "train"
) -> Iterator[list[Segment]]:
    """An endless, seeded stream of training examples for ``task``."""
    return builder(task).examples(settings, seed, split)


def tokenizer_texts(
    task: str, settings: dict[str, Any], n: int, seed: int = 0, wrap=lambda stream: stream
) -> list[str]:
    """``n`` full texts (prompt + response) of ``task`` for training a tokenizer (``wrap``: an
    iterator around the example stream, a progress bar)."""
    stream = wrap(example_stream(task, settings, seed))
    return ["".join(text for text, _ in ex) for ex in take(stream, n)]


def eval_items(task: str, settings: dict[str, Any], n: int, split: str = "test") -> list[EvalItem]:
    """The first ``n`` held-out items per group (K&K: per size; math: per level; search QA: all
    questions together) of ``task``."""
    return builder(task).eval_items(settings, n, split)
