"""Evaluate a checkpoint on an environment's test items: greedy accuracy, avg@k and pass@k.

``evaluate(cfg)`` loads the model (``micro``, a local directory, a tiny-model name or a hub name),
draws items ``0..n_items-1`` of each group (fewer when the split has fewer tasks) with
``env.reset(seed=cfg.seed, options={"index": i})`` (``split="test"``), generates one greedy
response and ``k`` sampled responses per item in batches (a tqdm bar counts responses), scores
each with the environment's own ``step`` and returns every response as a record (see
``rlvr.eval.metrics``) with the summary per group. ``rlvr.eval.records`` saves the records, so
figures are redrawn without rerunning the model.

``EvalConfig`` is the one description of an evaluation: the trainer's periodic evaluation is
the ``EvalConfig`` its ``eval.*`` schedule and ``rollout.*`` settings give
(``rlvr.training.train_config.periodic_eval_config``), played on the live policy.

Responses come from the job loop the trainer also uses (``rlvr.agents.rollout.jobs``): the
trainer's rollout backend (``rlvr.agents.rollout.hf``; ``backend=generate`` swaps in
``model.generate``) and its episode driver, so tool calls, observations and turn limits of
multi-turn environments (search QA) match training exactly.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from rlvr.agents.rollout import Generation, RolloutBackend, SamplingParams, make_backend
from rlvr.agents.rollout.chat import model_prompt
from rlvr.agents.rollout.jobs import Job, plan, play
from rlvr.agents.rollout.multiturn import episode_seed
from rlvr.config import ConfigError
from rlvr.device import check_device_present, resolve_device
from rlvr.envs import env_spec, make_env
from rlvr.eval.config import EvalConfig
from rlvr.eval.metrics import ANSWER_METRICS, summarize_by_group
from rlvr.eval.records import jsonable
from rlvr.models import load_model
from rlvr.models.names import check_model_name
from rlvr.models.prompt_formats import with_format


@dataclass
class EvalResult:
    records: list[dict[str, Any]]
    summary: dict[Any, dict[str, float]]
    seconds: float
    config: dict[str, Any]
    #: The prompt settings the model saw (``EnvSpec.prompt_keys``) and where they came from.
    prompt: dict[str, Any] = field(default_factory=dict)

    def metric(self, name: str, group: Any = "all") -> float:
        return self.summary[group][name]


# -- Generation ---------------------------------------------------------------------------------
@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str


GenerateFn = Callable[[list[list[int]], float, int], list[Completion]]


def backend_name(cfg: EvalConfig) -> str:
    """The rollout backend (``rlvr.agents.rollout.make_backend``) that ``cfg.backend`` selects:
    the trainer's own sampler, or ``model.generate`` with ``backend=generate``."""
    return "generate" if cfg.backend == "generate" else "hf"


def make_generate_fn(model, tokenizer, cfg: EvalConfig) -> tuple[GenerateFn, str]:
    """A ``(contexts, temperature, seed) -> completions`` function and the backend's name; the
    function's ``backend`` is the rollout backend it samples with (a bar sets its ``on_step``)."""
    name = backend_name(cfg)
    backend = make_backend(name, model, tokenizer)

    def generate(contexts, temperature, seed):
        params = SamplingParams(
            max_new_tokens=cfg.max_new_tokens,
            temperature=temperature,
            top_p=cfg.top_p,
            stop=tuple(cfg.stop),
        )
        g = backend.generate(contexts, params, seed=seed)
        return [
            Completion(t, list(ids), r) for t, ids, r in zip(g.texts, g.token_ids, g.finish_reasons)
        ]

    generate.backend = backend
    return generate, {"hf": "rollout.hf", "generate": "transformers.generate"}[name]


class CompletionBackend(RolloutBackend):
    """A ``GenerateFn`` behind the rollout interface, so that single-turn evaluation runs
    through the episode driver: one call per part, every row with the full budget."""

    def __init__(self, generate: GenerateFn):
        self._generate = generate

    def generate(self, contexts, params, *, seed, max_new_tokens=None) -> Generation:
        outs = self._generate(contexts, params.temperature, seed)
        return Generation(
            [list(c.token_ids) for c in outs],
            [[0.0] * len(c.token_ids) for c in outs],
            [c.finish_reason for c in outs],
            [c.text for c in outs],
        )


def _groups(cfg: EvalConfig) -> list[tuple[str, dict[str, Any]]]:
    if not cfg.group_by:
        return [("all", dict(cfg.env_kwargs))]
    return [(str(v), {**cfg.env_kwargs, cfg.group_by: v}) for v in cfg.group_values]


