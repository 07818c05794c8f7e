"""What a verl run needs to know of search QA, free of verl imports (``EnvSpec.verl``): the
settings of the agent loop's config section ``rlvr.searchqa`` and the one-task environment a row
is played on (``rlvr.integrations.verl.agent_loop``).
"""

from __future__ import annotations

from typing import Any

from rlvr.envs.searchqa.normalize import as_gold_list


def section(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The section of a run on ``env_kwargs``: the retrieval service (a URL: the loop runs in
    verl's workers, away from any in-process index), the turn limit and the passages per search
    (the env's defaults, 4 and 3, when unset)."""
    url = env_kwargs.get("retriever")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(
            f"env_kwargs.retriever={url!r}: search QA on verl queries a retrieval service: "
            "give its URL"
        )
    return {
        "retrieval_url": url,
        "max_turns": int(env_kwargs.get("max_turns", 4)),
        "topk": int(env_kwargs.get("topk", 3)),
    }


def task(extra_info: dict[str, Any], ground_truth: Any) -> dict[str, Any]:
    """The env keyword arguments of a one-question dataset: the row's question (``extra_info``,
    ``EnvSpec.verl.info_keys``) and its gold answers (``reward_model.ground_truth``)."""
    question = str(extra_info.get("question", ""))
    return {"dataset": [{"question": question, "answers": as_gold_list(ground_truth)}]}
