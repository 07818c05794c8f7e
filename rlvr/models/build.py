"""Build, cache and load the tiny base models.

A build is: train a tokenizer on task text -> initialise a Qwen2 model of ``ArchConfig`` ->
supervised warm start on generator traces (``rlvr.envs.warmstart``) -> ``save_pretrained``.
It lives in ``rlvr_home()/models/<name>-<hash>``, where the hash covers the whole
``BuildConfig`` *and* a fingerprint of the first generated examples, so a change to any setting
or to a generator's output gives a new directory instead of a stale model. Directories are
written under a temporary name (``.<key>.tmp-<pid>``) and renamed into place (atomic on one file
system); a finished directory has ``build.json`` with the configuration, timings, statistics, the
SHA-256 of its weights (``rlvr.repro.weights_sha256``) and the machine it was built on. A
``build.json`` that is not a complete record (``built``) is a build to redo, and the temporary
folder of a build that was killed is removed by the next build of the same key once its pid is
dead (``rlvr.files.remove_dead_temporaries``). The warm start of a draw saves checkpoints beside
the folder (``<key>.draw<d>.checkpoints``), removed once the draw is kept or rejected, so a build
killed mid-way goes on from its last one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlvr.config import ConfigError, config_key, merge, parse_overrides, to_dict
from rlvr.data_paths import rlvr_home
from rlvr.envs import warmstart
from rlvr.files import complete_record, remove_dead_temporaries, write_json_atomic
from rlvr.locks import hold
from rlvr.models import accept
from rlvr.models.accept import DRAW_STRIDE, AcceptConfig
from rlvr.models.sft import SFTConfig, epochs, prefetch, sft
from rlvr.models.tiny import ArchConfig, build_tiny, count_parameters
from rlvr.models.tokenizer import PROBE_TEXT, load_tokenizer, reload_mismatch, train_tokenizer
from rlvr.repro import machine_info, running_mode, weights_sha256

BUILD_FORMAT = 3  # bump when the build procedure itself changes meaning (2: Qwen2 text split;
# 3: the reproducible mode's float32 sqrt, rlvr.blas.sqrt, which moved every base's bits)


@dataclass(frozen=True)
class TokenizerConfig:
    """What the shared tokenizer is trained on (``rlvr.models.tokenizer``)."""

    vocab_size: int = 1024
    min_frequency: int = 2
    #: Tasks whose text the tokenizer is trained on (``()``: every registered environment with a
    #: warm start, ``rlvr.envs.warmstart.tasks``). One vocabulary covers every task, and every base
    #: built with the same ``TokenizerConfig`` gets the same tokenizer.
    tasks: tuple[str, ...] = ()
    #: Task settings of the tokenizer corpus (a task without an entry: its tiny settings,
    #: ``rlvr.envs.warmstart.tiny_settings``).
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    texts_per_task: int = 3000
    seed: int = 1234


@dataclass(frozen=True)
class BuildConfig:
    name: str = "tiny-kk"
    task: str = "kk"
    #: Task settings handed to the task's warm start (``rlvr.envs.warmstart``: generator options,
    #: template, CoT...).
    data: dict[str, Any] = field(default_factory=dict)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    arch: ArchConfig = ArchConfig()
    sft: SFTConfig = SFTConfig()
    #: > 0: draw this many examples once and train on seeded passes over them (for generators
    #: slower than training, like sympy-checked math); 0: a fresh example every time.
    unique_examples: int = 0
    seed: int = 0
    #: Check each draw and draw again when it fails (``rlvr.models.accept``; default: no check).
    accept: AcceptConfig = AcceptConfig()

    def __post_init__(self):
        if self.task not in warmstart.tasks():
            raise ConfigError(
                f"BuildConfig.task must be one of {sorted(warmstart.tasks())}, got {self.task!r}"
            )
        unknown = set(self.tokenizer.tasks) - set(warmstart.tasks())
        if unknown:
            raise ConfigError(f"BuildConfig.tokenizer.tasks has unknown task(s) {sorted(unknown)}")
        if not self.name or "/" in self.name:
            raise ConfigError(
                f"BuildConfig.name must be a non-empty name without '/', got {self.name!r}"
            )


def tokenizer_corpus(
    cfg: TokenizerConfig, per_task: int | None = None, progress: bool = False
) -> list[str]:
    """Texts of every task of ``cfg``, ``per_task`` (default ``texts_per_task``) each
    (``progress``: a bar per task; the corpus takes tens of seconds before a build's SFT)."""
    from tqdm.auto import tqdm

    texts: list[str] = []
    n = per_task or cfg.texts_per_task
    for task in cfg.tasks or warmstart.tasks():
        settings = cfg.settings[task] if task in cfg.settings else warmstart.tiny_settings(task)

        def bar(stream, task=task):
            desc = f"tokenizer texts ({task})"
            return tqdm(stream, total=n, desc=desc, disable=not progress, leave=False)

        texts += warmstart.tokenizer_texts(task, settings, n, seed=cfg.seed, wrap=bar)
    return texts


def data_fingerprint(cfg: BuildConfig, n: int = 16) -> str:
    """Hash of the first ``n`` training examples and tokenizer texts: catches generator changes."""
    h = hashlib.sha256()
    for seg in warmstart.take(warmstart.example_stream(cfg.task, cfg.data, seed=cfg.seed), n):
        h.update(json.dumps(seg).encode())
    for text in tokenizer_corpus(cfg.tokenizer, per_task=4):
        h.update(text.encode())
    return h.hexdigest()


def build_key(cfg: BuildConfig) -> str:
    """``<name>-<12 hex>``: the key of the configuration (``rlvr.config.config_key``: its fields
    that differ from the defaults, so a setting added with a default that builds the same bits
    moves no key) with the build format and the data fingerprint."""
    return f"{cfg.name}-{config_key(cfg, format=BUILD_FORMAT, data=data_fingerprint(cfg))}"


#: Minutes one draw of each preset's build takes on a 2-core AMD EPYC (tiny-kk 11.5 min and the
#: nine builds of results/tiny in 2.1 h on a Zen 4, README; tiny-searchqa 57-61 min at one thread
#: on a Zen 2, rlvr.models.presets), said when a build starts; a preset may take up to its
#: ``accept.draws`` draws.
BUILD_MINUTES = {"tiny-kk": 12, "tiny-math": 7, "tiny-searchqa": 60}
#: Warm-start steps between two checkpoints of a draw (``<key>.draw<d>.checkpoints`` beside the
#: model folder): a build killed mid-way (a session's end) resumes from the last one and loses
#: at most these steps, about 4 minutes of a tiny-searchqa build, instead of the whole draw (an
#: hour). The resume draws the examples before it again: tiny-searchqa's generator makes ~126 a
#: second on a loaded core (Intel Xeon, 2026-12-07), so up to ~8 minutes; tiny-kk's ~6,800.
CHECKPOINT_STEPS = 250


def models_dir(home: str | Path | None = None) -> Path:
    return Path(home) if home is not None else rlvr_home() / "models"


def build(
    cfg: BuildConfig, out_dir: str | Path, progress: bool = True, checkpoints: Path | None = None
) -> dict[str, Any]:
    """Build the model of ``cfg`` into ``out_dir`` (created); returns the build record. With
    ``checkpoints`` the warm start saves its state there every ``CHECKPOINT_STEPS`` steps and
    resumes from it (``rlvr.models.sft.sft``)."""
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    texts = tokenizer_corpus(cfg.tokenizer, progress=progress)
    trained = train_tokenizer(texts, cfg.tokenizer.vocab_size, cfg.tokenizer.min_frequency)
    t_tok = time.perf_counter() - t0
    model = build_tiny(cfg.arch, trained, seed=cfg.seed)
    # SFT on the tokenizer as the folder loads it, so the base trains on the text split it runs on.
    out_dir.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out_dir)
    trained.save_pretrained(out_dir)
    tokenizer = load_tokenizer(out_dir, local_files_only=True)
    differs = reload_mismatch(trained.backend_tokenizer, tokenizer, [PROBE_TEXT, *texts])
    if differs is not None:
        raise RuntimeError(
            f"build {cfg.name}: the tokenizer loads as {type(tokenizer).__name__} and encodes "
            f"{differs[:80]!r} otherwise than trained (rlvr.models.tokenizer)"
        )
    stream = warmstart.example_stream(cfg.task, cfg.data, seed=cfg.seed)
    if cfg.unique_examples:
        from tqdm.auto import tqdm

        pool = warmstart.take(
            tqdm(
                stream,
                total=cfg.unique_examples,
                desc=f"{cfg.name} examples",
                disable=not progress,
                leave=False,
            ),
            cfg.unique_examples,
        )
        stream = epochs(pool, seed=cfg.seed)
    else:
        stream = prefetch(stream)
    stats = sft(
        model,
        tokenizer,
        stream,
        cfg.sft,
        progress=progress,
        desc=f"build {cfg.name}",
        checkpoints=checkpoints,
        every=CHECKPOINT_STEPS,
    )
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    record = {
        "name": cfg.name,
        "config": to_dict(cfg),
        "parameters": count_parameters(model),
        "vocab_size": len(tokenizer),
        "tokenizer_seconds": round(t_tok, 2),
        "sft": stats,
        "seconds": round(time.perf_counter() - t0 + stats.get("seconds_before_resume", 0.0), 2),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "weights_sha256": weights_sha256(out_dir),
        "machine": machine_info(),
    }
    if cfg.accept.draws > 1:
        t1 = time.perf_counter()
        record["accept"] = accept.check(model, tokenizer, cfg.task, cfg.data, cfg.accept)
        record["accept"]["seconds"] = round(time.perf_counter() - t1, 2)
    write_json_atomic(out_dir / "build.json", record, indent=2, default=str)
    return record


