"""The GRPO family (``docs/design.md`` §5, ``docs/algorithms.md``).

- ``rlvr.agents.advantages``: group-relative advantages (``group_advantages``, estimator registry).
- ``rlvr.agents.weights``: per-token weights (``token_weights``, scheme registry), Lopti masks.
- ``rlvr.agents.losses``: clipped, token-weighted policy loss with k3 KL and verl aggregations.
- ``rlvr.agents.algorithms``: one registered ``Algorithm`` per method, one file each.
- ``rlvr.agents.update``: one batch's update (stages, mini/micro-batches, mixed precision).
- ``rlvr.agents.trainer``: setup, rollout, train step, train loop (``rlvr train``).
- ``rlvr.agents.config``: typed ``WeightConfig`` / ``LossConfig`` and the documented defaults.

Kept import-free so that importing the package stays cheap; import the submodules directly.
"""