def _record(
    cfg: EvalConfig,
    group: str,
    index: int,
    mode: str,
    sample: int,
    prompt: str,
    reset_info: dict,
    completion_text: str,
    token_ids: Sequence[int],
    finish: str,
    reward: float,
    step_info: dict,
    extra: dict | None = None,
) -> dict[str, Any]:
    rec = {
        "item": f"{group}/{index}",
        "index": index,
        "group": group,
        "mode": mode,
        "sample": sample,
        "prompt": prompt,
        "response": completion_text,
        "n_tokens": len(token_ids),
        "finish_reason": finish,
        "reward": float(reward),
        "correct": bool(step_info.get("correct")),
        "reason": step_info.get("reason", ""),
        "parsed": jsonable(step_info.get("parsed")),
        "ground_truth": jsonable(reset_info.get("ground_truth")),
        "components": jsonable(step_info.get("reward_components", {})),
    }
    spec = env_spec(cfg.env)
    for key in spec.record_keys:
        if key in reset_info:
            rec[key] = jsonable(reset_info[key])
    for name in spec.answer_metrics:  # EM and F1 of a QA answer
        rec[name] = ANSWER_METRICS[name](step_info.get("parsed"), reset_info.get("ground_truth"))
    rec.update(extra or {})
    return rec


def _single_turn_envs(cfg: EvalConfig, tasks: list[dict[str, Any]]):
    """``envs_for`` of single-turn tasks: an env per distinct task of a part, reused across
    parts (a single-turn env scores any number of responses after one ``reset``)."""
    pools: dict[str, list] = {t["group"]: [t["env"]] for t in tasks}

    def envs_for(part: list[Job]):
        taken: dict[int, Any] = {}
        used: dict[str, int] = {}
        for job in part:
            if job.task in taken:
                continue
            task = tasks[job.task]
            pool, slot = pools[task["group"]], used.get(task["group"], 0)
            if slot == len(pool):
                pool.append(make_env(cfg.env, cfg.split, **task["env_kwargs"]))
            used[task["group"]] = slot + 1
            taken[job.task] = pool[slot]
            pool[slot].reset(seed=cfg.seed, options={"index": task["index"]})
        return [taken[j.task] for j in part], [tasks[j.task]["prompt"] for j in part]

    return envs_for, pools


def _multi_turn_envs(cfg: EvalConfig, tasks: list[dict[str, Any]]):
    """``envs_for`` of multi-turn tasks: a fresh env per response, reset to its task."""

    def envs_for(part: list[Job]):
        envs = []
        for job in part:
            env = make_env(cfg.env, cfg.split, **tasks[job.task]["env_kwargs"])
            env.reset(seed=cfg.seed, options={"index": tasks[job.task]["index"]})
            envs.append(env)
        return envs, [tasks[j.task]["prompt"] for j in part]

    return envs_for


def _close(envs) -> None:
    for env in envs:
        env.close()


class ResponseBar:
    """The evaluation's bar in responses. Single-turn responses are counted as their generation
    ends, per decoding step (``RolloutBackend.on_step``), so a part of 64 long responses moves
    while it runs; where no step is reported (``model.generate``) or an episode has more turns
    than one generation, a part's responses are counted when it ends, and the rows still
    generating show beside the count."""

    def __init__(self, bar, count_steps: bool):
        self.bar, self.count_steps, self.counted = bar, count_steps, 0

    def step(self, finished: int, live: int) -> None:
        if self.count_steps and finished:
            self.bar.update(finished)
            self.counted += finished
        self.bar.set_postfix_str(f"generating {live}", refresh=False)
        self.bar.update(0)  # redraws (elapsed time, postfix) at tqdm's own pace

    def part(self, n: int) -> None:
        self.bar.update(max(0, n - self.counted))
        self.counted = 0


