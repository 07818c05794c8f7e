"""The run-cache keys of the tiny reproduction are pinned: a change to what a tiny run or
evaluation computes must be deliberate.

``tests/data/tiny_keys.json`` lists the key (``rlvr.reproduce.keys.run_key`` / ``eval_key``) of
every training run and evaluation that ``rlvr reproduce all --profile tiny`` (with and without
``--smoke``) asks for, and the build key of every tiny base, computed without training. A change
that moves one of them makes the run cache train again from scratch; when that is intended,
regenerate the file with ``python tests/test_tiny_keys.py --write`` and say why in the commit.

A key covers what differs from the defaults (``rlvr.config.effective``), so a changed default
would change what a run computes without moving its key: ``tests/data/key_defaults.json`` pins the
defaults of every keyed configuration, and a changed one must bump ``rlvr.config.KEY_SCHEMA``
(then regenerate both files). A field added later, or a method registered later, moves no key.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "data" / "tiny_keys.json"
DEFAULTS = Path(__file__).resolve().parent / "data" / "key_defaults.json"
#: Draws enumerated: the profile's own plus the wider grids a reproduction may pass
#: (``--seeds 3``), so that every run a tiny reproduction can ask for is pinned.
DRAWS = {"tiny": (3, 5), "smoke": (1, 1)}


def _tag(algo: str, extra: dict) -> str:
    return algo + "".join(f"[{k}={v!r}]" for k, v in sorted(extra.items()))


def grid_keys(smoke: bool) -> dict[str, dict[str, str]]:
    """``{"runs": label -> run key, "evals": label -> eval key, "bases": model -> build key}``
    of ``rlvr reproduce all --profile tiny [--smoke]``, as ``rlvr.reproduce.parallel.prefetch``
    enumerates them (the continued-SFT references' own folders depend on trained token counts:
    their evaluations are keyed with a stand-in model naming the GRPO run they match)."""
    from rlvr.reproduce import tables
    from rlvr.reproduce.common import Context
    from rlvr.reproduce.grid import get_grid
    from rlvr.reproduce.keys import eval_key, model_identity, run_key
    from rlvr.reproduce.parallel import required_runs
    from rlvr.reproduce.runs import eval_config, train_config

    profile = get_grid("tiny", smoke=smoke)
    n_seeds, n_bases = DRAWS["smoke" if smoke else "tiny"]
    ctx = Context(
        profile,
        Path("unused"),
        Path("/cache"),
        list(range(n_seeds)),
        smoke=smoke,
        base_seeds=list(range(n_bases)),
    )
    runs, evals, bases = {}, {}, {}

    def eval_sets(setting):
        return list(setting.eval_sets.items()) or [("", None)]

    for (key, algo, extra), units in required_runs(ctx, ["all"]):
        setting = profile.settings[key]
        for b, s in units:
            cfg = train_config(setting, algo, s, extra, base_seed=b)
            label = f"{key}/{_tag(algo, extra)}/base{b}/seed{s}"
            runs[label] = run_key(cfg)
            bases[cfg.model] = model_identity(cfg.model)
            final = str(Path("/cache/runs") / runs[label] / "final")
            for name, eval_set in eval_sets(setting):
                ecfg = eval_config(setting, cfg, final, seed=cfg.seed, eval_set=eval_set)
                evals[f"{label}{'/' + name if name else ''}"] = eval_key(ecfg)
    for key, setting in profile.settings.items():
        for b, s in ctx.units():
            cfg = train_config(setting, "grpo", s, base_seed=b)
            for name, eval_set in eval_sets(setting):
                ecfg = eval_config(setting, cfg, cfg.model, seed=s, eval_set=eval_set)
                evals[f"{key}/base/base{b}/seed{s}{'/' + name if name else ''}"] = eval_key(ecfg)
            if profile.sft_reference and (key == "kk" or tables.has_sft_row(ctx, key)):
                stand_in = f"sft/after-{run_key(cfg)}"
                ecfg = eval_config(setting, cfg, stand_in, seed=s)
                evals[f"{key}/sft/base{b}/seed{s}"] = eval_key(ecfg)
    return {"runs": runs, "evals": evals, "bases": bases}


def all_keys() -> dict[str, dict[str, dict[str, str]]]:
    return {"tiny": grid_keys(smoke=False), "smoke": grid_keys(smoke=True)}


def test_tiny_reproduction_keys_are_unchanged():
    golden = json.loads(GOLDEN.read_text())
    now = all_keys()
    for grid in golden:
        for kind in golden[grid]:
            moved = {
                k: (v, now[grid][kind].get(k))
                for k, v in golden[grid][kind].items()
                if now[grid][kind].get(k) != v
            }
            added = sorted(set(now[grid][kind]) - set(golden[grid][kind]))
            assert not moved and not added, (
                f"{grid} {kind}: keys moved {moved}, new {added} (deliberate? regenerate with "
                "python tests/test_tiny_keys.py --write)"
            )
    assert set(now) == set(golden)


def keyed_defaults() -> dict[str, object]:
    """``{"TrainConfig.loss.clip_low": 0.2, ...}``: the default of every keyed field of the
    configurations keys cover (``WeightConfig`` aside: a run key covers its method's resolved
    parameters whatever their defaults), with ``rlvr.config.KEY_SCHEMA``."""
    from rlvr.config import KEY_SCHEMA, UNKEYED, plain_data
    from rlvr.eval.runner import EvalConfig
    from rlvr.models.build import BuildConfig
    from rlvr.training.train_config import TrainConfig

    out: dict[str, object] = {"KEY_SCHEMA": KEY_SCHEMA}

    def walk(prefix: str, cfg) -> None:
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            if f.metadata == UNKEYED or f.name == "weights":
                continue
            if dataclasses.is_dataclass(value):
                walk(f"{prefix}.{f.name}", value)
            else:
                out[f"{prefix}.{f.name}"] = plain_data(value)

    for cls in (TrainConfig, EvalConfig, BuildConfig):
        walk(cls.__name__, cls())
    return out


def test_no_default_changed_under_the_key_schema():
    golden, now = json.loads(DEFAULTS.read_text()), keyed_defaults()
    changed = {k: (v, now[k]) for k, v in golden.items() if k in now and now[k] != v}
    assert not changed, (
        f"defaults changed {changed}: a key covers what differs from the defaults, so a changed "
        "default would reuse runs that computed something else; bump rlvr.config.KEY_SCHEMA and "
        "regenerate with python tests/test_tiny_keys.py --write"
    )


def test_a_new_method_or_a_defaulted_field_moves_no_key():
    """Registering a method with a parameter of its own (as a built-in method adds a field to
    ``WeightConfig``) and adding a defaulted field to ``TrainConfig`` leave GRPO's key as it was;
    the new method's key covers its parameter."""
    from rlvr.agents.algorithms import (
        ALGORITHMS,
        Algorithm,
        Param,
        WeightConfig,
        register_algorithm,
    )
    from rlvr.reproduce.grid import get_grid
    from rlvr.reproduce.keys import run_key
    from rlvr.reproduce.runs import train_config
    from rlvr.training.train_config import TrainConfig

    setting = get_grid("tiny").settings["kk"]
    cfg = train_config(setting, "grpo", 0)
    before = run_key(cfg)
    gamma = Param("toy_gamma", 0.5, float, "(0, 1]")
    toy = Algorithm(name="toy_keys", label="toy", color="#000000", fields=(gamma,))
    register_algorithm(toy)
    try:
        Weights = dataclasses.make_dataclass(
            "WeightConfig",
            [("toy_gamma", float, dataclasses.field(default=0.5))],
            bases=(WeightConfig,),
        )
        Later = dataclasses.make_dataclass(
            "TrainConfig",
            [
                ("new_knob", float, dataclasses.field(default=1.0)),
                ("weights", Weights, dataclasses.field(default_factory=Weights)),
            ],
            bases=(TrainConfig,),
        )
        fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
        grown = Later(**{**fields, "weights": Weights(**dataclasses.asdict(cfg.weights))})
        assert run_key(grown) == before
        assert run_key(dataclasses.replace(grown, new_knob=2.0)) != before
        toy_run = dataclasses.replace(grown, algo="toy_keys")
        other = dataclasses.replace(
            toy_run, weights=dataclasses.replace(grown.weights, toy_gamma=0.25)
        )
        assert len({before, run_key(toy_run), run_key(other)}) == 3
    finally:
        ALGORITHMS.pop("toy_keys")


