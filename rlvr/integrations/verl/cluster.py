"""``python -m rlvr.integrations.verl.cluster --url URL``: refuse a loopback retrieval URL on a
multi-node Ray cluster before ``run.sh`` starts the retrieval service (one line, exit 2).

It joins the running Ray cluster if there is one (``ray.init(address="auto")``: the cluster of
``RAY_ADDRESS``, as ``ray job submit`` sets it, or the one started on this node) and applies
``data.check_retrieval_reachable`` to its nodes; with no cluster running, verl will start a
one-node Ray of its own and loopback is reachable. ``RlvrPPOTrainer.init_workers`` makes the
same check where verl places the workers.
"""

from __future__ import annotations

import argparse
import sys

import ray

from rlvr.integrations.verl.data import check_retrieval_reachable


def cluster_nodes() -> list[dict]:
    """``ray.nodes()`` of the running cluster; ``[]`` when none runs."""
    try:
        ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError):
        return []
    try:
        return ray.nodes()
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlvr.integrations.verl.cluster")
    p.add_argument("--url", required=True, help="the retrieval URL the agent loop will use")
    args = p.parse_args(argv)
    try:
        check_retrieval_reachable(args.url, cluster_nodes())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
