"""``rlvr/SearchQA-v0``: multi-turn question answering with a search tool (docs/design.md §3).

One episode = one question. Each ``step(response)`` takes one assistant turn:

- a closed ``<answer>...</answer>`` (closing after any ``</search>``) ends the episode
  (``terminated``) with the EM reward of ``reward.score`` over every response of the episode;
- otherwise a closed ``<search> q </search>`` runs the last such query and returns
  ``"\\n\\n<information>Doc 1(Title: "t") text\\nDoc 2(...) ...</information>\\n\\n"`` (Search-R1's
  ``_passages2string`` layout), the document text cut to ``max_obs_chars``; reward 0;
- anything else (no tags, unterminated tags) gets Search-R1's corrective observation;
- the ``max_turns``-th turn without an answer truncates the episode (``truncated``); its search,
  if any, is not run, and the reward is ``score`` of what the policy wrote: 0, since a closed
  answer would have terminated the episode; ``info`` still carries ``em``/``f1``/``reason``.

Empty and very long queries, retriever failures (a service that is down) all become an
``<information>`` observation that says what happened; the episode loop never raises on text.
``info["transcript"]`` is every response and observation so far (the prompt excluded) and
``info["tool_spans"]`` the ``[start, end)`` character spans of it written by the env, so a trainer
can mask observation tokens out of the loss.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym

from rlvr.envs.base import MAX_RESPONSE_CHARS, AnyText, coerce_text, drop_oversized
from rlvr.envs.prompts import chat_messages, render_prompt
from rlvr.envs.searchqa.client import MAX_QUERY_CHARS, RemoteRetriever
from rlvr.envs.searchqa.data import QAItem, load_qa
from rlvr.envs.searchqa.index import build_index, load_index
from rlvr.envs.searchqa.reward import (
    INVALID_ACTION_MESSAGE,
    MAX_ANSWER_TAGS,
    last_tag_content,
    score,
)
from rlvr.envs.searchqa.synthetic import synthetic_task

#: Search-R1's prompt (``scripts/data_process/nq_search.py``, ``make_prefix``), kept word for word
#: so that the paper profile sees the prompt the checkpoints were trained on.
SEARCH_R1_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times as "
    "your want. If you find no further external knowledge needed, you can directly provide the "
    "answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>. Question: {question}\n"
)


def format_passages(hits) -> str:
    """Search-R1's layout, ``Doc i(Title: "t") text`` per hit, one per line.

    As ``LLMGenerationManager._passages2string`` in Search-R1's ``search_r1/llm_agent/
    generation.py`` (commit a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06): the title is the first
    line of the corpus ``contents`` field, which keeps its double quotes (``'"Title"\\ntext'``),
    the text is the rest; the observation is the joined lines, stripped.
    """
    lines = []
    for i, h in enumerate(hits, 1):
        title, *rest = h.passage.contents.split("\n")
        text = "\n".join(rest)
        lines.append(f"Doc {i}(Title: {title}) {text}")
    return "\n".join(lines)


def information_block(body: str, max_chars: int | None = None) -> str:
    """Wrap tool text as an observation; a body longer than ``max_chars`` is cut and ends
    in "..."."""
    if max_chars is not None and len(body) > max_chars:
        body = body[: max(0, max_chars - 4)].rstrip() + " ..."
    return f"\n\n<information>{body.strip()}</information>\n\n"


def parse_action(response: str) -> tuple[str, str]:
    """``("answer", text)``, ``("search", query)`` or ``("invalid", "")`` for one assistant turn.

    Whichever closed block ends last decides; with nested or repeated opening tags the content is
    what follows the last opening tag before that closing tag.
    """
    if response.rfind("</answer>") > response.rfind("</search>"):
        content = last_tag_content(response, "answer")
        if content is not None:
            return "answer", content.strip()
    content = last_tag_content(response, "search")
    if content is not None:
        return "search", content.strip()
    content = last_tag_content(response, "answer")
    if content is not None:
        return "answer", content.strip()
    return "invalid", ""


#: The retrieval service's usual address: what an export gives an env for a public QA set that
#: names no retriever (exporting resets tasks and never searches, so it is never contacted).
EXPORT_RETRIEVER = "http://127.0.0.1:8000"


def export_kwargs(kwargs: dict) -> dict:
    """``kwargs`` with ``EXPORT_RETRIEVER`` when a dataset other than the synthetic one has no
    corpus, index or retriever."""
    if kwargs.get("dataset") not in (None, "synthetic") and not any(
        kwargs.get(k) for k in ("corpus", "index_path", "retriever")
    ):
        return {**kwargs, "retriever": EXPORT_RETRIEVER}
    return kwargs


@functools.lru_cache(maxsize=8)
def _synthetic_retriever(seed: int, world_items: tuple, encoder: str):
    corpus, _ = synthetic_task(seed, "train", **dict(world_items))
    return build_index(corpus, encoder=encoder, kind="flat", progress=False)


class SearchQAEnv(gym.Env):
    """Search-augmented QA. See the module docstring for the turn rules.

    Args:
        dataset: "synthetic" (world, corpus and questions built in-process), a name from
            ``data.load_qa`` ("nq", "hotpotqa", "2wiki", "musique", "bamboogle", "triviaqa",
            "popqa", "flashrag:<subset>"), a .jsonl/.parquet path, or a list of ``QAItem``.
        corpus: passages (JSONL path or list) to index in-process; the synthetic corpus by default
            for ``dataset="synthetic"``.
        retriever: "lexical" | "minilm" | "e5" | another sentence-transformers model (encoder of an
            in-process flat index), the URL of a Search-R1 retrieval service, or any object with
            ``search(queries, k)``.
        index_path: a folder written by ``rlvr index``; used instead of building an index.
        synthetic: keyword arguments of ``synthetic.make_world`` (n_people, n_cities, ...);
            ``seed`` picks the synthetic world.
        hops: keep only questions of this many hops (1, 2, or a list); the synthetic task
            records hops, the public QA sets do not.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        dataset: Any = "synthetic",
        corpus: Any = None,
        retriever: Any = "lexical",
        index_path: str | None = None,
        topk: int = 3,
        max_turns: int = 4,
        max_obs_chars: int | None = 3000,
        template: str = "qwen",
        split: str = "train",
        seed: int = 0,
        synthetic: dict | None = None,
        max_answer_tags: int = MAX_ANSWER_TAGS,
        max_prompt_chars: int = 20_000,
        render_mode: str | None = None,
        hops: int | list[int] | None = None,
    ):
        if int(topk) < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if int(max_turns) < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if max_obs_chars is not None and int(max_obs_chars) < 16:
            raise ValueError(f"max_obs_chars must be >= 16 or None, got {max_obs_chars}")
        render_prompt("", "", template)  # validates the template name
        self.topk, self.max_turns, self.template = int(topk), int(max_turns), template
        self.max_obs_chars = None if max_obs_chars is None else int(max_obs_chars)
        self.max_answer_tags = int(max_answer_tags)
        self.items = self._load_items(dataset, split, seed, synthetic or {})
        if hops is not None:  # keep only single-hop (1) or two-hop (2) questions, like n_people
            wanted = {int(h) for h in (hops if isinstance(hops, (list, tuple)) else [hops])}
            self.items = [it for it in self.items if it.meta.get("hops") in wanted]
            if not self.items:
                raise ValueError(
                    f"hops: no questions with hops in {sorted(wanted)} "
                    f"(dataset {dataset!r}; only the synthetic task records hops)"
                )
        if not self.items:
            raise ValueError(f"dataset {dataset!r} split {split!r} has no questions")
        self.items = drop_oversized(
            self.items, lambda it: self._render(it)[0], max_prompt_chars, repr(dataset)[:200]
        )
        self.retriever = self._make_retriever(
            dataset, corpus, retriever, index_path, seed, synthetic or {}
        )
        obs_len = max(max_prompt_chars, (self.max_obs_chars or MAX_RESPONSE_CHARS) + 1000)
        self.observation_space = AnyText(obs_len)
        self.action_space = AnyText(MAX_RESPONSE_CHARS)
        self.render_mode = render_mode
        self._item: QAItem | None = None
        self._prompt = ""

    def _render(self, item: QAItem) -> tuple[str, str]:
        """The prompt of ``item`` and its user message."""
        user = SEARCH_R1_PROMPT.format(question=item.question)
        return render_prompt(None, user, self.template), user

    @property
    def num_tasks(self) -> int:
        """Questions in the split; ``reset`` accepts ``options["index"]`` in ``[0, num_tasks)``."""
        return len(self.items)

    # -- construction ---------------------------------------------------------------------------
    @staticmethod
    def _load_items(dataset, split, seed, synthetic) -> list[QAItem]:
        if isinstance(dataset, (list, tuple)):
            return [
                it if isinstance(it, QAItem) else QAItem(str(it["question"]), tuple(it["answers"]))
                for it in dataset
            ]
        if dataset == "synthetic":
            return synthetic_task(seed, split, **synthetic)[1]
        return load_qa(dataset, split)

    @staticmethod
    def _make_retriever(dataset, corpus, retriever, index_path, seed, synthetic):
        if hasattr(retriever, "search"):
            return retriever
        if not isinstance(retriever, str):
            raise TypeError(
                f"retriever must be a name, a URL or an object with search(), "
                f"got {type(retriever).__name__}"
            )
        if retriever.startswith(("http://", "https://")):
            return RemoteRetriever(retriever)
        if index_path is not None:
            return load_index(index_path, corpus=corpus)
        if corpus is None:
            if dataset != "synthetic":
                raise ValueError(
                    f"dataset {dataset!r} needs passages to search: pass corpus=<passages.jsonl>, "
                    "index_path=<folder from `rlvr index`> "
                    "or retriever=<URL of a retrieval service>"
                )
            return _synthetic_retriever(int(seed), tuple(sorted(synthetic.items())), retriever)
        return build_index(corpus, encoder=retriever, kind="flat", progress=False)

    # -- gymnasium API ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        if "index" in options:
            index = options["index"]
            if (
                isinstance(index, bool)
                or not isinstance(index, int)
                or not 0 <= index < len(self.items)
            ):
                raise ValueError(
                    f"options['index'] must be an int in [0, {len(self.items)}), got {index!r}"
                )
        else:
            index = int(self.np_random.integers(len(self.items)))
        self._item = self.items[index]
        self._prompt, user = self._render(self._item)
        self._responses: list[str] = []
        self._transcript = ""
        self._tool_spans: list[tuple[int, int]] = []
        self._turn = self._n_searches = 0
        self._done = False
        info = {
            "ground_truth": list(self._item.answers),
            "messages": chat_messages(None, user),
            "question": self._item.question,
            "index": index,
            "id": self._item.id,
            "source": self._item.source,
            **{k: v for k, v in self._item.meta.items() if k == "hops"},
        }
        return self._prompt, info

    def _search_observation(self, query: str) -> tuple[str, str]:
        """Observation for one query and an error string ("" when the search ran)."""
        if not query:
            return information_block(
                "Empty search query: write the query between <search> and </search>."
            ), "empty query"
        note = ""
        if len(query) > MAX_QUERY_CHARS:
            query = query[:MAX_QUERY_CHARS]
            note = f"(Query cut to its first {MAX_QUERY_CHARS} characters.)\n"
        try:
            hits = self.retriever.search([query], self.topk)[0]
        except Exception as e:  # a failed search is an observation, never a crash of the episode
            return information_block(f"Search failed: {e}"), f"{type(e).__name__}: {e}"
        body = note + (format_passages(hits) if hits else "No documents found.")
        return information_block(body, self.max_obs_chars), ""

    def step(self, action):
        if self._item is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset()")
        response = coerce_text(action)
        self._turn += 1
        self._responses.append(response)
        self._transcript += response
        kind, content = parse_action(response)
        terminated = kind == "answer"
        truncated = not terminated and self._turn >= self.max_turns
        obs, error = "", ""
        if kind == "search" and not truncated:
            obs, error = self._search_observation(content)
            self._n_searches += not error
        elif kind == "invalid" and not truncated:
            obs = INVALID_ACTION_MESSAGE
        if obs:
            start = len(self._transcript)
            self._transcript += obs
            self._tool_spans.append((start, len(self._transcript)))
        self._done = terminated or truncated
        result = score(
            "".join(self._responses), self._item.answers, max_answer_tags=self.max_answer_tags
        )
        reward = float(result.reward) if self._done else 0.0
        info = {
            "ground_truth": list(self._item.answers),
            **result.as_info(),
            "correct": bool(result.correct) if self._done else False,
            "em": result.components["em"] if self._done else 0.0,
            "f1": result.components["f1"] if self._done else 0.0,
            "format": result.components["format"] if self._done else 0.0,
            "n_searches": self._n_searches,
            "turn": self._turn,
            "action": kind,
            "query": content if kind == "search" else "",
            "search_error": error,
            "transcript": self._transcript,
            "tool_spans": list(self._tool_spans),
        }
        if not self._done:
            info["reason"] = "episode continues"
        elif truncated:
            info["reason"] = (
                f"max_turns={self.max_turns} reached without an answer; " + result.reason
            )
        return obs, reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "ansi":
            return self._prompt + getattr(self, "_transcript", "")
        return None