#: Runs of the tiny grid before issue 48 made GRPO-SG and Reverse the calibrated logit form: the
#: fixed-parameter probability form, which ``weights.shaping_input=prob`` still names (label ->
#: the key ``tests/data/tiny_keys.json`` pinned then; the smoke grid's under ``smoke/``, as its
#: digits-env runs of issue 50 had it).
PRE_ISSUE_48 = {
    "searchqa/reverse/base2/seed2": "576da5f02c7c",
    "smoke/kk/reverse/base0/seed0": "17f8e612d2a7",
}


def test_runs_before_the_published_form_keep_their_keys():
    """Making GRPO-SG and Reverse the calibrated logit form, registering TR-GRPO and adding the
    loss's ``kl_weighting`` and the trainer's ``grad_cosine_every`` moved no existing run: the
    probability form of the earlier grid is still those keys (the sweep's runs are some). The
    math and K&K runs moved later, deliberately, with their presets' warm starts (issue 48,
    docs/reproduce.md)."""
    from rlvr.reproduce.grid import get_grid
    from rlvr.reproduce.keys import run_key
    from rlvr.reproduce.runs import train_config

    for label, key in PRE_ISSUE_48.items():
        smoke = label.startswith("smoke/")
        setting, algo, base, seed = label.removeprefix("smoke/").split("/")
        grid = get_grid("tiny", smoke=smoke)
        cfg = train_config(
            grid.settings[setting],
            algo,
            int(seed.removeprefix("seed")),
            {"weights.shaping_input": "prob"},
            base_seed=int(base.removeprefix("base")),
        )
        assert run_key(cfg) == key, label


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/test_tiny_keys.py --write")
    GOLDEN.write_text(json.dumps(all_keys(), indent=1, sort_keys=True) + "\n")
    DEFAULTS.write_text(json.dumps(keyed_defaults(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} and {DEFAULTS}")
