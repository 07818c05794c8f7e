"""Small stand-ins shared by the tests: toy envs whose rewards vary under a random model (so
advantages are non-zero), a multi-turn env with a fixed observation, a scripted backend that
replays given turn texts, and ``TOY``, a whole environment registered from outside rlvr (used
by ``tests/test_env_registry.py`` and, in their own venvs, the checks of ``tests/integrations``),
and the check that a command fails in one line."""

from __future__ import annotations

import contextlib
import warnings

import gymnasium as gym

from rlvr.agents.rollout.base import Generation, RolloutBackend, truncate_at_stop
from rlvr.envs import ENVS, EnvSpec, VerlSpec, register_env
from rlvr.envs.base import AnyText, Score, SingleTurnEnv, coerce_text
from rlvr.envs.warmstart import EvalItem, TraceBuilder

OBS = "\n<information>Doc 1(Title: T) tool text</information>\n"


class LetterEnv(gym.Env):
    """Single-turn: reward = share of ASCII letters in the response; correct when > 0.1."""

    def __init__(self, fail_on: int | None = None):
        self.observation_space = AnyText(1000)
        self.action_space = AnyText(100_000)
        self.fail_on = fail_on
        self._index = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._index = int((options or {}).get("index", 0))
        return f"Task {self._index}: write letters.\n", {"ground_truth": None}

    def step(self, action):
        if self.fail_on is not None and self._index == self.fail_on:
            raise RuntimeError("verifier crashed")
        text = coerce_text(action)
        share = sum(c.isascii() and c.isalpha() for c in text) / max(1, len(text))
        return (
            "",
            float(share),
            True,
            False,
            {"correct": share > 0.1, "reward_components": {"letters": share}},
        )


class ToolEnv(gym.Env):
    """Multi-turn: every turn but the last gets ``OBS``; ends after ``turns`` turns."""

    def __init__(self, turns: int = 3):
        self.observation_space = AnyText(1000)
        self.action_space = AnyText(100_000)
        self.turns = turns
        self.seen: list[str] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seen = []
        return "Question: who?\n", {"ground_truth": ["x"]}

    def step(self, action):
        self.seen.append(coerce_text(action))
        done = len(self.seen) >= self.turns
        reward = float(len(self.seen[-1]) % 3) if done else 0.0
        return ("" if done else OBS), reward, done, False, {"correct": reward > 1}


class ScriptedBackend(RolloutBackend):
    """Replays ``script[turn]`` as every row's text for that turn (tokenised by ``tokenizer``)."""

    def __init__(self, tokenizer, script: list[str]):
        self.tokenizer = tokenizer
        self.script = script
        self.calls: list[list[list[int]]] = []

    def generate(self, contexts, params, *, seed, max_new_tokens=None):
        self.calls.append([list(c) for c in contexts])
        text = self.script[min(len(self.calls) - 1, len(self.script) - 1)]
        ids, lps, reasons, texts = [], [], [], []
        for i in range(len(contexts)):
            budget = params.max_new_tokens if max_new_tokens is None else max_new_tokens[i]
            toks = self.tokenizer(text, add_special_tokens=False)["input_ids"][:budget]
            ids.append(toks)
            lps.append([-1.0] * len(toks))
            out, found = truncate_at_stop(self.tokenizer.decode(toks), params.stop)
            texts.append(out)
            reasons.append("stop" if found else "length")
        return Generation(ids, lps, reasons, texts)


# -- a whole environment registered from outside rlvr (tests/test_env_registry.py) ------------
NAME = "toy"


def letter_trainer(out, *overrides: str, algo: str = "grpo", steps: int = 1):
    """A ``micro``-profile ``Trainer`` of ``algo`` for ``steps`` steps on K&K's settings whose
    episodes are ``LetterEnv``'s (rewards that vary, so advantages are non-zero)."""
    from rlvr.training.train_config import load_train_config
    from rlvr.training.trainer import Trainer

    cfg = load_train_config(
        [
            f"out={out}",
            f"algo={algo}",
            "profile=micro",
            "env=kk",
            f"steps={steps}",
            "progress=false",
            *overrides,
        ]
    )
    return Trainer(cfg, make_env=lambda split: LetterEnv())


