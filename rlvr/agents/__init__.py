"""The GRPO family as pure torch functions (DESIGN section 5).

- ``rlvr.agents.advantages``: group-relative advantages (``group_advantages``, estimator registry).
- ``rlvr.agents.weights``: per-token weights (``token_weights``, scheme registry), Lopti masks.
- ``rlvr.agents.losses``: clipped, token-weighted policy loss with k3 KL and verl aggregations.
- ``rlvr.agents.config``: typed ``WeightConfig`` / ``LossConfig`` and the documented defaults.

Kept import-free so that importing the package stays cheap; import the submodules directly.
"""