def built(folder: Path) -> dict[str, Any] | None:
    """The ``build.json`` of a finished model folder (a JSON object with its weights'
    ``weights_sha256``); None when the folder is missing or its record is torn. The record may
    be there without the weights: a results folder keeps it (``rlvr.reproduce.archive``)."""
    return complete_record(Path(folder) / "build.json", weights_sha256=str)


def has_weights(folder: Path) -> bool:
    """Whether model folder ``folder`` is finished and holds its weights, not only its record."""
    return built(folder) is not None and any(Path(folder).glob("*.safetensors"))


def recorded_rejections(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The draws a base's record (``build.json``, restored from a results folder without its
    weights) lists as rejected, when it was built in this process's held kernel mode: there the
    draws are the same bits on any x86-64 CPU, so building them again would only reject them
    again (tiny-kk@4 rejected four, about 1.5 h of one core). A record made with native kernels,
    or in another mode, is not trusted: every draw is built again."""
    mode = record.get("machine", {}).get("kernel_mode")
    if mode in (None, "native") or mode != running_mode():
        return []
    return list(record.get("rejected", []))


def ensure_built(
    cfg: BuildConfig, home: str | Path | None = None, progress: bool = True, rebuild: bool = False
) -> Path:
    """The cached directory of ``cfg``, built first when missing (or when ``rebuild``). With an
    acceptance check (``cfg.accept.draws > 1``) the folder holds the first draw that passes it;
    the rejected draws are listed in its ``build.json`` (and, while the build runs, in
    ``<key>.draws.json`` beside it, so a killed build resumes at the next draw). Within a draw,
    a killed build resumes from its last warm-start checkpoint (``CHECKPOINT_STEPS``), to the
    bits of a build never stopped.

    A folder holding only its ``build.json`` (restored from a results folder's records, which
    keep no weights) is built again, from the draw it kept when its rejected draws were built in
    this kernel mode (``recorded_rejections``), and a build whose weights differ from the
    record's says so: the runs recorded on that base were trained on other weights."""
    root = models_dir(home)
    root.mkdir(parents=True, exist_ok=True)
    final = root / build_key(cfg)
    if has_weights(final) and not rebuild:
        return final
    # One builder per key (the folder is renamed into place, so the lock sits beside it): a
    # second process waits, then finds the model built instead of building it again.
    with hold(root / f"{final.name}.lock", wait=True, what=f"model {final}"):
        if has_weights(final) and not rebuild:
            return final
        kept = {} if rebuild else (built(final) or {})
        recorded = kept.get("weights_sha256", "")
        if recorded and progress:
            print(f"base model {cfg.name}: its record came without weights: building it again")
        remove_dead_temporaries(root, f".{final.name}.tmp-")
        log = root / f"{final.name}.draws.json"
        if rebuild:
            log.unlink(missing_ok=True)
            for old in root.glob(f"{final.name}.draw*.checkpoints"):
                shutil.rmtree(old, ignore_errors=True)
        tried = accept.rejected(log) or recorded_rejections(kept)
        if tried and not log.exists() and progress:
            print(
                f"base model {cfg.name}: its record lists {len(tried)} rejected draw(s), built "
                f"in this kernel mode: not built again (draw {len(tried) + 1} is the kept one)"
            )
        tmp = root / f".{final.name}.tmp-{os.getpid()}"
        try:
            for d in range(len(tried), cfg.accept.draws):
                draw = draw_config(cfg, d)
                checkpoints = root / f"{final.name}.draw{d}.checkpoints"
                shutil.rmtree(tmp, ignore_errors=True)
                if progress:
                    of = f" (draw {d + 1} of at most {cfg.accept.draws})" if d else ""
                    took = BUILD_MINUTES.get(cfg.name)
                    hint = f", about {took} min a draw on a 2-core AMD EPYC" if took else ""
                    print(f"building base model {cfg.name}{of}{hint} -> {final}", flush=True)
                record = build(draw, tmp, progress=progress, checkpoints=checkpoints)
                verdict = record.get("accept")
                if verdict is None or verdict["passed"]:
                    if tried:
                        record["rejected"] = tried
                        write_json_atomic(tmp / "build.json", record, indent=2, default=str)
                    shutil.rmtree(final, ignore_errors=True)  # a rebuild, or a kill left it partial
                    os.replace(tmp, final)
                    log.unlink(missing_ok=True)
                    shutil.rmtree(checkpoints, ignore_errors=True)
                    if recorded and record["weights_sha256"] != recorded:
                        print(
                            f"base model {cfg.name} built again to other weights than its record "
                            f"({record['weights_sha256'][:16]}, recorded {recorded[:16]}): the "
                            "runs recorded on it do not reproduce here (rlvr machine)",
                            flush=True,
                        )
                    return final
                tried.append(
                    {
                        "draw": d,
                        "seed": draw.seed,
                        "accuracy": verdict["accuracy"],
                        "weights_sha256": record["weights_sha256"],
                        "seconds": record["seconds"],
                    }
                )
                accept.save_rejected(log, tried)
                shutil.rmtree(checkpoints, ignore_errors=True)
                if progress:
                    print(f"draw {d + 1} of {cfg.name} rejected: {verdict['accuracy']}", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    a = cfg.accept
    raise RuntimeError(
        f"model {cfg.name}: no draw of {a.draws} has greedy accuracy in [{a.low}, {a.high}] on "
        f"every train-split group {list(a.groups)}: "
        + "; ".join(f"seed {t['seed']} {t['accuracy']}" for t in tried)
        + f" (tried draws: {log}; --rebuild starts over)"
    )


def draw_config(cfg: BuildConfig, draw: int) -> BuildConfig:
    """Draw ``draw`` of ``cfg``: the same recipe from seed ``seed + DRAW_STRIDE * draw``."""
    return dataclasses.replace(cfg, seed=cfg.seed + DRAW_STRIDE * draw) if draw else cfg


def with_overrides(cfg: BuildConfig, overrides: list[str] | dict[str, Any] | None) -> BuildConfig:
    """``cfg`` with ``key=value`` overrides (``sft.steps=100``, ``arch.hidden_size=64``...)."""
    if not overrides:
        return cfg
    values = parse_overrides(overrides) if isinstance(overrides, list) else overrides
    data = values.pop("data", None)
    out = merge(cfg, values)
    if data is not None:
        if not isinstance(data, dict):
            raise ConfigError(f"data: expected a mapping, got {data!r}")
        out = dataclasses.replace(out, data={**out.data, **data})
    return out
