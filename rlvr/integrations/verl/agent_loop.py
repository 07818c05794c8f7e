"""Multi-turn environments in verl 0.9.1: one agent loop per environment that declares one
(``EnvSpec.verl.agent_loop``; search QA's ``rlvr_searchqa``), described here for search QA.

verl 0.9.1 always rolls out through agent loops (``verl/experimental/agent_loop``): an
``AgentLoopWorker`` instantiates the loop registered under a row's ``agent_name`` (or
``rollout.agent.default_agent_loop``) once per trajectory and awaits
``run(sampling_params, **row)``, which talks to the rollout servers through
``server_manager.generate`` (token ids in, token ids out). verl's own ``tool_agent`` reads tool
calls in chat-template formats (hermes, gpt-oss, qwen3_coder, glm); none reads Search-R1's
``<search>`` tags, so this loop drives ``rlvr/SearchQA-v0`` itself:

1. the prompt is the row's chat messages rendered by verl (``ct_build_initial_tokens``, as
   ``single_turn_agent``);
2. each turn the policy continues the running sequence (prompt + everything so far) until a stop
   string ``</search>``/``</answer>``, its end token or the remaining response budget;
3. the turn's text goes to the environment's ``step`` (``rlvr.integrations.episodes.Episode``
   over ``gymnasium.make("rlvr/SearchQA-v0", retriever=<URL>)``): the env parses the action,
   queries ``rlvr retrieval-serve`` over HTTP, renders the ``<information>`` block or its
   corrective message, and decides termination (``<answer>``) and truncation (``max_turns``);
4. the observation text is tokenized on its own and appended inside the same assistant turn with
   ``response_mask`` 0; the policy's tokens carry mask 1 and their rollout log-probs.

This is Search-R1's rollout (``search_r1/llm_agent/generation.py`` at commit
a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06: ``run_llm_loop`` appends ``next_obs`` tokenized with
``add_special_tokens=False`` to the running sequence, ``_info_masked_concatenate_with_padding``
masks those tokens out of the loss, ``_postprocess_responses`` cuts each generation at its first
``</search>`` or ``</answer>``) and the one rlvr's native trainer runs
(``rlvr.agents.rollout.multiturn.run_episodes``), with the turn rules of our environment.

The loop computes no reward: verl's reward loop decodes the whole response (observations
included, special tokens skipped) and calls ``reward.custom_reward_function``; with
``rlvr.integrations.verl.reward.compute_score`` and the rows' ``data_source`` ``rlvr/searchqa``
that is the env's own EM scorer, which strips tool text before parsing, so the score equals the
env's episode reward.

The env's count of searches and the failed ones (``info["tool_calls"]``,
``info["tool_failures"]``) go out with each trajectory as extra fields (verl's
``non_tensor_batch``), where ``RlvrPPOTrainer`` logs them as ``search/calls`` and
``search/failed`` and stops the run past ``rlvr.max_tool_failure_rate``.

Everything environment-specific comes from the registry (``EnvSpec.verl``): the loop's name, its
stop strings, the one-task environment a row is played on (``task``) and the settings of the
run's config section ``rlvr.<env>`` (``section_keys``; search QA's ``rlvr.searchqa``:
``retrieval_url``, required as the URL of its ``service``, ``max_turns`` and ``topk``, the env's
defaults when unset, optional ``max_obs_chars``). ``rlvr.integrations.verl.data.
agent_loop_overrides`` lists the verl settings such a run needs (docs/integrations_verl.md,
"Search QA agent loop").
"""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer
from verl.utils.rollout_trace import rollout_trace_op

from rlvr.envs import ENVS, EnvSpec, env_spec, load
from rlvr.envs.base import TOOL_CALLS, TOOL_FAILURES
from rlvr.integrations.episodes import Episode

#: Sampling keys that make each engine keep the stop string in its output, so the token ids
#: returned hold the closing tag the env parses (vLLM ``SamplingParams``, SGLang sampling params).
KEEP_STOP = {"vllm": {"include_stop_str_in_output": True}, "sglang": {"no_stop_trim": True}}


