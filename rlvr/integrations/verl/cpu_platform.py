"""``PlatformCPU``: a verl 0.9.1 platform for machines without accelerators (work-around 9 of
``rlvr.integrations.verl.cpu``).

verl resolves its platform once per process (``verl/plugin/platform/platform_manager.py``
``get_platform``): ``VERL_PLATFORM`` names it, else each registered platform is probed and
``nvidia`` is the fallback (~114-117). This one is registered as ``cpu`` with verl's
``PlatformRegistry.register`` and is only ever chosen by name (``is_platform_available`` is
false, so auto-detection never picks it). Its answers, next to ``platform_cuda.py``'s:

- device ``cpu`` (also as the current device's id), one device, collectives over gloo; the
  device module is ``torch.cpu`` with the memory and RNG calls verl makes of ``torch.cuda``
  (``CpuDeviceModule``);
- Ray: verl places every worker on an accelerator slot (``single_controller/ray/base.py``
  ~146-150 asks each bundle for ``ray_resource_name()``, and the vLLM server reads the slot's
  accelerator id, ``vllm_async_server.py`` ~1348), so the CPU run starts Ray with fake ``GPU``
  slots (``rlvr.integrations.verl.cpu.apply_config``) and names that resource;
- no CUDA IPC (``is_ipc_supported``: verl then syncs weights over shared memory);
- the rollout server's environment: vLLM's CPU build (``VLLM_TARGET_DEVICE=cpu``, no OpenMP
  core pinning) and the CPU switch itself, so that the server process activates it too.
"""

from __future__ import annotations

import os
import platform
import types
from contextlib import contextmanager, nullcontext
from typing import Any, Optional

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

NAME = "cpu"


def _ram() -> tuple[int, int]:
    """(available, total) bytes of this machine's memory."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


class CpuDeviceModule(types.ModuleType):
    """``torch.cpu`` plus the CUDA-module calls verl makes through ``get_torch_device()`` that
    ``torch.cpu`` lacks (``utils/memory_utils.py`` ~47 ``memory_reserved``, ``empty_cache``,
    ``mem_get_info``, the RNG state...): no accelerator memory to count or free, the machine's
    RAM for ``mem_get_info``, torch's CPU generator for the RNG state."""

    def __init__(self) -> None:
        super().__init__("rlvr_cpu_device")

    def __getattr__(self, name: str):
        return getattr(torch.cpu, name)

    @staticmethod
    def empty_cache() -> None:
        pass

    @staticmethod
    def ipc_collect() -> None:
        pass

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        pass

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        pass

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return _ram()

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return platform.processor() or "cpu"


DEVICE_MODULE = CpuDeviceModule()


class PlatformCPU(PlatformBase):
    """verl's platform interface answered for the CPU (module docstring)."""

    #: The rollout server's environment (``register`` sets it: ``cpu.ENVIRONMENT``).
    environment: dict[str, str] = {}

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        return False  # chosen by VERL_PLATFORM=cpu only

    def current_device(self):
        # "cpu", torch.cpu's own answer: verl moves modules and tensors to
        # ``get_device_id()`` (``utils/fsdp_utils.py`` ~507), where 0 would mean an accelerator
        return torch.cpu.current_device()

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: Optional[int] = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the fake GPU slots

    @contextmanager
    def nvtx_range(self, msg: str):
        with nullcontext():
            yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return dict(self.environment)

    def get_collective_module(self) -> Any:
        return None

    def cudart(self) -> Any:
        return None


def register(environment: dict[str, str]) -> type[PlatformCPU]:
    """``PlatformRegistry.register(platform="cpu")`` (idempotent), the rollout server getting
    ``environment``."""
    PlatformCPU.environment = dict(environment)
    if PlatformRegistry.get(NAME) is not PlatformCPU:
        PlatformRegistry.register(platform=NAME)(PlatformCPU)
    return PlatformCPU
