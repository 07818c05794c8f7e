"""verifiers plugin id for rlvr's environments: ``vf-eval rlvr_verifiers --env.taskset.env kk``.

verifiers 0.4 resolves a taskset id to an importable top-level package exporting its
``Taskset``, ``Env`` and ``Harness`` subclasses through ``__all__``; the implementation is
``rlvr.integrations.verifiers_env``.
"""

from rlvr.integrations.verifiers_env import RlvrEnv, RlvrHarness, RlvrTaskset, load_environment

__all__ = ["RlvrTaskset", "RlvrEnv", "RlvrHarness", "load_environment"]
