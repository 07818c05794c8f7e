"""The environment contract shared by every rlvr environment (docs/design.md §3).

Every reward is a pure function ``score(response, ground_truth) -> Score`` first; an environment
is a thin Gymnasium wrapper around a task source and that function. Environments know nothing
about trainers.
"""

from __future__ import annotations

import abc
import copy
import string
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym
from gymnasium import spaces

from rlvr.config import check_interval

#: Responses longer than this are cut before any parsing (a 1 MB response must stay cheap).
MAX_RESPONSE_CHARS = 100_000


@dataclass(frozen=True)
class Score:
    """What a reward function returns.

    ``components`` holds the reward breakdown (e.g. ``format`` and ``answer`` for K&K) and sums
    to ``reward`` where the task defines the reward as a sum. ``reason`` says why a response
    scored low ("" when correct); ``parsed`` is the answer as the scorer read it.
    """

    reward: float
    correct: bool
    components: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    parsed: Any = None

    def as_info(self) -> dict[str, Any]:
        """The Score flattened into an env ``info`` dict."""
        return {
            "correct": self.correct,
            "reward_components": dict(self.components),
            **{f"reward/{k}": v for k, v in self.components.items()},
            "reason": self.reason,
            "parsed": self.parsed,
        }


@dataclass(frozen=True)
class Tool:
    """A tool a multi-turn env understands as text: the call ``name(argument=value)`` is the
    env step ``template.format(value)`` (e.g. search QA's ``<search> {} </search>``), and the
    tool's result is that step's observation. Adapters to stacks that call tools by name build
    their tool schemas from ``description``, ``argument_doc`` and ``returns``.
    """

    name: str
    argument: str
    template: str
    description: str
    argument_doc: str
    returns: str

    @property
    def end(self) -> str:
        """The text that closes a call (``</search>``): what counts calls in a response."""
        return self.template.rsplit("{}", 1)[-1].strip()

    def action(self, value: Any) -> str:
        """The env action of one call (``value`` as text, cut like any response)."""
        return self.template.format(coerce_text(value).strip())


#: ``info`` keys of a multi-turn env whose tools call a service: ``{tool name: calls sent to it
#: so far this episode}`` and ``{tool name: [one line per call that failed, in order]}``. A
#: failure is the infrastructure's fault (the service down, unreachable, timed out or answering
#: nonsense), never the policy's (an empty query is an ordinary observation and no failure):
#: trainers count them (``search/failed``) and stop a run past ``max_tool_failure_rate``.
TOOL_CALLS, TOOL_FAILURES = "tool_calls", "tool_failures"
#: Default of ``max_tool_failure_rate`` (native ``TrainConfig``, verl ``rlvr`` section): a step
#: whose tool calls fail more often than this stops the run. A service that is down fails every
#: call and one a worker cannot reach fails that worker's share; 5% stops those at once and lets
#: an odd timeout pass (each failed search is an episode trained on a useless observation).
MAX_TOOL_FAILURE_RATE = 0.05


def check_failure_rate(value: Any, key: str = "max_tool_failure_rate") -> float:
    """The one check of ``max_tool_failure_rate`` (native and verl): a fraction in [0, 1]
    (0: stop at the first failure; 1: never stop)."""
    check_interval(key, value, "[0, 1]")
    return float(value)


