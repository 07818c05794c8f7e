"""rlvr's environments served the OpenEnv way, and the typed client to reach them.

OpenEnv (tested: ``openenv`` 0.10.0, the successor of ``openenv-core``) serves an
``openenv.core.env_server.interfaces.Environment`` (``reset(seed, episode_id, **kwargs)``,
``step(action)``, ``state``) over HTTP and WebSocket with
``openenv.core.env_server.http_server.create_fastapi_app(env_factory, ActionCls, ObsCls)``; a
client subclasses ``openenv.core.env_client.EnvClient`` with ``_step_payload``,
``_parse_result`` and ``_parse_state`` (``openenv/core/env_client.py``). One WebSocket session is
one environment instance on the server.

Every registered env is served by the same two types: ``TextAction(text)`` is one policy turn,
``TextObservation(text)`` the prompt after ``reset`` or the env's observation after a step
(search results for search QA), with ``reward``, ``done`` and ``metadata``. ``reset`` takes
``seed`` and ``index`` (task ``index`` of the split). Rewards are the Gymnasium env's, step for
step. Clients may show observations (metadata included) to the policy, and an env's ``info``
holds the answer, so the metadata is only ``PUBLIC_RESET_KEYS`` / ``PUBLIC_STEP_KEYS`` of it
unless the server is started with ``expose_info=True`` (the whole ``info``, JSON-safe).

    python -m rlvr.integrations.openenv_server --env searchqa --port 8011 dataset=synthetic

    from rlvr.integrations.openenv_server import RlvrEnvClient, TextAction
    with RlvrEnvClient(base_url="http://127.0.0.1:8011").sync() as client:
        result = client.reset(seed=0, index=3)
        result = client.step(TextAction(text="<search> ... </search>"))
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any, Optional

from rlvr.config import ConfigError, parse_overrides
from rlvr.integrations.episodes import Episode, check_env_name, env_names, jsonable
from rlvr.integrations.extras import require_extra

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
    from pydantic import Field
except ImportError as e:
    require_extra(e, "openenv", "rlvr.integrations.openenv_server", __name__)

#: The ``info`` keys sent with observations by default: none of them reveals the answer.
PUBLIC_RESET_KEYS = ("index", "id", "messages")
PUBLIC_STEP_KEYS = ("reward_components", "correct", "terminated", "truncated")


class TextAction(Action):
    """One policy turn: the response text the env steps on."""

    text: str = Field(..., description="The policy's response for this turn")


class TextObservation(Observation):
    """The prompt (after reset) or the env's observation (after a step)."""

    text: str = Field(default="", description="Prompt after reset; env observation after a step")


class RlvrEnvironment(Environment[TextAction, TextObservation, State]):
    """One rlvr env behind OpenEnv's ``Environment`` interface (one instance per session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session owns its own gymnasium env

    def __init__(self, env: str, *, expose_info: bool = False, **env_kwargs: Any):
        super().__init__()
        self._episode = Episode(env, **env_kwargs)
        self._expose_info = bool(expose_info)
        self._state = State(episode_id=None, step_count=0)

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        index: Optional[int] = None,
        **kwargs: Any,
    ) -> TextObservation:
        if kwargs:
            raise ValueError(f"reset: unknown arguments {sorted(kwargs)} (takes seed, index)")
        prompt, info = self._episode.reset(seed=seed, index=index)
        self._state = State(
            episode_id=episode_id or uuid.uuid4().hex,
            step_count=0,
            env=self._episode.name,
            index=info.get("index"),
        )
        return TextObservation(
            text=prompt, done=False, reward=None, metadata=self._metadata(info, PUBLIC_RESET_KEYS)
        )

    def step(
        self, action: TextAction, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> TextObservation:
        t = self._episode.step(action.text)
        self._state.step_count += 1
        info = {**t.info, "terminated": t.terminated, "truncated": t.truncated}
        return TextObservation(
            text=t.observation,
            done=t.done,
            reward=t.reward,
            metadata=self._metadata(info, PUBLIC_STEP_KEYS),
        )

    def _metadata(self, info: dict, public: tuple[str, ...]) -> dict:
        return jsonable(info if self._expose_info else {k: info[k] for k in public if k in info})

    @property
    def state(self) -> State:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self._episode.env.unwrapped).__doc__ or "").strip().splitlines()
        return EnvironmentMetadata(
            name=self._episode.env_id,
            description=doc[0] if doc else self._episode.env_id,
            version=_rlvr_version(),
        )

    def close(self) -> None:
        self._episode.close()


def _rlvr_version() -> str:
    import rlvr

    return rlvr.__version__


def make_app(
    env: str, *, max_concurrent_envs: int = 8, expose_info: bool = False, **env_kwargs: Any
):
    """The FastAPI app serving ``env`` (``kk``, ``math``, ``searchqa``, ...) with its kwargs;
    ``expose_info=True`` sends the env's whole ``info`` (answers included) as metadata."""
    check_env_name(env)
    if max_concurrent_envs < 1:
        raise ValueError(f"max_concurrent_envs: must be >= 1, got {max_concurrent_envs}")
    Episode(env, **env_kwargs).close()  # bad env arguments fail here, not in the first session

    def factory() -> RlvrEnvironment:
        return RlvrEnvironment(env, expose_info=expose_info, **env_kwargs)

    return create_fastapi_app(
        factory,
        TextAction,
        TextObservation,
        env_name=f"rlvr-{env}",
        max_concurrent_envs=max_concurrent_envs,
    )


class RlvrEnvClient(EnvClient[TextAction, TextObservation, State]):
    """Typed OpenEnv client for an rlvr env server (async; ``.sync()`` for blocking use)."""

    def _step_payload(self, action: TextAction) -> dict[str, Any]:
        return {"text": action.text}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        obs = payload.get("observation") or {}
        metadata = payload.get("metadata", obs.get("metadata")) or {}
        observation = TextObservation(
            text=obs.get("text", ""),
            done=payload.get("done", False),
            reward=payload.get("reward"),
            metadata=metadata,
        )
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=payload.get("done", False),
            metadata=metadata,
        )

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m rlvr.integrations.openenv_server",
        description="Serve an rlvr env over OpenEnv's HTTP/WebSocket API.",
    )
    p.add_argument("--env", required=True, choices=env_names())
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-concurrent-envs", type=int, default=8)
    p.add_argument(
        "--expose-info",
        action="store_true",
        help="send the env's whole info (answers included) as observation metadata",
    )
    p.add_argument("env_args", nargs="*", help="env arguments as key=value (YAML values)")
    args = p.parse_args(argv)
    try:
        env_kwargs = parse_overrides(args.env_args)
    except ConfigError as e:
        p.error(str(e))
    import uvicorn

    app = make_app(
        args.env,
        max_concurrent_envs=args.max_concurrent_envs,
        expose_info=args.expose_info,
        **env_kwargs,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
