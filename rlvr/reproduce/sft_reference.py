"""The continued-SFT reference of fig2: a base model after as much supervised fine-tuning as an
RL run's updates cost in forward-backward tokens, cached under ``<cache>/sft/<hash>/``.

The folder is written under ``.<hash>.tmp-<pid>`` and renamed into place with its ``sft.json``
(written last), under the lock ``<hash>.lock`` beside it; a temporary folder a killed process left
is removed by the next one that builds the same reference, and a folder whose ``sft.json`` is
not a complete record is built again. A folder holding only its ``sft.json`` (restored from a
results folder's records, ``rlvr.reproduce.archive``) serves its key and evaluations; what needs
its weights trains it again (``weights=True``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from rlvr.config import ConfigError
from rlvr.files import (
    complete_record,
    read_json_object,
    remove_dead_temporaries,
    write_json_atomic,
)
from rlvr.locks import hold
from rlvr.prompt_format import write_format
from rlvr.reproduce.grid import Setting
from rlvr.reproduce.runs import drop_evaluations, eval_config, eval_path, is_done


def ensure_sft_reference(
    setting: Setting,
    seed: int,
    budget_tokens: int,
    cache: Path,
    *,
    say=print,
    progress: bool = True,
    smoke: bool = False,
    model: str | None = None,
    weights: bool = False,
) -> Path:
    """The base ``model`` (default the setting's) after continued SFT on about
    ``budget_tokens`` forward-backward tokens: the equal-compute baseline of an RL run whose
    updates passed that many tokens (``update_tokens``). Cached by (base, SFT config, data).

    Work, not time: steps = ``budget_tokens`` / the base build's tokens per SFT step
    (``build.json``, a property of its data, the same on every machine), so the reference is a
    pure function of its configuration. The recipe is the base build's own SFT config
    restarted (warm-up, cosine decay) on fresh examples. With ``weights``, a reference whose
    record came without its weights is trained again; if the weights differ from the record's,
    its restored evaluations are dropped, to be made again from these weights.
    """
    from rlvr.envs import warmstart
    from rlvr.models.sft import SFTConfig

    model = model or setting.model
    base_dir, build_cfg = _base_build(model)
    if build_cfg is None and model != "micro":
        raise ConfigError(
            f"continued-SFT reference of {model!r}: only tiny presets have "
            "an SFT recipe to continue (their build's); set sft_reference=False"
        )
    if build_cfg is None:  # micro (smoke): no build record; two steps on the K&K traces
        sft_cfg = SFTConfig(steps=2, batch_size=2, warmup_steps=0, seed=seed, max_length=2048)
        task, data = setting.env, warmstart.tiny_settings(setting.env)
    else:
        record = read_json_object(base_dir / "build.json")
        tokens_per_step = record["sft"]["tokens"] / max(record["sft"]["steps"], 1)
        steps = max(1, int(round(budget_tokens / tokens_per_step)))
        sft_cfg = dataclasses.replace(
            build_cfg.sft,
            steps=steps,
            seed=10_000 + seed,
            warmup_steps=min(build_cfg.sft.warmup_steps, steps // 10),
            max_seconds=0.0,
        )
        task, data = build_cfg.task, dict(build_cfg.data)
    blob = json.dumps(
        {
            "base": base_dir.name if base_dir else model,
            "sft": dataclasses.asdict(sft_cfg),
            "task": task,
            "data": data,
        },
        sort_keys=True,
        default=str,
    )
    path = Path(cache) / "sft" / hashlib.sha256(blob.encode()).hexdigest()[:12]
    if _sft_done(path) and not (weights and _missing_weights(path)):
        return path
    # renamed into place when complete, so the lock sits beside the folder
    with hold(path.with_name(f"{path.name}.lock"), wait=True, what=f"SFT {path}", say=say):
        recorded = ""
        if weights and _missing_weights(path):
            say(f"[reproduce] {path}: its record came without weights: training it again")
            recorded = _sft_done(path)["weights_sha256"]
            shutil.rmtree(path)
        if not _sft_done(path):
            remove_dead_temporaries(path.parent, f".{path.name}.tmp-")
            _continued_sft(model, seed, budget_tokens, sft_cfg, task, data, path, say, progress)
        if recorded and _sft_done(path)["weights_sha256"] != recorded:
            dropped = drop_evaluations(Path(cache), f"sft/{path.name}")
            say(
                f"[reproduce] {path}: trained again, its weights differ from its record's "
                f"({recorded[:16]}): {dropped} restored evaluation(s) of it removed"
            )
    return path


def evaluated_reference(
    setting: Setting, run_cfg, seed: int, budget_tokens: int, cache: Path, **kw
):
    """``(path, EvalConfig)`` of the continued-SFT reference matching run ``run_cfg`` and its
    evaluation: a reference restored from its record is trained again (``weights=True``) only when
    that evaluation is not in the cache. ``kw``: ``ensure_sft_reference``'s keywords."""
    path = ensure_sft_reference(setting, seed, budget_tokens, cache, **kw)
    ecfg = eval_config(setting, run_cfg, str(path), seed=seed)
    if not is_done(eval_path(cache, ecfg)):
        path = ensure_sft_reference(setting, seed, budget_tokens, cache, weights=True, **kw)
    return path, ecfg


def _sft_done(path: Path) -> dict | None:
    return complete_record(path / "sft.json", weights_sha256=str)


def _missing_weights(path: Path) -> bool:
    return _sft_done(path) is not None and not any(path.glob("*.safetensors"))


def _continued_sft(model, seed, budget_tokens, sft_cfg, task, data, path, say, progress) -> None:
    from rlvr.envs import warmstart
    from rlvr.models.sft import sft

    say(f"[reproduce] continued SFT of {model} for {sft_cfg.steps} steps -> {path}")
    from rlvr.models import load_model
    from rlvr.repro import machine_info, weights_sha256

    net, tokenizer = load_model(model, seed=seed)
    stats = sft(
        net,
        tokenizer,
        warmstart.example_stream(task, data, seed=sft_cfg.seed),
        sft_cfg,
        progress=progress,
        desc="continued sft",
    )
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")  # renamed into place when complete
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    net.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_format(tmp, task, warmstart.env_kwargs(task, data), base=model)
    write_json_atomic(
        tmp / "sft.json",
        {
            "budget_tokens": budget_tokens,
            **stats,
            "weights_sha256": weights_sha256(tmp),
            "machine": machine_info(),
        },
        indent=2,
        default=str,
    )
    shutil.rmtree(path, ignore_errors=True)  # a reference left incomplete by a killed process
    tmp.rename(path)


def _base_build(model: str):
    """``(directory, BuildConfig)`` of a tiny preset, or ``(None, None)`` for anything else; the
    base is built only when not even its record is here (the record sizes the reference)."""
    from rlvr.models.build import build_key, built, ensure_built, models_dir
    from rlvr.models.presets import preset_config

    cfg = preset_config(model)
    if cfg is None:
        return None, None
    folder = models_dir() / build_key(cfg)
    return (folder if built(folder) is not None else ensure_built(cfg, progress=False)), cfg


__all__ = ["ensure_sft_reference", "evaluated_reference"]