def toy_score(response, ground_truth, strict: bool = False) -> Score:
    """The share of digits in the response; correct when it holds the number (alone, if
    ``strict``)."""
    text = coerce_text(response)
    share = sum(c.isdigit() for c in text) / max(1, len(text))
    correct = text.strip() == str(ground_truth) if strict else str(ground_truth) in text
    return Score(share, correct, {"digits": share}, "" if correct else "no number", text.strip())


class ToyEnv(SingleTurnEnv):
    """Task ``i``: write the number ``7 * i + 3``."""

    def __init__(self, split: str = "train", strict: bool = False):
        super().__init__()
        self.split, self.strict = split, strict

    def _sample_task(self, rng, options):
        i = int(options.get("index", rng.integers(1000)))
        prompt = f"Write the number {7 * i + 3}.\n"
        return (
            prompt,
            str(7 * i + 3),
            {"index": i, "messages": [{"role": "user", "content": prompt}]},
        )

    def _score(self, response, ground_truth):
        return toy_score(response, ground_truth, strict=self.strict)


def _toy_examples(settings, seed, split):
    env, i = ToyEnv(split, **settings), seed
    while True:
        prompt, info = env.reset(options={"index": i})
        yield [(prompt, False), (info["ground_truth"], True)]
        i += 1


def _toy_eval_items(settings, n, split):
    env = ToyEnv(split, **settings)
    return [
        EvalItem(p, info["ground_truth"], NAME, {"index": i})
        for i in range(n)
        for p, info in [env.reset(options={"index": i})]
    ]


TOY = EnvSpec(
    name=NAME,
    id="rlvr-test/Toy-v0",
    title="toy numbers",
    entry_point=ToyEnv,
    scorer=toy_score,
    min_reward=0.0,
    options={"strict": bool},
    row_options=lambda env_kwargs, prompt: {"strict": bool(env_kwargs.get("strict", False))},
    traces=TraceBuilder(_toy_examples, _toy_eval_items, max_new_tokens=8),
    verl=VerlSpec(ability="arithmetic", data_sources=("toy_numbers",)),
)


@contextlib.contextmanager
def registered(spec: EnvSpec):
    """``spec`` in the env registry (and gymnasium's) for the block only."""
    register_env(spec)
    try:
        yield spec
    finally:
        ENVS.pop(spec.name)
        gym.registry.pop(spec.id, None)


def error_lines(err: str) -> list[str]:
    """The lines of a command's stderr, without the notice a test process gets once because
    torch was loaded before the command set its kernel mode (``rlvr.repro.apply_kernel_mode``)."""
    return [ln for ln in err.splitlines() if not ln.startswith("[rlvr] torch was imported")]


def one_line_exit_2(capsys, argv: list[str], *needles: str) -> str:
    """Run ``rlvr argv`` and check that it exits 2 with one stderr line holding ``needles``
    (warnings, such as a dataset's left-out rows, are not that line)."""
    from rlvr.cli import main

    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(argv)
    lines = error_lines(capsys.readouterr().err.strip())
    assert code == 2, lines
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0], lines
    return lines[0]


def refuse_model_loads(monkeypatch, loaded: list | None = None) -> None:
    """Make every way the commands load a model record the attempt (``loaded``) and fail: the
    models layer's ``load_model`` and the names evaluation and training bound at import."""
    import rlvr.eval.runner
    import rlvr.models
    import rlvr.training.trainer

    def refuse(*args, **kwargs):
        if loaded is not None:
            loaded.append(args)
        raise AssertionError("a model was loaded")

    for module in (rlvr.models, rlvr.eval.runner, rlvr.training.trainer):
        monkeypatch.setattr(module, "load_model", refuse)
