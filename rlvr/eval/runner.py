"""Evaluate a checkpoint on an environment's test items: greedy accuracy, avg@k and pass@k.

``evaluate(cfg)`` loads the model (``micro``, a local directory, a tiny-model name or a hub name),
draws items ``0..n_items-1`` of each group (fewer when the split has fewer tasks) with ``env.reset(seed=cfg.seed, options={"index": i})``
(``split="test"``), generates one greedy response and ``k`` sampled responses per item in batches
(a tqdm bar counts responses), scores each with the environment's own ``step`` and returns every
response as a record (see ``rlvr.eval.metrics``) with the summary per group. ``write_jsonl`` saves
the records, so figures are redrawn without rerunning the model.

Generation uses the trainer's rollout backend (``rlvr.agents.rollout``) when it is installed and
``model.generate`` otherwise; multi-turn environments (search QA) run through the trainer's
multi-turn driver, so tool calls, observations and turn limits match training exactly.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from tqdm.auto import tqdm

from rlvr.envs import env_id
from rlvr.envs.base import SingleTurnEnv
from rlvr.eval.metrics import exact_match, f1_score, gold_answers, summarize_by_group


@dataclass
class EvalConfig:
    """What to evaluate and how (``rlvr eval key=value ...``).

    ``group_by``/``group_values`` evaluate one group per value of an env keyword argument (e.g.
    ``group_by=n_people group_values=3,4,5`` for K&K accuracy by puzzle size); without them the
    env is evaluated once as group ``all``. ``k = 0`` skips sampling; ``greedy = false`` skips the
    greedy pass. ``pass_ks`` are the k of pass@k (each at most ``k``).
    """

    model: str = "micro"
    env: str = "kk"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    split: str = "test"
    group_by: str = ""
    group_values: list[int] = field(default_factory=list)
    n_items: int = 100
    greedy: bool = True
    k: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    batch_size: int = 64
    pass_ks: list[int] = field(default_factory=lambda: [1])
    seed: int = 0
    backend: Literal["auto", "rollout", "generate"] = "auto"
    device: str = "cpu"
    out: str = ""

    def __post_init__(self):
        for name in ("n_items", "batch_size", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.k < 0:
            raise ValueError(f"EvalConfig.k must be >= 0, got {self.k}")
        if not self.greedy and self.k == 0:
            raise ValueError("EvalConfig: greedy=false and k=0 leaves nothing to evaluate")
        if self.k and self.temperature <= 0:
            raise ValueError(f"EvalConfig.temperature must be > 0 to sample k={self.k}, got {self.temperature}")
        if bool(self.group_by) != bool(self.group_values):
            raise ValueError("EvalConfig: group_by and group_values go together")
        bad = [k for k in self.pass_ks if k < 1 or (self.k and k > self.k)]
        if bad:
            raise ValueError(f"EvalConfig.pass_ks {bad} must lie in 1..k={self.k}")


@dataclass
class EvalResult:
    records: list[dict[str, Any]]
    summary: dict[Any, dict[str, float]]
    seconds: float
    config: dict[str, Any]

    def metric(self, name: str, group: Any = "all") -> float:
        return self.summary[group][name]


# -- Generation --------------------------------------------------------------------------------
@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str


GenerateFn = Callable[[list[list[int]], float, int], list[Completion]]


def rollout_backend(model, tokenizer):
    """The trainer's HF rollout backend for ``model``, or ``None`` when it is not installed."""
    try:
        hf = importlib.import_module("rlvr.agents.rollout.hf")
    except ImportError:
        return None
    return hf.HFBackend(model, tokenizer)


def _hf_generate(model, tokenizer, contexts: list[list[int]], temperature: float, seed: int,
                 cfg: EvalConfig) -> list[Completion]:
    """``model.generate`` on left-padded contexts (the fallback when no rollout backend exists)."""
    device = next(model.parameters()).device
    width = max(len(c) for c in contexts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(contexts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, c in enumerate(contexts):
        ids[i, width - len(c):] = torch.tensor(c)
        mask[i, width - len(c):] = 1
    kwargs: dict[str, Any] = dict(max_new_tokens=cfg.max_new_tokens, pad_token_id=pad,
                                  eos_token_id=tokenizer.eos_token_id)
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_p=cfg.top_p, top_k=0)
    else:
        kwargs.update(do_sample=False)
    if cfg.stop:
        kwargs.update(stop_strings=list(cfg.stop), tokenizer=tokenizer)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
    result = []
    for row in out[:, width:].tolist():
        toks = [t for t in row if t != pad]
        if tokenizer.eos_token_id in toks:
            toks = toks[:toks.index(tokenizer.eos_token_id) + 1]
            reason = "eos"
        else:
            reason = "length"
        text = tokenizer.decode(toks, skip_special_tokens=True)
        for s in cfg.stop:
            if s in text:
                text, reason = text[:text.index(s) + len(s)], "stop"
        result.append(Completion(text, toks, reason))
    return result


def make_generate_fn(model, tokenizer, cfg: EvalConfig) -> tuple[GenerateFn, str]:
    """A ``(contexts, temperature, seed) -> completions`` function and the backend's name."""
    backend = rollout_backend(model, tokenizer) if cfg.backend in ("auto", "rollout") else None
    if backend is None and cfg.backend == "rollout":
        raise ImportError("EvalConfig.backend=rollout: rlvr.agents.rollout.hf is not installed")
    if backend is not None:
        base = importlib.import_module("rlvr.agents.rollout.base")

        def generate(contexts, temperature, seed):
            params = base.SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=temperature,
                                         top_p=cfg.top_p, stop=tuple(cfg.stop))
            g = backend.generate(contexts, params, seed=seed)
            return [Completion(t, list(ids), r)
                    for t, ids, r in zip(g.texts, g.token_ids, g.finish_reasons)]

        return generate, "rollout.hf"
    return (lambda contexts, temperature, seed:
            _hf_generate(model, tokenizer, contexts, temperature, seed, cfg)), "transformers.generate"