def _records(
    cfg: EvalConfig, model, tokenizer, tasks, multi_turn: bool, bar
) -> list[dict[str, Any]]:
    """Play every job (``rlvr.agents.rollout.jobs``) and turn each episode into a record.

    Single-turn tasks sample with the seed of their chunk itself and list their records task by
    task; multi-turn tasks (search QA) run the trainer's multi-turn driver with the chunk seed,
    so tool calls, observations and turn limits match training, and list records as played.
    """
    base_seed = cfg.seed * 100_003
    progress = ResponseBar(bar, count_steps=not multi_turn)
    if multi_turn:
        backend = make_backend(backend_name(cfg), model, tokenizer)
        backend.on_step = progress.step
        envs_for, release, seed_of = (
            _multi_turn_envs(cfg, tasks),
            _close,
            (lambda chunk: base_seed + chunk),
        )
    else:
        generate = make_generate_fn(model, tokenizer, cfg)[0]
        if hasattr(generate, "backend"):
            generate.backend.on_step = progress.step
        backend = CompletionBackend(generate)
        envs_for, pools = _single_turn_envs(cfg, tasks)
        release, seed_of = None, lambda chunk: episode_seed(base_seed + chunk)
    greedy = SamplingParams(
        max_new_tokens=cfg.max_new_tokens, temperature=0.0, top_p=cfg.top_p, stop=tuple(cfg.stop)
    )
    params = {"greedy": greedy, "sample": dataclasses.replace(greedy, temperature=cfg.temperature)}
    played = play(
        backend,
        tokenizer,
        plan(len(tasks), greedy=cfg.greedy, k=cfg.k),
        envs_for=envs_for,
        params=params,
        seed_of=seed_of,
        max_response_tokens=cfg.max_new_tokens,
        batch_size=cfg.batch_size,
        release=release,
        on_part=progress.part,
    )
    if not multi_turn:
        played.sort(key=lambda p: p[0].task)  # stable: greedy, then samples, per task
        for pool in pools.values():
            _close(pool[1:])  # pool[0] is the task's own env, closed by the caller
    records = []
    for job, ep in played:
        task = tasks[job.task]
        info = dict(ep.info)
        if ep.error:
            info.update(correct=False, reason=f"error: {ep.error.splitlines()[0]}")
        generated = [i for i, keep in zip(ep.response_ids, ep.loss_mask) if keep]
        extra = (
            {"turns": ep.turns, "tool_calls": sum(map(env_spec(cfg.env).tool_calls, ep.turn_texts))}
            if multi_turn
            else None
        )
        records.append(
            _record(
                cfg,
                task["group"],
                task["index"],
                job.mode,
                job.sample,
                task["prompt"],
                task["info"],
                ep.response_text,
                generated,
                ep.finish_reason,
                ep.reward,
                info,
                extra=extra,
            )
        )
    return records


def _make_group_envs(cfg: EvalConfig) -> list[tuple[str, dict[str, Any], Any]]:
    """``(group, env_kwargs, env)`` per group; what an env rejects is one ``ConfigError``."""
    spec = env_spec(cfg.env)
    spec.check_kwargs(cfg.env_kwargs)
    out = []
    for group, kwargs in _groups(cfg):
        try:
            out.append((group, kwargs, make_env(cfg.env, cfg.split, **kwargs)))
        except (TypeError, ValueError, OSError) as e:  # a bad env_kwargs value or dataset
            _close(env for _, _, env in out)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(f"env_kwargs: env {cfg.env!r} rejected {kwargs}: {first}") from None
    return out


def evaluate(cfg: EvalConfig, model=None, tokenizer=None, *, progress: bool = True) -> EvalResult:
    """Run the evaluation described by ``cfg`` (see the module docstring).

    ``model``/``tokenizer`` skip loading (e.g. the trainer's live policy); otherwise ``cfg.model``
    is loaded with ``rlvr.models.load_model``.
    """
    start = time.perf_counter()
    source = "settings given"
    if model is None:
        check_model_name(cfg.model)
        kwargs, fmt = with_format(cfg.model, cfg.env, cfg.env_kwargs)
        if fmt is not None and fmt.settings(cfg.env):
            cfg, source = dataclasses.replace(cfg, env_kwargs=kwargs), f"model: {fmt.source}"
        check_device_present(cfg.device)
        envs = _make_group_envs(cfg)  # a bad env_kwargs value or dataset costs no model load
        try:
            model, tokenizer = load_model(cfg.model)
        except BaseException:
            _close(env for _, _, env in envs)
            raise
        model.to(resolve_device(cfg.device))
    else:
        envs = _make_group_envs(cfg)
    model.eval()
    tasks = []
    multi_turn = env_spec(cfg.env).multi_turn
    for group, kwargs, env in envs:
        available = getattr(env.unwrapped, "num_tasks", None)
        n_items = cfg.n_items if available is None else min(cfg.n_items, int(available))
        for i in range(n_items):
            prompt, info = env.reset(seed=cfg.seed, options={"index": i})
            prompt = model_prompt(tokenizer, env, prompt, info)
            tasks.append(
                {
                    "group": group,
                    "index": i,
                    "prompt": prompt,
                    "info": info,
                    "env": env,
                    "env_kwargs": kwargs,
                }
            )
    n_jobs = len(plan(len(tasks), greedy=cfg.greedy, k=cfg.k))
    bar = tqdm(
        total=n_jobs,
        desc=f"eval {cfg.env}",
        unit="resp",
        disable=not progress,
        dynamic_ncols=True,
        leave=False,
    )
    try:
        records = _records(cfg, model, tokenizer, tasks, multi_turn, bar)
    finally:
        bar.close()
        _close(env for _, _, env in envs)
    ks = sorted(set(cfg.pass_ks) | ({cfg.k} if cfg.k else set()))
    summary = summarize_by_group(records, ks=ks)
    prompt = {**env_spec(cfg.env).prompt_settings(cfg.env_kwargs), "source": source}
    return EvalResult(
        records, summary, time.perf_counter() - start, dataclasses.asdict(cfg), prompt
    )


__all__ = [
    "Completion",
    "EvalConfig",
    "EvalResult",
    "evaluate",
    "make_env",
    "make_generate_fn",
]
