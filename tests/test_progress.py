"""Progress that moves during long work (issue 52, item 8): the evaluation's bar counts responses
as their generation ends, per decoding step, not per part of 64; the trainer's bar says what a
step is doing while it runs; a base build says what it costs before it starts; and the commands
a user types first answer without loading torch (item 7)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from rlvr.agents.rollout.base import SamplingParams
from rlvr.agents.rollout.hf import HFBackend
from rlvr.models import build_micro

torch.set_num_threads(1)


class Bar:
    """What the code under test calls on a tqdm bar."""

    def __init__(self, *args, **kwargs):
        self.n, self.total, self.postfixes = 0, kwargs.get("total"), []

    def update(self, n=1):
        self.n += n

    def set_postfix_str(self, text, refresh=True):
        self.postfixes.append(text)

    def set_postfix(self, **kwargs):
        self.postfixes.append(kwargs)

    def close(self):
        pass


def test_the_sampler_reports_every_decoding_step():
    model, tok = build_micro(seed=0)
    backend = HFBackend(model, tok)
    steps = []
    backend.on_step = lambda finished, live: steps.append((finished, live))
    contexts = [tok("a", add_special_tokens=False)["input_ids"]] * 3
    backend.generate(contexts, SamplingParams(max_new_tokens=6, temperature=1.0), seed=0)
    assert len(steps) == 6 and sum(f for f, _ in steps) == 3 and steps[-1][1] == 0


def test_the_eval_bar_moves_within_a_part(monkeypatch):
    from rlvr.eval import runner
    from rlvr.eval.config import EvalConfig

    bars = []
    monkeypatch.setattr(runner, "tqdm", lambda *a, **k: bars.append(Bar(*a, **k)) or bars[-1])
    model, tok = build_micro(seed=0)
    cfg = EvalConfig(env="kk", env_kwargs={"n_people": 2}, n_items=3, k=1, max_new_tokens=8)
    runner.evaluate(cfg, model, tok)
    (bar,) = bars
    assert bar.n == bar.total == 6  # greedy + 1 sample per item, each counted once
    # one part per mode, each of up to 8 decoding steps: the bar moved at every one
    assert len(bar.postfixes) >= 8 and bar.postfixes[-1] == "generating 0"


def test_response_bar_counts_a_part_once_whatever_its_steps_reported():
    from rlvr.eval.runner import ResponseBar

    bar = Bar(total=5)
    single = ResponseBar(bar, count_steps=True)
    single.step(2, 3)
    single.step(0, 3)
    single.part(5)  # 3 rows ended without a step report (no budget left): counted here
    assert bar.n == 5
    multi = ResponseBar(Bar(total=2), count_steps=False)
    multi.step(2, 0)  # a turn ended, not an episode
    assert multi.bar.n == 0
    multi.part(2)
    assert multi.bar.n == 2 and multi.bar.postfixes == ["generating 0"]


def test_the_training_bar_says_what_a_step_is_doing(tmp_path, monkeypatch):
    from rlvr.training.train_config import load_train_config
    from rlvr.training.trainer import Trainer

    bars = []
    monkeypatch.setattr(
        "rlvr.training.progress.tqdm", lambda *a, **k: bars.append(Bar(*a, **k)) or bars[-1]
    )
    args = ["env=kk", "algo=grpo", "profile=micro", "steps=1", "eval.at_end=true", "num_threads=1"]
    Trainer(load_train_config([*args, f"out={tmp_path}"])).train()
    said = bars[0].postfixes
    for phase in ("step 1: rollout", "step 1: update", "step 1: evaluation"):
        assert phase in said
    assert "step 1: rollout, 8 generating" in said  # 2 prompts x 4 samples, token by token
    assert any(str(p).startswith("step 1: evaluation, ") for p in said)


def test_a_base_build_says_what_it_costs_before_it_starts(tmp_path, capsys):
    from rlvr.envs.warmstart import tiny_settings
    from rlvr.models.build import BuildConfig, TokenizerConfig, ensure_built
    from rlvr.models.sft import SFTConfig
    from rlvr.models.tiny import ArchConfig

    cfg = BuildConfig(
        name="tiny-kk",
        task="kk",
        data=dict(tiny_settings("kk")),
        tokenizer=TokenizerConfig(vocab_size=300, tasks=("kk",), texts_per_task=40),
        arch=ArchConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1),
        sft=SFTConfig(steps=2, batch_size=2, warmup_steps=0, length_groups=1),
    )
    ensure_built(cfg, home=tmp_path, progress=True)
    captured = capsys.readouterr()
    assert "building base model tiny-kk, about 12 min a draw" in captured.out
    assert "tokenizer texts (kk)" in captured.err  # the corpus's own bar, before SFT's


COMMANDS = [
    ["--help"],
    ["reproduce", "--help"],
    ["train", "profile=micro", "out=x", "--print-config"],
    ["train", "algo=grpo-sg", "out=x"],
    ["train", "model=tiny-kkk", "out=x"],
    ["eval", "k=-1"],
    ["eval", "model=runs/nope/final"],
    ["build-model", "--help"],
    ["reproduce", "--check", "no-such-folder"],
    ["sample", "--help"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_help_and_config_errors_answer_without_torch(tmp_path, argv):
    """What a user types first needs neither torch nor transformers (4-5 s of CPU before:
    `python -X importtime`); ``rlvr`` imports them only where a model or tensor is used."""
    code = (
        "import sys\nfrom rlvr.cli import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted({'torch', 'transformers', 'matplotlib'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr[-2000:]


def test_the_names_known_without_torch_are_the_registries():
    from rlvr.models.names import PRESET_NAMES
    from rlvr.models.presets import PRESETS
    from rlvr.reproduce.cli import FIGURE_HELP, TARGET_HELP
    from rlvr.reproduce.figures import FIGURES
    from rlvr.reproduce.precision import TARGET

    assert set(PRESET_NAMES) == set(PRESETS) and TARGET_HELP == TARGET
    assert sorted(FIGURE_HELP.split(", ")) == sorted(FIGURES)


def test_an_unknown_figure_is_one_line_with_the_closest(capsys):
    from _rlvr_toys import one_line_exit_2

    one_line_exit_2(capsys, ["reproduce", "fig5"], "did you mean 'fig")
