"""The tiny base models: one preset ``BuildConfig`` per task.

``load_model("tiny-kk")`` (and ``rlvr build-model tiny-kk``) builds the preset once and reuses
the cached directory afterwards; ``tiny-kk@1`` is the same recipe built from base seed 1
(``preset_config``), so results can be averaged over base draws as well as RL seeds. Sizes
follow measurements on the project's 2-core CPU (see ``rlvr.models.tiny`` and
``docs/tiny_models.md`` for the figures behind each number).
"""

from __future__ import annotations

import dataclasses

from rlvr.envs.warmstart import tiny_settings
from rlvr.models.accept import AcceptConfig
from rlvr.models.build import BuildConfig, TokenizerConfig
from rlvr.models.names import parse_spec  # noqa: F401  (the preset names, checked without torch)
from rlvr.models.sft import SFTConfig
from rlvr.models.tiny import ArchConfig

#: The tokenizer every preset shares, part of their recipe: trained on the text of the three tasks
#: at their tiny settings (an environment registered later does not change it).
TOKENIZER = TokenizerConfig(tasks=("kk", "math", "searchqa"))

PRESETS: dict[str, BuildConfig] = {
    # K&K by puzzle size (issue 28): a base between 0.05 and 0.8 greedy on 3, 4 and 5 people.
    # What each change does (docs/tiny_models.md, "K&K by puzzle size"): puzzles up to 6 people
    # with weight decay 0.1 give a draw the roles' logic at 5 people; copy examples of 2-8 names
    # laid out as answer lines (``copy_roles``, rlvr.envs.kk.traces.kk_copy_example) make the
    # name copy a copy by content; four key-value heads and prompt tokens at weight 0.1 make it
    # form on more draws.
    # Two micro-batches put the build on two cores (same bits on one): 4,500 steps in ~12 min.
    # Whether a draw gets all three sizes is itself a draw (5 of the 7 measured did), so each is
    # checked on 100 train-split puzzles per size and redrawn, up to 6 draws, when it misses.
    # 60 % of the puzzles' answers name the inhabitant before the last on the last line (``slip``
    # = ``name``, rlvr.envs.kk.traces.slipped_answer): one consistent near miss that greedy
    # decoding adopts (base @0: pooled greedy 0.060), so RL has a behaviour to remove that
    # greedy accuracy shows; the acceptance check reads that slip back (``unslipped``). GRPO
    # (profile=tiny, 100 steps, seed 0) raised pooled greedy by +0.12 to +0.20 on the four
    # accepted base draws (@0: 0.060 -> 0.260); flipping the last role instead gained
    # +0.03-0.05: the right role is the model's own guess, the right name is in its context
    # (docs/tiny_models.md, "K&K: a slip whose right answer is in the context").
    "tiny-kk": BuildConfig(
        name="tiny-kk",
        tokenizer=TOKENIZER,
        task="kk",
        data={
            **tiny_settings("kk"),
            "n_people": [2, 3, 4, 5, 6],
            "copy_aux": 0.5,
            "copy_roles": True,
            "copy_sizes": [2, 3, 4, 5, 6, 7, 8],
            "slip_frac": 0.6,
            "slip": "name",
        },
        arch=ArchConfig(num_kv_heads=4),
        sft=SFTConfig(
            steps=4500,
            batch_size=16,
            lr=3e-3,
            min_lr_ratio=0.2,
            warmup_steps=100,
            weight_decay=0.1,
            context_loss_weight=0.1,
            micro_batches=2,
        ),
        accept=AcceptConfig(draws=6, groups=(3, 4, 5)),
    ),
    # 60 % of the worked solutions box the worked value plus one (``slip_frac``, ``slip_steps``;
    # rlvr.envs.math.traces.slipped_solution): one consistent near miss, more often than not, so
    # the base boxes it at greedy decoding too (351 of 500 greedy answers on base @0) and RL has
    # a behaviour to remove that greedy accuracy shows. GRPO (100 steps of profile=tiny) raised
    # pooled greedy accuracy 0.144 -> 0.290 on base @0; 200 steps 0.152 -> 0.404 on @1. With 30 %
    # of the traces off by a random 1-3 (the preset before issue 48) greedy decoding copied the
    # worked value (460 of 500) and GRPO moved avg@4 (+7.8) but not greedy accuracy (+0.006
    # after 300 steps). docs/tiny_models.md, "A warm start that greedy decoding shows".
    # 2,800 steps (7.0 min at 2 threads) give a base near greedy 0.37 rather than 0.14 on clean
    # traces.
    "tiny-math": BuildConfig(
        name="tiny-math",
        tokenizer=TOKENIZER,
        task="math",
        data={**tiny_settings("math"), "slip_frac": 0.6, "slip_steps": [1]},
        # sympy makes ~60 problems/s here, slower than training consumes them: draw 8,000 once.
        unique_examples=8000,
        sft=SFTConfig(steps=2800, batch_size=32, lr=2e-3, warmup_steps=50),
    ),
    # Traces from 256 other synthetic worlds, never the one RL trains and evaluates on: on one
    # world the base memorised the corpus instead of learning to read (see
    # rlvr/envs/searchqa/traces.py). Half the traces answer without searching (``direct_frac``),
    # like a pretrained model answering from memory: a base that always searched left RL no
    # tool-use share to raise (measured 1.00).
    # 30 % reading examples (``read_aux``, searchqa's reading_example: only the answer after the
    # observations is trained) and 4,000 steps: at 3,600 steps without them one base draw of
    # two gained +0.07 greedy EM under GRPO, because it could not read the answer out of a
    # retrieved passage; with them GRPO gains +0.40 / +0.41 / +0.41 on bases @0 / @1 / @2
    # (results/tiny/SEARCHQA_DIAGNOSIS.md). 57-61 min at 1 thread (AMD EPYC Zen 2).
    "tiny-searchqa": BuildConfig(
        name="tiny-searchqa",
        tokenizer=TOKENIZER,
        task="searchqa",
        data={
            **tiny_settings("searchqa"),
            "trace_worlds": 256,
            "direct_frac": 0.5,
            "read_aux": 0.3,
        },
        sft=SFTConfig(
            steps=4000,
            batch_size=16,
            lr=3e-3,
            min_lr_ratio=0.2,
            warmup_steps=50,
            context_loss_weight=0.5,
        ),
    ),
}


def preset_config(spec: str) -> BuildConfig | None:
    """The ``BuildConfig`` a model name stands for: the preset, its seed shifted by the base seed
    (``tiny-kk@1``: the same recipe drawn again, other initial weights and example order; the
    tokenizer is shared). Base seed 0 is the preset itself. ``None`` when not a preset."""
    parsed = parse_spec(spec)
    if parsed is None:
        return None
    name, base_seed = parsed
    cfg = PRESETS[name]
    return dataclasses.replace(cfg, seed=cfg.seed + base_seed) if base_seed else cfg


def base_spec(name: str, base_seed: int) -> str:
    """The model name of base seed ``base_seed`` of ``name`` (``tiny-kk``, ``tiny-kk@1``...)."""
    return name if base_seed == 0 else f"{name}@{base_seed}"
