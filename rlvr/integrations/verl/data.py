"""Our tasks as verl-ready parquet (``rlvr prepare-verl``).

One row per task, in the layout of verl's ``examples/data_preprocess`` scripts, which verl's
``RLHFDataset`` reads (``data.prompt_key=prompt``) and its reward managers hand to
``compute_score``:

- ``data_source``: ``rlvr/<env>`` or ``rlvr/<env>/<dataset>`` (``rlvr.integrations.verl_reward``
  dispatches on it);
- ``prompt``: the chat messages (``[{"role", "content"}]``), which verl renders with the model's
  own chat template;
- ``ability``: ``logic`` / ``math`` / ``qa``;
- ``reward_model``: ``{"style": "rule", "ground_truth": ...}``: K&K's answer in Logic-RL's
  ``(1) Name is a knight`` text, math's gold answer text, search QA's ``{"target": [answers]}``
  (Search-R1's layout); each reads back with the environment's own scorer;
- ``extra_info``: ``split``, ``index`` and the scoring options ``verl_reward`` reads
  (``prefilled_think`` for K&K: False, since verl's chat rendering does not prefill the assistant
  turn with ``<think>``; ``require_think`` for math); search QA adds the ``question``;
- ``agent_name`` (search QA only): ``rlvr_searchqa``, the agent loop verl's rollout workers run
  for the row (``rlvr.integrations.verl_agent_loop``), which reads the question from
  ``extra_info`` and the gold answers from ``reward_model``.

Tasks come from the environment itself (``gymnasium.make`` + ``reset(seed, options={"index": i})``),
so generators and dataset-backed environments export the same way and the rows are reproducible.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterator

ABILITY = {"kk": "logic", "math": "math", "searchqa": "qa"}
#: verl's per-row agent loop (``agent_name`` column) for the multi-turn envs.
AGENT_NAME = {"searchqa": "rlvr_searchqa"}

#: The verl 0.9.1 overrides a search-QA run needs (the agent loop ``rlvr_searchqa`` of
#: ``rlvr.integrations.verl_agent_loop``), ``key: value`` as Hydra command-line overrides. Kept
#: here, free of verl imports, so launch scripts can be generated where verl is not installed.
SEARCHQA_VERL_OVERRIDES: dict[str, object] = {
    # Agent loops run only in async rollout mode (verl/workers/config/rollout.py rejects "sync").
    "actor_rollout_ref.rollout.mode": "async",
    # Rows carry agent_name; the default covers files exported without the column.
    "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME["searchqa"],
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
    # The reward: our EM scorer on the decoded response (data_source rlvr/searchqa).
    "reward.custom_reward_function.path": "pkg://rlvr.integrations.verl_reward",
    "reward.custom_reward_function.name": "compute_score",
}
#: Search QA rows are exported without searching; an env for a public QA set still needs a
#: retriever, so export gives it the retrieval service's usual address (never contacted).
EXPORT_RETRIEVER = "http://127.0.0.1:8000"


def _parse_value(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def parse_env_args(pairs: list[str] | None) -> dict[str, Any]:
    """``["n_people=5", "depth=2"]`` -> ``{"n_people": 5, "depth": 2}`` (values read as YAML
    scalars)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env-arg: expected key=value, got {pair!r}")
        out[key.strip()] = _parse_value(value)
    return out


def kk_ground_truth(info: dict) -> str:
    """K&K gold in Logic-RL's text layout ``(1) Name is a knight`` (one line per person)."""
    text = info.get("solution_text_format")
    if text:
        return str(text)
    gt = info["ground_truth"]
    return "\n".join(
        f"({i}) {name} is a {role}" for i, (name, role) in enumerate(gt.items(), start=1)
    )


def encode_ground_truth(env: str, info: dict) -> Any:
    """The ``reward_model.ground_truth`` cell for ``env`` (one parquet type per environment)."""
    if env == "kk":
        return kk_ground_truth(info)
    if env == "math":
        from rlvr.envs.math import gold_to_text

        return gold_to_text(info["ground_truth"])
    if env == "searchqa":
        from rlvr.envs.searchqa.normalize import as_gold_list

        return {"target": [str(a) for a in as_gold_list(info["ground_truth"])]}
    raise ValueError(f"env: {env!r} is not one of {sorted(ABILITY)}")


def _extra_info(env: str, split: str, index: int, env_kwargs: dict, info: dict) -> dict:
    extra: dict[str, Any] = {"split": split, "index": index}
    if env == "kk":
        extra["prefilled_think"] = False
    elif env == "math":
        extra["require_think"] = bool(env_kwargs.get("require_think", False))
    elif env == "searchqa":
        extra["question"] = str(info["question"])
    return extra


def verl_rows(
    env: str,
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    start: int = 0,
    env_kwargs: dict | None = None,
) -> Iterator[dict]:
    """Rows ``start .. start+n-1`` of ``env``'s ``split`` in verl's parquet layout (module
    docstring)."""
    import gymnasium as gym

    import rlvr  # noqa: F401  (registers the gymnasium ids)
    from rlvr.envs import env_id

    if env not in ABILITY:
        raise ValueError(f"env: {env!r} is not one of {sorted(ABILITY)}")
    if n < 0 or start < 0:
        raise ValueError(f"n/start: must be >= 0, got n={n}, start={start}")
    kwargs = dict(env_kwargs or {})
    kwargs.setdefault("split", split)
    dataset = kwargs.get("dataset")
    if env == "searchqa" and dataset not in (None, "synthetic"):
        if not any(kwargs.get(k) for k in ("corpus", "index_path", "retriever")):
            kwargs["retriever"] = EXPORT_RETRIEVER
    data_source = f"rlvr/{env}" + (f"/{Path(str(dataset)).stem}" if dataset else "")
    handle = gym.make(env_id(env), **kwargs)
    try:
        for i in range(start, start + n):
            _, info = handle.reset(seed=seed, options={"index": i})
            row = {
                "data_source": data_source,
                "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]],
                "ability": ABILITY[env],
                "reward_model": {"style": "rule", "ground_truth": encode_ground_truth(env, info)},
                "extra_info": _extra_info(env, split, i, kwargs, info),
            }
            if env in AGENT_NAME:
                row["agent_name"] = AGENT_NAME[env]
            yield row
    finally:
        handle.close()


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
    parser.add_argument("env", choices=sorted(ABILITY), help="environment to export")
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


def run(args: argparse.Namespace) -> int:
    rows = list(
        verl_rows(
            args.env,
            args.n,
            split=args.split,
            seed=args.seed,
            start=args.start,
            env_kwargs=parse_env_args(args.env_arg),
        )
    )
    path = write_parquet(rows, args.out)
    print(f"wrote {len(rows)} {args.env} tasks ({args.split}) to {path}")
    return 0