def section_settings(spec: EnvSpec, config: Any) -> dict[str, Any]:
    """The env keyword arguments from the config section ``rlvr.<env>`` (``EnvSpec.verl``: its
    ``section_keys``, and its service's URL, which is required).

    Raises ``ValueError`` naming the key when the section or the service URL is missing or a
    key is unknown; the values themselves are checked by the env.
    """
    where, keys, service = f"config.rlvr.{spec.name}", spec.verl.section_keys, spec.verl.service
    rlvr_section = config.get("rlvr") if hasattr(config, "get") else None
    section = rlvr_section.get(spec.name) if hasattr(rlvr_section, "get") else None
    if not hasattr(section, "items"):
        example = f", e.g. +rlvr.{spec.name}.{service.url_key}=http://127.0.0.1:8000"
        raise ValueError(
            f"{where}: the {spec.verl.agent_loop} agent loop needs this section "
            f"({', '.join(keys)}){example if service else ''}"
        )
    unknown = sorted(set(section) - set(keys))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; known: {list(keys)}")
    if service is not None:
        url = str(section.get(service.url_key) or "")
        if not url:
            serve = service.serve.split()[0]
            raise ValueError(f"{where}.{service.url_key}: required (the URL of `rlvr {serve}`)")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{where}.{service.url_key}: expected http(s)://..., got {url!r}")
    return {keys[k]: v for k, v in section.items() if v is not None}


def stop_cut(tokenizer: Any, token_ids: list[int], stop: tuple[str, ...]) -> int:
    """How many of ``token_ids`` to keep: up to the token that completes the first stop string.

    An engine that applies the stop strings already ends there (this returns ``len``); one that
    does not, or that overshoots by a token, is cut the way Search-R1's
    ``_postprocess_responses`` cuts the decoded text, but on token boundaries, so the kept ids are
    the ones the engine sampled (their log-probs stay valid). A prefix's text only grows with its
    length, so the shortest prefix holding a stop string is found by bisection.
    """

    def has_stop(k: int) -> bool:
        text = tokenizer.decode(token_ids[:k], skip_special_tokens=True)
        return any(s in text for s in stop)

    n = len(token_ids)
    if n == 0 or not has_stop(n) or not has_stop(n - 1):
        return n  # no stop string, or the engine stopped right after it (the usual case)
    lo, hi = 1, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if has_stop(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class EnvAgentLoop(AgentLoopBase):
    """Episodes of a multi-turn environment for verl's agent-loop workers (module docstring);
    ``register_agent_loops`` makes one subclass per environment, its ``env`` set."""

    #: The registered environment the loop plays (``EnvSpec.name``).
    env: str = ""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.pop("tools", None)  # verl's tool list: the env owns its tools here
        super().__init__(*args, **kwargs)
        self.spec = env_spec(self.env)
        self.response_length = int(self.rollout_config.response_length)
        self.env_kwargs = section_settings(self.spec, self.config)

    def _sampling_params(self, sampling_params: dict[str, Any]) -> dict[str, Any]:
        params = dict(sampling_params)
        params["stop"] = list(self.spec.stop)
        params.update(KEEP_STOP.get(str(self.rollout_config.name), {}))
        return params

    def _episode(self, extra_info: dict[str, Any], ground_truth: Any) -> Episode:
        task = load(self.spec.verl.task)(extra_info, ground_truth)
        episode = Episode(self.spec.name, **task, **self.env_kwargs)
        episode.reset(index=0)
        return episode

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any):
        priority = int(priority)
        messages = list(kwargs["raw_prompt"])
        reward_model = kwargs.get("reward_model") or {}
        episode = self._episode(kwargs.get("extra_info") or {}, reward_model.get("ground_truth"))
        try:
            return await self._run(episode, messages, sampling_params, priority)
        finally:
            episode.close()

    async def _run(self, episode, messages, sampling_params, priority) -> AgentLoopOutput:
        metrics: dict[str, Any] = {}
        prompt_ids = await self.ct_build_initial_tokens(messages)
        full_determinism = getattr(self.rollout_config, "full_determinism", False)
        request_id = f"det-{priority}" if full_determinism else uuid4().hex
        params = self._sampling_params(sampling_params)
        out = _Response()
        extra_fields: dict[str, Any] = {}
        generations = observations = 0
        while len(out.ids) < self.response_length:
            budget = self.response_length - len(out.ids)
            with simple_timer("generate_sequences", metrics):
                output = await self.server_manager.generate(
                    request_id=request_id,
                    prompt_ids=prompt_ids + out.ids,
                    sampling_params={**params, "max_tokens": budget},
                    priority=priority,
                )
            _merge_server_fields(output, metrics, extra_fields)
            ids = list(output.token_ids)[:budget]
            ids = ids[: stop_cut(self.tokenizer, ids, self.spec.stop)]
            out.add_policy(ids, output.log_probs)
            generations += 1
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            with simple_timer("tool_calls", metrics):
                step = await self.loop.run_in_executor(None, episode.step, text)
            left = self.response_length - len(out.ids)
            if step.done or left <= 0:
                break
            obs_ids = self.tokenizer(step.observation, add_special_tokens=False)["input_ids"]
            out.add_env(list(obs_ids)[:left])
            observations += 1
        extra_fields.update({"turn_scores": [], "tool_rewards": []})
        # the env's tool calls and failures, per trajectory (RlvrPPOTrainer counts and checks)
        info = step.info
        extra_fields[TOOL_CALLS] = dict(info.get(TOOL_CALLS) or {})
        failures = info.get(TOOL_FAILURES) or {}
        extra_fields[TOOL_FAILURES] = {k: list(v) for k, v in failures.items()}
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=out.ids,
            response_mask=out.mask,
            response_logprobs=out.logprobs or None,
            # verl's count (tool_agent): the user prompt, each assistant turn, each tool turn.
            num_turns=1 + generations + observations,
            metrics=metrics,
            extra_fields=extra_fields,
        )


