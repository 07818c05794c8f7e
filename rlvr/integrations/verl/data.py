"""Our tasks as verl-ready parquet (``rlvr prepare-verl``).

One row per task, in the layout of verl's ``examples/data_preprocess`` scripts, which verl's
``RLHFDataset`` reads (``data.prompt_key=prompt``) and its reward managers hand to
``compute_score``:

- ``data_source``: ``rlvr/<env>`` or ``rlvr/<env>/<dataset>`` (``rlvr.integrations.verl.reward``
  dispatches on it);
- ``prompt``: the chat messages (``[{"role", "content"}]``), which verl renders with the model's
  own chat template;
- ``ability``: the environment's (``EnvSpec.verl.ability``: ``logic`` / ``math`` / ``qa``);
- ``reward_model``: ``{"style": "rule", "ground_truth": ...}`` (``EnvSpec.verl.gold``, else
  ``EnvSpec.gold``): K&K's answer in Logic-RL's ``(1) Name is a knight`` text, math's gold answer
  text, search QA's ``{"target": [answers]}`` (Search-R1's layout); each reads back with the
  environment's own scorer;
- ``extra_info``: ``split``, ``index``, the scoring options the row records
  (``EnvSpec.row_options``: ``prefilled_think`` False for K&K, since verl's chat rendering does
  not prefill the assistant turn with ``<think>``; ``require_think`` for math) and the reset-info
  keys an agent loop reads (``EnvSpec.verl.info_keys``: search QA's ``question``);
- ``agent_name`` (multi-turn envs): the agent loop verl's rollout workers run for the row
  (``EnvSpec.verl.agent_loop``: search QA's ``rlvr_searchqa``,
  ``rlvr.integrations.verl.agent_loop``), which reads the question from ``extra_info`` and the
  gold answers from ``reward_model``.

Tasks come from the environment itself (``gymnasium.make`` + ``reset(seed, options={"index": i})``),
so generators and dataset-backed environments export the same way and the rows are reproducible.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from rlvr.config import ConfigError, parse_overrides
from rlvr.envs import ENVS, env_names, env_spec, load, reset_tasks
from rlvr.models.prompt_formats import export_settings

#: The verl 0.9.1 overrides a run on a multi-turn env needs (its agent loop, e.g. search QA's
#: ``rlvr_searchqa`` of ``rlvr.integrations.verl.agent_loop``), ``key: value`` as Hydra
#: command-line overrides. Kept here, free of verl imports, so launch scripts can be generated
#: where verl is not installed.
AGENT_LOOP_OVERRIDES: dict[str, object] = {
    # Agent loops run only in async rollout mode (verl/workers/config/rollout.py rejects "sync").
    "actor_rollout_ref.rollout.mode": "async",
    # Rows carry agent_name; the default covers files exported without the column.
    "actor_rollout_ref.rollout.agent.default_agent_loop": "",
    # Agent loops read the chat messages (RLHFDataset's raw_prompt) and render them themselves.
    "data.return_raw_chat": True,
    # Marks the batches as multi-turn (ray_trainer._update_actor's meta_info), as verl's own
    # Search-R1 example (examples/sglang_multiturn/config/search_multiturn_grpo.yaml) sets it.
    "actor_rollout_ref.rollout.multi_turn.enable": True,
    # Stop strings need the engine's tokenizer: vLLM always loads it, SGLang only with this off.
    "actor_rollout_ref.rollout.skip_tokenizer_init": False,
    # Workers that run trajectories concurrently (verl's default, stated because each one also
    # holds that many retrieval calls in flight).
    "actor_rollout_ref.rollout.agent.num_workers": 8,
    # The reward: our scorer on the decoded response (rlvr.integrations.verl.reward).
    "reward.custom_reward_function.path": "pkg://rlvr.integrations.verl.reward",
    "reward.custom_reward_function.name": "compute_score",
}


def agent_loop_overrides(env: str) -> dict[str, object]:
    """``AGENT_LOOP_OVERRIDES`` for ``env``'s agent loop (``{}`` for a single-turn env)."""
    loop = env_spec(env).verl.agent_loop
    if not loop:
        return {}
    return {
        **AGENT_LOOP_OVERRIDES,
        "actor_rollout_ref.rollout.agent.default_agent_loop": loop,
    }


#: Host names that only reach the machine they are resolved on.
LOOPBACK = ("localhost", "localhost.localdomain", "ip6-localhost", "::1")


def is_loopback(host: str) -> bool:
    return host.lower() in LOOPBACK or host.startswith("127.") or host == "0.0.0.0"


def cpu_nodes(nodes: list[dict]) -> list[dict]:
    """The Ray nodes verl 0.9.1 places agent-loop workers on: alive, with CPUs
    (``AgentLoopManager._init_agent_loop_workers``, ``experimental/agent_loop/agent_loop.py``:
    round-robin over them, ``NodeAffinitySchedulingStrategy``)."""
    return [n for n in nodes if n.get("Alive") and (n.get("Resources") or {}).get("CPU", 0) > 0]