# -- Environments ------------------------------------------------------------------------------
def make_env(name: str, split: str = "test", **kwargs) -> gym.Env:
    """``gym.make`` of an env by short name (``kk``) or gymnasium id, passing ``split`` when the
    env takes one."""
    gid = name if name in gym.registry else env_id(name)
    spec = gym.spec(gid)
    module, attr = spec.entry_point.split(":")
    cls = getattr(importlib.import_module(module), attr)
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if "split" in params or takes_any:
        kwargs = {"split": split, **kwargs}
    return gym.make(gid, **kwargs)


def _groups(cfg: EvalConfig) -> list[tuple[str, dict[str, Any]]]:
    if not cfg.group_by:
        return [("all", dict(cfg.env_kwargs))]
    return [(str(v), {**cfg.env_kwargs, cfg.group_by: v}) for v in cfg.group_values]


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)


def _qa_scores(env_name: str, parsed: Any, ground_truth: Any) -> dict[str, float]:
    if env_name not in ("searchqa", "rlvr/SearchQA-v0"):
        return {}
    golds = gold_answers(ground_truth)
    return {"em": exact_match(parsed, golds), "f1": f1_score(parsed, golds)}


def _record(cfg: EvalConfig, group: str, index: int, mode: str, sample: int, prompt: str,
            reset_info: dict, completion_text: str, token_ids: Sequence[int], finish: str,
            reward: float, step_info: dict, extra: dict | None = None) -> dict[str, Any]:
    rec = {
        "item": f"{group}/{index}", "index": index, "group": group, "mode": mode, "sample": sample,
        "prompt": prompt, "response": completion_text, "n_tokens": len(token_ids),
        "finish_reason": finish, "reward": float(reward), "correct": bool(step_info.get("correct")),
        "reason": step_info.get("reason", ""), "parsed": _jsonable(step_info.get("parsed")),
        "ground_truth": _jsonable(reset_info.get("ground_truth")),
        "components": _jsonable(step_info.get("reward_components", {})),
    }
    for key in ("n_people", "difficulty", "hops", "data_source"):
        if key in reset_info:
            rec[key] = _jsonable(reset_info[key])
    rec.update(_qa_scores(cfg.env, step_info.get("parsed"), reset_info.get("ground_truth")))
    rec.update(extra or {})
    return rec


def _jobs(cfg: EvalConfig, n_tasks: int) -> list[tuple[int, str, int]]:
    """``(task, mode, sample)`` for every response to generate: greedy first, then samples."""
    jobs = [(t, "greedy", 0) for t in range(n_tasks)] if cfg.greedy else []
    jobs += [(t, "sample", j) for t in range(n_tasks) for j in range(cfg.k)]
    return jobs


def _single_turn(cfg, tokenizer, generate: GenerateFn, tasks, bar) -> list[dict[str, Any]]:
    records = []
    jobs = _jobs(cfg, len(tasks))
    by_task: dict[int, list[tuple[str, int, Completion]]] = {}
    for b, start in enumerate(range(0, len(jobs), cfg.batch_size)):
        batch = jobs[start:start + cfg.batch_size]
        for mode in ("greedy", "sample"):
            part = [j for j in batch if j[1] == mode]
            if not part:
                continue
            temp = 0.0 if mode == "greedy" else cfg.temperature
            outs = generate([tasks[t]["context"] for t, _, _ in part], temp, cfg.seed * 100_003 + b)
            for (t, m, s), c in zip(part, outs):
                by_task.setdefault(t, []).append((m, s, c))
        bar.update(len(batch))
    for t, task in enumerate(tasks):
        env = task["env"]
        for i, (mode, sample, c) in enumerate(by_task.get(t, [])):
            if i == 0 or not isinstance(env.unwrapped, SingleTurnEnv):
                env.reset(seed=cfg.seed, options={"index": task["index"]})
            _, reward, _, _, info = env.step(c.text)
            records.append(_record(cfg, task["group"], task["index"], mode, sample, task["prompt"],
                                   task["info"], c.text, c.token_ids, c.finish_reason, reward, info))
    return records


