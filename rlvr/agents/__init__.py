"""The GRPO family (``docs/design.md`` §5, ``docs/algorithms.md``).

- ``rlvr.agents.advantages``: group-relative advantages (``group_advantages``, estimator registry).
- ``rlvr.agents.algorithms``: one registered ``Algorithm`` per method, one file each: its weight
  function, typed parameters (``WeightConfig`` is generated from them), stages, what verl needs.
- ``rlvr.agents.weights``: ``token_weights``, a method's weight applied without gradient.
- ``rlvr.agents.losses``: clipped, token-weighted policy loss with k3 KL and verl aggregations.
- ``rlvr.agents.update``: one batch's update (stages, mini/micro-batches, mixed precision).
- ``rlvr.agents.trainer``: setup, rollout, train step, train loop (``rlvr train``).
- ``rlvr.agents.train_config``: the typed ``TrainConfig`` of ``rlvr train`` and its profiles.

Kept import-free so that importing the package stays cheap; import the submodules directly.
"""
