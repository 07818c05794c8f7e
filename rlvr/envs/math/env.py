"""``rlvr/Math-v0``: one math problem per episode, reward 1/0 from ``rlvr.envs.math.score``.

    env = gymnasium.make("rlvr/Math-v0", dataset="synthetic", difficulty=[1, 2])
    prompt, info = env.reset(seed=0)            # info["ground_truth"], info["messages"]
    _, reward, terminated, truncated, info = env.step("... \\boxed{12}")

``dataset``: ``"synthetic"`` (seeded generator, ``split`` train/test, ``difficulty`` 1..5 or a
list), a name in ``DATASETS`` (math500, aime24, amc23, minerva, olympiadbench, gsm8k) or a local
JSONL/Parquet path. ``options={"index": i}`` picks item ``i`` (dataset row / i-th generated
problem of the split); otherwise the item is drawn with the env's seeded RNG.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlvr.envs.base import Score, SingleTurnEnv, drop_oversized
from rlvr.envs.math.data import load_dataset
from rlvr.envs.math.pool import check_timeout
from rlvr.envs.math.reward import DEFAULT_TIMEOUT_S, check_answer_form, score
from rlvr.envs.math.synthetic import generate_problem, parse_difficulty
from rlvr.envs.prompts import TEMPLATES, chat_messages, render_prompt

#: Qwen2.5-Math's chain-of-thought system prompt (its evaluation harness, "qwen25-math-cot").
SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
#: With the DeepScaleR format rule the answer must follow ``</think>``.
SYSTEM_PROMPT_THINK = (
    "Think step by step inside <think> </think>, then put your final answer within \\boxed{}."
)
#: Size of the synthetic index space drawn from when no index is given.
_SYNTHETIC_SPACE = 2**31


class MathEnv(SingleTurnEnv):
    def __init__(
        self,
        dataset: str = "synthetic",
        *,
        split: str | None = None,
        difficulty: int | Sequence[int] | None = None,
        template: str = "qwen",
        require_think: bool = False,
        answer_form: str = "any",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        seed: int = 0,
        data_dir: str | None = None,
        system_prompt: str | None = None,
        prefill: str = "",
        render_mode: str | None = None,
    ):
        super().__init__(render_mode=render_mode)
        if template not in TEMPLATES:
            raise ValueError(f"template must be one of {TEMPLATES}, got {template!r}")
        timeout_s = check_timeout(timeout_s)
        self.dataset = str(dataset)
        self.synthetic = self.dataset == "synthetic"
        self.split = split or ("train" if self.synthetic else "test")
        self.template = template
        self.require_think = bool(require_think)
        #: "number": the box must hold a written-out value (``rlvr.envs.math.reward``).
        self.answer_form = check_answer_form(answer_form)
        self.timeout_s = float(timeout_s)
        self.generator_seed = int(seed)
        if system_prompt is None:
            system_prompt = SYSTEM_PROMPT_THINK if self.require_think else SYSTEM_PROMPT
        self.system_prompt = system_prompt
        #: Text that starts the assistant turn (``"\\boxed{"`` makes a small model answer in the
        #: rewarded form at once); the response is scored with it in front.
        self.prefill = str(prefill)
        if self.synthetic:
            self.difficulty = parse_difficulty(difficulty)
            generate_problem(
                0, split=self.split, difficulty=self.difficulty, seed=self.generator_seed
            )
            self.records: list[dict] = []
        else:
            if difficulty is not None:
                raise ValueError("difficulty applies only to dataset='synthetic'")
            self.difficulty = None
            self.records = load_dataset(self.dataset, self.split, data_dir=data_dir)
            if not self.records:
                raise ValueError(f"dataset {self.dataset!r} has no records")
            self.records = drop_oversized(
                self.records,
                lambda r: render_prompt(self.system_prompt, r["problem"], self.template),
                self.observation_space.max_length,
                repr(self.dataset),
            )

    def __len__(self) -> int:
        """Number of items (the synthetic stream is unbounded: its index space)."""
        return _SYNTHETIC_SPACE if self.synthetic else len(self.records)

    @property
    def num_tasks(self) -> int:
        """Tasks in the split (the synthetic stream: its index space); ``reset`` accepts
        ``options["index"]`` in ``[0, num_tasks)``."""
        return len(self)

    def record(self, index: int) -> dict:
        """Item ``index`` as a record (``problem``, ``ground_truth``, ``source``, ``id``...)."""
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self):
            raise ValueError(f"options['index'] must be an int in [0, {len(self)}), got {index!r}")
        if self.synthetic:
            return generate_problem(
                index, split=self.split, difficulty=self.difficulty, seed=self.generator_seed
            ).as_record()
        return self.records[index]

    def _sample_task(self, rng, options: dict[str, Any]):
        index = options.get("index")
        if index is None:
            index = int(rng.integers(len(self)))
        elif hasattr(index, "__index__") and not isinstance(index, bool):
            index = int(index.__index__())
        rec = self.record(index)
        prompt = render_prompt(self.system_prompt, rec["problem"], self.template, self.prefill)
        extra = {
            "messages": chat_messages(self.system_prompt, rec["problem"]),
            "prefill": self.prefill,
            "problem": rec["problem"],
            "source": rec["source"],
            "id": rec["id"],
            "index": index,
        }
        if "difficulty" in rec:
            extra["difficulty"] = rec["difficulty"]
        return prompt, rec["ground_truth"], extra

    def _score(self, response: str, ground_truth: Any) -> Score:
        return score(
            self.prefill + response,
            ground_truth,
            require_think=self.require_think,
            answer_form=self.answer_form,
            timeout_s=self.timeout_s,
        )

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info["timed_out"] = info.get("reason") == "timeout"
        return obs, reward, terminated, truncated, info