def _multi_turn(cfg, model, tokenizer, tasks, bar) -> list[dict[str, Any]]:
    """Episodes through the trainer's multi-turn driver (``rlvr.agents.rollout.multiturn``)."""
    try:
        driver = importlib.import_module("rlvr.agents.rollout.multiturn")
    except ImportError as e:
        raise ImportError(f"env {cfg.env!r} is multi-turn; evaluating it needs the trainer's "
                          f"rlvr.agents.rollout.multiturn driver ({e})") from e
    return driver_records(driver, cfg, model, tokenizer, tasks, bar)


def driver_records(driver, cfg, model, tokenizer, tasks, bar) -> list[dict[str, Any]]:
    base = importlib.import_module("rlvr.agents.rollout.base")
    backend = rollout_backend(model, tokenizer)
    records = []
    jobs = _jobs(cfg, len(tasks))
    for b, start in enumerate(range(0, len(jobs), cfg.batch_size)):
        batch = jobs[start:start + cfg.batch_size]
        for mode in ("greedy", "sample"):
            part = [j for j in batch if j[1] == mode]
            if not part:
                continue
            params = base.SamplingParams(
                max_new_tokens=cfg.max_new_tokens,
                temperature=0.0 if mode == "greedy" else cfg.temperature, top_p=cfg.top_p,
                stop=tuple(cfg.stop))
            envs = []
            for t, _, _ in part:
                env = make_env(cfg.env, cfg.split, **tasks[t]["env_kwargs"])
                env.reset(seed=cfg.seed, options={"index": tasks[t]["index"]})
                envs.append(env)
            episodes = driver.run_episodes(
                backend, tokenizer, envs, [tasks[t]["prompt"] for t, _, _ in part], params,
                max_response_tokens=cfg.max_new_tokens, seed=cfg.seed * 100_003 + b)
            for env in envs:
                env.close()
            for (t, m, s), ep in zip(part, episodes):
                task = tasks[t]
                info = dict(ep.info)
                if ep.error:
                    info.update(correct=False, reason=f"error: {ep.error.splitlines()[0]}")
                generated = [i for i, keep in zip(ep.response_ids, ep.loss_mask) if keep]
                records.append(_record(
                    cfg, task["group"], task["index"], m, s, task["prompt"], task["info"],
                    ep.response_text, generated, ep.finish_reason, ep.reward, info,
                    extra={"turns": ep.turns, "tool_calls": ep.response_text.count("</search>")}))
        bar.update(len(batch))
    return records


def evaluate(cfg: EvalConfig, model=None, tokenizer=None, *, progress: bool = True) -> EvalResult:
    """Run the evaluation described by ``cfg`` (see the module docstring).

    ``model``/``tokenizer`` skip loading (e.g. the trainer's live policy); otherwise ``cfg.model``
    is loaded with ``rlvr.models.load_model``.
    """
    start = time.perf_counter()
    if model is None:
        from rlvr.models import load_model

        model, tokenizer = load_model(cfg.model)
        model.to(cfg.device)
    model.eval()
    tasks = []
    multi_turn = False
    for group, kwargs in _groups(cfg):
        env = make_env(cfg.env, cfg.split, **kwargs)
        multi_turn = multi_turn or not isinstance(env.unwrapped, SingleTurnEnv)
        available = getattr(env.unwrapped, "num_tasks", None)
        n_items = cfg.n_items if available is None else min(cfg.n_items, int(available))
        for i in range(n_items):
            prompt, info = env.reset(seed=cfg.seed, options={"index": i})
            tasks.append({"group": group, "index": i, "prompt": prompt, "info": info, "env": env,
                          "env_kwargs": kwargs,
                          "context": tokenizer.encode(prompt, add_special_tokens=False)})
    n_jobs = len(_jobs(cfg, len(tasks)))
    bar = tqdm(total=n_jobs, desc=f"eval {cfg.env}", unit="resp", disable=not progress,
               dynamic_ncols=True, leave=False)
    try:
        if multi_turn:
            records = _multi_turn(cfg, model, tokenizer, tasks, bar)
        else:
            generate, _ = make_generate_fn(model, tokenizer, cfg)
            records = _single_turn(cfg, tokenizer, generate, tasks, bar)
    finally:
        bar.close()
        for t in tasks:
            t["env"].close()
    ks = sorted(set(cfg.pass_ks) | ({cfg.k} if cfg.k else set()))
    summary = summarize_by_group(records, ks=ks)
    return EvalResult(records, summary, time.perf_counter() - start, dataclasses.asdict(cfg))


def write_jsonl(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """One JSON object per response (written to a temporary file, then renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(_jsonable(r)) + "\n")
    tmp.replace(path)
    return path


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def save_result(result: EvalResult, out_dir: str | Path) -> Path:
    """``responses.jsonl`` and ``summary.json`` (config, seconds, metrics per group) in ``out_dir``."""
    out = Path(out_dir)
    write_jsonl(result.records, out / "responses.jsonl")
    (out / "summary.json").write_text(json.dumps(_jsonable(
        {"config": result.config, "seconds": round(result.seconds, 2), "summary": result.summary}),
        indent=2))
    return out


__all__ = ["Completion", "EvalConfig", "EvalResult", "evaluate", "make_env", "make_generate_fn",
           "read_jsonl", "save_result", "write_jsonl"]