class AnyText(spaces.Text):
    """A ``Text`` space that contains any Python string within its length bounds.

    Gymnasium's ``Text`` checks every character against a finite charset; prompts and model
    responses hold arbitrary Unicode, so membership here is by length only. Sampling draws from
    printable ASCII, which is enough for ``check_env`` and random-agent baselines.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


def drop_oversized(records: Sequence, prompt_of: Callable[[Any], str], max_chars: int, source):
    """The dataset ``records`` whose prompt (``prompt_of(record)``) fits the env's
    ``max_prompt_chars``, in order. The others are left out when the dataset is read, with one
    warning counting them: a prompt past the observation space would be tokenized whole only to
    be cut to ``max_prompt_tokens``. ``ValueError`` when none fits."""
    kept = [r for r in records if len(prompt_of(r)) <= max_chars]
    if not kept and records:
        raise ValueError(
            f"dataset {source}: the prompt of every one of its {len(records)} rows is longer than "
            f"max_prompt_chars={max_chars}"
        )
    if len(kept) < len(records):
        warnings.warn(
            f"dataset {source}: {len(records) - len(kept)} of {len(records)} rows left out, their "
            f"prompt longer than max_prompt_chars={max_chars}",
            RuntimeWarning,
            stacklevel=3,
        )
    return kept


def int_sizes(value: Any, name: str, low: int, high: int) -> list[int]:
    """``value`` (an int or a non-empty list of ints in ``low..high``) as a list; a
    ``ValueError`` naming ``name`` otherwise."""
    sizes = [value] if isinstance(value, int) else list(value)
    if not sizes or any(
        not isinstance(n, int) or isinstance(n, bool) or not low <= n <= high for n in sizes
    ):
        raise ValueError(
            f"{name} must be an int or a non-empty list of ints in {low}..{high}, got {value!r}"
        )
    return sizes


def coerce_text(response: Any) -> str:
    """Turn whatever a policy handed us into a bounded ``str`` without raising.

    Bytes are decoded with replacement, ``None`` becomes "", anything else goes through ``str``
    (an object whose ``__str__`` raises, or returns something other than a string, reads as "");
    the result is cut to ``MAX_RESPONSE_CHARS``.
    """
    if response is None:
        text = ""
    elif isinstance(response, (bytes, bytearray)):
        text = bytes(response).decode("utf-8", errors="replace")
    elif isinstance(response, str):
        text = str.__str__(response)  # the characters themselves, whatever a subclass overrides
    else:
        try:
            text = str.__str__(str(response))  # a str subclass's own __str__ is not trusted either
        except Exception:  # noqa: BLE001 - "never raises" is the contract of every score()
            text = ""
    return text[:MAX_RESPONSE_CHARS]


class SingleTurnEnv(gym.Env, abc.ABC):
    """One prompt, one response, one reward: ``reset`` -> prompt, ``step(response)`` -> done.

    Subclasses implement ``_sample_task(rng, options) -> (prompt, ground_truth, extra_info)`` and
    ``_score(response, ground_truth) -> Score``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, max_prompt_chars: int = 20_000, render_mode: str | None = None):
        self.observation_space = AnyText(max_prompt_chars)
        self.action_space = AnyText(MAX_RESPONSE_CHARS)
        self.render_mode = render_mode
        self._prompt: str | None = None
        self._ground_truth: Any = None
        self._task_info: dict[str, Any] = {}
        self._last_response: str = ""

    # -- to implement -------------------------------------------------------------------------
    @abc.abstractmethod
    def _sample_task(self, rng, options: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
        """Draw one task with ``rng`` (the env's ``np_random``)."""

    @abc.abstractmethod
    def _score(self, response: str, ground_truth: Any) -> Score:
        """Score one response; must never raise on any string."""

    # -- gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        prompt, gt, extra = self._sample_task(self.np_random, dict(options or {}))
        self._prompt, self._ground_truth, self._task_info = prompt, gt, extra
        self._last_response = ""
        # Infos are handed out as copies: a caller mutating one must not change the env's task
        # (and check_env rejects reset/step infos that share an object).
        return prompt, copy.deepcopy({"ground_truth": gt, **extra})

    def step(self, action):
        if self._prompt is None:
            raise RuntimeError("call reset() before step()")
        response = coerce_text(action)
        self._last_response = response
        result = self._score(response, self._ground_truth)
        info = copy.deepcopy({"ground_truth": self._ground_truth, **self._task_info})
        info.update(result.as_info())
        # Single-turn: the episode ends on the first step; the observation is the prompt again
        # (there is no next observation), which keeps it inside observation_space.
        return self._prompt, float(result.reward), True, False, info

    def render(self):
        if self.render_mode == "ansi":
            return f"{self._prompt or ''}{self._last_response}"
        return None
