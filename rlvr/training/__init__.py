"""Training: the native GRPO-family trainer (``rlvr train``).

- ``rlvr.training.train_config``: the typed ``TrainConfig`` of ``rlvr train`` and its profiles.
- ``rlvr.training.update``: one batch's update (stages, mini/micro-batches, mixed precision).
- ``rlvr.training.trainer``: setup, rollout, train step, train loop.
- ``rlvr.training.cli``: ``rlvr train`` and ``rlvr algorithms``.

Kept import-free so that importing the package stays cheap; import the submodules directly.
"""
