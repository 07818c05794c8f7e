"""Search QA's warm start (``EnvSpec.traces``, ``rlvr.envs.warmstart``): the turns of a correct
episode: ``<search> entity </search>``, the environment's ``<information>`` observation (not
trainable), for two-hop questions a second search on the bridge entity (the passage named in the
first result that holds the answer), then ``<answer> gold </answer>``. Questions whose answer the
searches do not retrieve are skipped: such a trace would pair a search that missed with the right
answer. With ``direct_frac`` a share of the traces answers at once instead (``direct_trace``);
they come from worlds other than the RL world, so on the RL world such an answer is a guess.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

from rlvr.envs.prompts import render_prompt
from rlvr.envs.searchqa.synthetic import synthetic_task
from rlvr.envs.warmstart import EvalItem, Segment, TraceBuilder, env_kwargs, make_env, share


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
    direct_frac = share(settings, "direct_frac")
    copy_aux = share(settings, "copy_aux")
    read_aux = share(settings, "read_aux")
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


#: The budget is the whole episode, observations included.
SEARCHQA = TraceBuilder(
    _searchqa_examples,
    _searchqa_eval_items,
    ("trace_worlds", "direct_frac", "copy_aux", "read_aux"),
    max_new_tokens=512,
    tiny={"dataset": "synthetic", "template": "plain", "topk": 2, "max_turns": 3},
)