class _Response:
    """The response side of a trajectory: token ids, loss mask (1 policy, 0 env) and rollout
    log-probs (None as soon as one turn comes back without them)."""

    def __init__(self):
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: Optional[list[float]] = []

    def add_policy(self, ids: list[int], logprobs: Optional[list[float]]) -> None:
        self.ids += ids
        self.mask += [1] * len(ids)
        if self.logprobs is not None and logprobs is not None:
            self.logprobs += list(logprobs)[: len(ids)]
        else:
            self.logprobs = None

    def add_env(self, ids: list[int]) -> None:
        self.ids += ids
        self.mask += [0] * len(ids)
        if self.logprobs is not None:
            self.logprobs += [0.0] * len(ids)


def _merge_server_fields(output: Any, metrics: dict, extra_fields: dict) -> None:
    """A turn's server bookkeeping, as ``tool_agent`` keeps it: preemptions summed (absent: -1,
    unknown), the first turn's extra fields, the latest ``max_global_steps``."""
    if output.num_preempted is not None:
        metrics["num_preempted"] = max(0, metrics.get("num_preempted", 0)) + output.num_preempted
    if not extra_fields:
        extra_fields.update(output.extra_fields)
    elif output.extra_fields.get("max_global_steps") is not None:
        extra_fields["max_global_steps"] = output.extra_fields["max_global_steps"]


def register_agent_loops() -> dict[str, type]:
    """One ``EnvAgentLoop`` subclass per registered environment with an agent loop
    (``EnvSpec.verl.agent_loop``), registered with verl under that name and kept as an attribute
    of this module, where verl's Hydra instantiation finds it; ``env name -> class``."""
    loops = {}
    for spec in ENVS.values():
        if not spec.verl.agent_loop or spec.verl.task is None:
            continue
        name = "".join(part.title() for part in spec.name.split("_")) + "AgentLoop"
        cls = globals().get(name)
        if cls is None:
            cls = type(name, (EnvAgentLoop,), {"env": spec.name, "__module__": __name__})
            globals()[name] = register(spec.verl.agent_loop)(cls)
        loops[spec.name] = cls
    return loops


#: The agent loops of the registered environments (search QA's ``SearchqaAgentLoop``).
AGENT_LOOPS = register_agent_loops()
