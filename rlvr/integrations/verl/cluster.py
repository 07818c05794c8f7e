"""``python -m rlvr.integrations.verl.cluster --env ENV --url URL``: refuse a loopback URL of the
service ``ENV``'s agent loop calls (``EnvSpec.verl.service``: search QA's retrieval service) on a
multi-node Ray cluster before ``run.sh`` starts the service (one line, exit 2).

It joins the running Ray cluster if there is one (``ray.init(address="auto")``: the cluster of
``RAY_ADDRESS``, as ``ray job submit`` sets it, or the one started on this node) and applies
``data.check_service_reachable`` to its nodes; with no cluster running, verl will start a
one-node Ray of its own and loopback is reachable. ``RlvrPPOTrainer.init_workers`` makes the
same check where verl places the workers.
"""

from __future__ import annotations

import argparse
import sys

import ray

from rlvr.integrations.verl.data import check_service_reachable


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
    p.add_argument("--env", required=True, help="the environment whose agent loop calls it")
    p.add_argument("--url", required=True, help="the service's URL the agent loop will use")
    args = p.parse_args(argv)
    try:
        check_service_reachable(args.env, args.url, cluster_nodes())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
