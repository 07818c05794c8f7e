"""The policy layer of the GRPO family (``docs/design.md`` §5, ``docs/algorithms.md``).

- ``rlvr.agents.advantages``: group-relative advantages (``group_advantages``, estimator registry).
- ``rlvr.agents.algorithms``: one registered ``Algorithm`` per method, one file each: its weight
  function, typed parameters (``WeightConfig`` is generated from them), stages, what verl needs.
- ``rlvr.agents.weights``: ``token_weights``, a method's weight applied without gradient.
- ``rlvr.agents.losses``: clipped, token-weighted policy loss with k3 KL and verl aggregations.
- ``rlvr.agents.policy``, ``rlvr.agents.rollout``: the model's token statistics, generation
  backends, the episode driver and the job loop every evaluation plays (``rollout.jobs``).

The trainer that puts them together is ``rlvr.training``.

Kept import-free so that importing the package stays cheap; import the submodules directly.
"""