def service_key(spec) -> str:
    """``rlvr.<env>.<url key>``: where a run's config holds the URL of ``spec``'s service."""
    return f"rlvr.{spec.name}.{spec.verl.service.url_key}"


def check_service_reachable(env: str, url: str, nodes: list[dict]) -> None:
    """``ValueError`` (one line) when the agent-loop workers spread over several nodes of
    ``nodes`` (``ray.nodes()``) and ``url``, where ``env``'s agent loop calls its service
    (``EnvSpec.verl.service``), is a loopback address, which only the node running the service
    reaches: every call of the other nodes' workers would fail."""
    spec = env_spec(env)
    service = spec.verl.service
    host = urlsplit(url).hostname or ""
    n = len(cpu_nodes(nodes))
    if n > 1 and is_loopback(host):
        raise ValueError(
            f"{service_key(spec)}={url} is a loopback address, but verl places its agent-loop "
            f"workers on all {n} nodes of this Ray cluster: run `rlvr {service.serve.split()[0]} "
            f"--host <an address every node reaches>` and set {service.url_var} to it"
        )


def agent_loop_envs() -> list:
    """The registered environments whose verl agent loop reads a section of the run's config."""
    return [s for s in ENVS.values() if s.verl.agent_loop and s.verl.section is not None]


def agent_loop_section(env: str, env_kwargs: dict[str, Any]) -> tuple[str, dict] | None:
    """``(name, settings)`` of the ``rlvr.<name>`` section ``env``'s agent loop reads
    (``EnvSpec.verl.section``; None for an env without one)."""
    spec = env_spec(env)
    if not spec.verl.agent_loop or spec.verl.section is None:
        return None
    return spec.name, load(spec.verl.section)(env_kwargs)


def parse_env_args(pairs: list[str] | None) -> dict[str, Any]:
    """``["n_people=5", "depth=2"]`` -> ``{"n_people": 5, "depth": 2}`` (values read as YAML
    scalars, by the one configuration parser)."""
    try:
        return parse_overrides(list(pairs or []))
    except ConfigError as e:
        raise ValueError(f"--env-arg: {e}") from None


def verl_rows(
    env: str,
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    start: int = 0,
    env_kwargs: dict | None = None,
    model: str | None = None,
) -> Iterator[dict]:
    """Rows ``start .. start+n-1`` of ``env``'s ``split`` in verl's parquet layout (module
    docstring); with ``model``, the env settings start from the prompt format it carries
    (``rlvr.models.prompt_formats``; verl renders the messages with its chat template)."""
    spec = env_spec(env)
    if n < 0 or start < 0:
        raise ValueError(f"n/start: must be >= 0, got n={n}, start={start}")
    kwargs = export_settings(model, env, env_kwargs or {}, chat=True)
    kwargs.setdefault("split", split)
    if spec.verl.export_kwargs is not None:
        kwargs = load(spec.verl.export_kwargs)(kwargs)
    dataset = kwargs.get("dataset")
    data_source = f"rlvr/{env}" + (f"/{Path(str(dataset)).stem}" if dataset else "")
    for i, _, info in reset_tasks(env, range(start, start + n), seed=seed, **kwargs):
        row = {
            "data_source": data_source,
            "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]],
            "ability": spec.verl.ability or env,
            "reward_model": {"style": "rule", "ground_truth": spec.export_gold(info, "verl")},
            "extra_info": {
                "split": split,
                "index": i,
                **spec.export_options(kwargs),
                **{k: info[k] for k in spec.verl.info_keys},
            },
        }
        if spec.verl.agent_loop:
            row["agent_name"] = spec.verl.agent_loop
        yield row


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    """Write rows to ``path`` (parent folders created); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError("rows: nothing to write (n = 0)")
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env", choices=sorted(env_names()), help="environment to export")
    parser.add_argument("--out", required=True, help="output .parquet file")
    parser.add_argument("--n", type=int, required=True, help="number of tasks")
    parser.add_argument("--split", default="train", help="environment split (default train)")
    parser.add_argument("--seed", type=int, default=0, help="reset seed (default 0)")
    parser.add_argument("--start", type=int, default=0, help="first task index (default 0)")
    parser.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment keyword argument, e.g. n_people=5 or dataset=aime24 (repeatable)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="the model the rows are for: its prompt format (a tiny base's, a run's) is the "
        "environment's starting settings",
    )


def run(args: argparse.Namespace) -> int:
    kwargs = parse_env_args(args.env_arg)
    try:
        rows = list(
            verl_rows(
                args.env,
                args.n,
                split=args.split,
                seed=args.seed,
                start=args.start,
                env_kwargs=kwargs,
                model=args.model,
            )
        )
    except ConfigError:
        raise
    except (TypeError, ValueError, OSError) as e:  # what the env refuses: one line (rlvr.cli)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"--env-arg: env {args.env!r} rejected {kwargs}: {first}") from None
    path = write_parquet(rows, args.out)
    print(f"wrote {len(rows)} {args.env} tasks ({args.split}) to {path}")
    return 0
