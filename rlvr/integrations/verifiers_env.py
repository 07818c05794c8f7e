"""rlvr's environments as verifiers environments (tested: verifiers 0.4.0, ``verifiers.v1``).

verifiers 0.4 composes an environment from a ``Taskset`` (config in, ``Task``s out;
``verifiers/v1/taskset.py``), tasks that score a finished ``Trace`` (``@vf.reward`` /
``@vf.metric``; ``verifiers/v1/task.py``) and an ``Env`` whose ``run(task, agents)`` plays one
episode (``verifiers/v1/env.py``). Plugins are resolved by id: ``vf.load_environment(EnvConfig)``
imports the package named by ``--env.taskset.id`` and takes the ``Taskset``, ``Env`` and
``Harness`` subclasses it exports through ``__all__`` (``verifiers/v1/utils/loaders.py``). A
dotted id cannot be resolved there, so the id is the top-level package ``rlvr_verifiers``,
which re-exports this module.

- ``RlvrTaskset``: ``n`` tasks (``start``.. of the env's split, reset with ``seed``) of the
  registered env ``env`` with ``env_kwargs``; each task's prompt is the env's chat messages.
- ``RlvrEnv.run``: the env plays the user, as verifiers' own TextArena env does
  (``verifiers/v1/tasksets/textarena/taskset.py``): each assistant reply is one Gymnasium step;
  an observation (search results) goes back as the next user turn; the episode's end ends the
  exchange. Single-turn envs end after the first reply, multi-turn ones (search QA with
  ``<search>`` tags) when the env terminates or truncates.
- The rubric is the env's scorer: the reward ``<env>`` (weight 1) is the Gymnasium env's
  episode reward and each reward component is recorded as the metric ``<env>/<component>``.
- ``RlvrHarness``: verifiers' ``null`` harness (a plain chat loop, no tools), so the model
  answers in text as the environment's prompt asks.

    vf-eval rlvr_verifiers --env.taskset.env searchqa \\
        --env.taskset.env-kwargs '{"dataset": "synthetic"}' -n 5 --no-push \\
        --client.base-url http://127.0.0.1:8000/v1 --client.api-key-var OPENAI_API_KEY -m my-model

or in Python ``load_environment(env="searchqa", dataset="synthetic")``.
"""

from __future__ import annotations

from typing import Any, Iterator

from rlvr.integrations.episodes import Episode, check_env_name, jsonable
from rlvr.integrations.extras import require_extra

try:
    import verifiers.v1 as vf
    from pydantic import Field, field_validator
    from verifiers.v1.harnesses.null import NullHarness
except ImportError as e:
    require_extra(e, "verifiers", "rlvr.integrations.verifiers_env", __name__)

#: The taskset id under which verifiers finds this module (a top-level package).
TASKSET_ID = "rlvr_verifiers"


class RlvrTasksetConfig(vf.TasksetConfig):
    env: str = "kk"
    """A registered rlvr env: kk, math, searchqa."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """The env's own arguments, as for ``gymnasium.make``."""
    n: int = Field(100, ge=1)
    """How many tasks."""
    start: int = Field(0, ge=0)
    """Index of the first task in the env's split."""
    seed: int = 0
    """Seed passed to the env's ``reset``."""

    @field_validator("env")
    @classmethod
    def _known_env(cls, value: str) -> str:
        return check_env_name(value)


class RlvrData(vf.TaskData):
    info: dict
    """What the episode is reset from: env, env_kwargs, index, seed."""


class RlvrTask(vf.Task[RlvrData, vf.State, vf.TaskConfig]):
    pass


class RlvrTaskset(vf.Taskset[RlvrTask, RlvrTasksetConfig]):
    def load(self) -> Iterator[RlvrTask]:
        c = self.config
        episode = Episode(c.env, **c.env_kwargs)
        try:
            for i in range(c.start, c.start + c.n):
                episode.reset(seed=c.seed, index=i)
                messages = episode.messages
                system = next((m["content"] for m in messages if m["role"] == "system"), None)
                user = [m for m in messages if m["role"] != "system"]
                yield RlvrTask(
                    RlvrData(
                        name=f"{c.env}#{i}",
                        id=str(episode.info.get("id", i)),
                        prompt=user[0]["content"] if len(user) == 1 else user,
                        system_prompt=system,
                        info={
                            "env": c.env,
                            "env_kwargs": jsonable(c.env_kwargs),
                            "index": i,
                            "seed": c.seed,
                        },
                    ),
                    c.task,
                )
        finally:
            episode.close()


class RlvrEnvConfig(vf.EnvConfig):
    # The chat loop runs as a local subprocess: it executes no model text (verifiers' default
    # runtime is a remote Prime sandbox reached through a tunnel).
    player: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


#: One Episode per (env, kwargs) and concurrent slot, reused across rollouts of a process.
_FREE: dict[str, list[Episode]] = {}


def _acquire(info: dict) -> tuple[str, Episode]:
    key = repr((info["env"], sorted(info["env_kwargs"].items())))
    pool = _FREE.setdefault(key, [])
    return key, pool.pop() if pool else Episode(info["env"], **info["env_kwargs"])


class RlvrEnv(vf.Env[RlvrEnvConfig]):
    async def run(self, task, agents):
        info = task.data.info
        key, episode = _acquire(info)
        try:
            episode.reset(seed=info["seed"], index=info["index"])
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    t = episode.step(segment.last_reply)
                    if t.done:
                        break  # the episode is over: end the exchange
                    segment = await interaction.turn(t.observation)
                # Recorded before the exchange closes, so the rollout's reward includes it.
                trace = interaction.trace
                trace.record_reward(info["env"], episode.reward, 1.0)
                for name, value in episode.components.items():
                    trace.record_metric(f"{info['env']}/{name}", float(value))
                trace.info["rlvr_turns"] = len(episode.steps)
                trace.info["rlvr_done"] = episode.done
        finally:
            _FREE[key].append(episode)


class RlvrHarness(NullHarness):
    """verifiers' tool-less chat loop (``null``) as this taskset's default harness."""


def load_environment(
    env: str = "kk", *, n: int = 100, start: int = 0, seed: int = 0, **env_kwargs: Any
) -> vf.Env:
    """The verifiers environment of a registered rlvr env: ``RlvrEnv`` over ``RlvrTaskset``
    (``n`` tasks from ``start``), with ``env_kwargs`` passed to the Gymnasium env."""
    config = vf.resolve_env_config(
        {
            "taskset": {
                "id": TASKSET_ID,
                "env": env,
                "env_kwargs": env_kwargs,
                "n": n,
                "start": start,
                "seed": seed,
            }
        }
    )
    return vf.load_environment(config)


__all__ = ["RlvrTaskset", "RlvrEnv", "RlvrHarness", "load_environment"]
