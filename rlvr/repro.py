"""Reproducible CPU kernels, the machine a result came from, and hashes of model weights.

CPU kernels are chosen per processor: ATen dispatches its vectorised kernels to the widest
instruction set the CPU has (``ATEN_CPU_CAPABILITY``: default / avx2 / avx512), MKL picks a GEMM
code path per CPU (``MKL_CBWR``, conditional numerical reproducibility) and oneDNN per ISA
(``ONEDNN_MAX_CPU_ISA``). Different paths round differently, and thousands of training steps
amplify the last bit into different models. The *reproducible* kernel mode holds all three to
AVX2, which x86-64 server and mainstream desktop CPUs have had since Intel Haswell (2013) and
AMD Excavator (2015), so the same command gives the same bits on any such machine.

The variables are read when torch loads its libraries and on the first dispatch, so
``apply_kernel_mode`` must run before ``import torch``: the ``rlvr`` command calls it first
thing, and worker processes inherit the environment. This module does not import torch at
import time.

Variables (documented by each library):
- ``ATEN_CPU_CAPABILITY``: PyTorch ``aten/src/ATen/native/DispatchStub.cpp``
  (``compute_cpu_capability``), values ``default``, ``avx2``, ``avx512``.
- ``MKL_CBWR``: Intel oneMKL developer guide, "Conditional Numerical Reproducibility";
  ``AVX2,STRICT`` fixes the code path and, with STRICT, the order of operations independently of
  the number of threads for the functions that support it.
- ``ONEDNN_MAX_CPU_ISA``: oneDNN developer guide, "CPU Dispatcher Control"; value ``AVX2``.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path
from typing import Any

#: Environment of the reproducible mode (see the module docstring for each variable's source).
REPRODUCIBLE_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
#: ``RLVR_KERNELS`` selects the mode: ``reproducible`` (the default) or ``native``.
MODE_VAR = "RLVR_KERNELS"
MODES = ("reproducible", "native")
#: CPU flags worth recording: the ISA extensions the kernels above choose between.
FLAGS_OF_INTEREST = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
)


def requested_mode() -> str:
    mode = os.environ.get(MODE_VAR, "reproducible").strip().lower() or "reproducible"
    if mode not in MODES:
        raise SystemExit(f"{MODE_VAR}={mode!r}: expected one of {list(MODES)}")
    return mode


_warned_late = False


def apply_kernel_mode(mode: str | None = None) -> str:
    """Set the kernel environment of ``mode`` (default ``$RLVR_KERNELS``, else reproducible).

    Reproducible overrides whatever the environment asked for, so the same bits come out
    whatever capability a user's shell had set. On non-x86 machines there is nothing to hold
    (the variables name x86 paths), and on an x86 CPU without AVX2 the AVX2 paths cannot run:
    both fall back to ``native``, and the records say so. Returns the mode.
    """
    mode = mode or requested_mode()
    if mode not in MODES:
        raise SystemExit(f"kernel mode {mode!r}: expected one of {list(MODES)}")
    if mode == "reproducible" and not (is_x86() and _has_avx2()):
        mode = "native"
    if mode == "reproducible":
        import sys

        if "torch" in sys.modules and any(
            os.environ.get(k) != v for k, v in REPRODUCIBLE_ENV.items()
        ):
            # Too late for this process (the libraries have read their variables): say so, once;
            # the record (``effective_mode``) then shows what the kernels really were.
            global _warned_late
            if not _warned_late:
                _warned_late = True
                print(
                    f"[rlvr] torch was imported before the {mode} kernel mode could be set: "
                    "this process runs the processor's native kernels",
                    file=sys.stderr,
                )
            return "native"
        os.environ.update(REPRODUCIBLE_ENV)
    os.environ[MODE_VAR] = mode
    return mode


def effective_mode() -> str:
    """``reproducible`` when this process runs under the mode's variables and ATen dispatches to
    AVX2 (what the record states, whatever was requested), else ``native``."""
    import torch

    held = all(os.environ.get(k) == v for k, v in REPRODUCIBLE_ENV.items())
    return (
        "reproducible" if held and torch.backends.cpu.get_cpu_capability() == "AVX2" else "native"
    )


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def _has_avx2() -> bool:
    """AVX2 per ``/proc/cpuinfo``; assumed where it cannot be read (x86 macOS: every Mac since
    2013 has it)."""
    flags = _cpuinfo().get("flags")
    return True if flags is None else "avx2" in flags.split()


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields from ``/proc/cpuinfo`` (Linux; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def machine_info() -> dict[str, Any]:
    """CPU model, ISA flags, architecture, kernel mode and what torch actually dispatched to."""
    import torch

    cpu = _cpuinfo()
    flags = set((cpu.get("flags") or cpu.get("Features") or "").split())
    return {
        "cpu": cpu.get("model name") or platform.processor() or "unknown",
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "flags": [f for f in FLAGS_OF_INTEREST if f in flags],
        "kernel_mode": effective_mode(),
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "env": {k: os.environ.get(k, "") for k in REPRODUCIBLE_ENV},
        "torch_threads": torch.get_num_threads(),
    }


def machine_line(info: dict[str, Any]) -> str:
    """One line for a report: ``AMD EPYC (x86_64, 2 cores; avx2 fma ...), kernels ...``."""
    return (
        f"{info['cpu']} ({info['arch']}, {info['cores']} cores; {' '.join(info['flags'])}), "
        f"kernel mode {info['kernel_mode']} (ATen {info['aten_cpu_capability']}), "
        f"{info['torch_threads']} torch thread(s)"
    )


def state_dict_sha256(state_dict) -> str:
    """SHA-256 over a state dict: for each key in sorted order, the key, dtype, shape and the
    tensor's bytes (contiguous, on the CPU). Tied weights appear under each of their keys."""
    import torch

    h = hashlib.sha256()
    for key in sorted(state_dict):
        t = state_dict[key]
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def weights_sha256(path: str | Path) -> str:
    """``state_dict_sha256`` of a ``save_pretrained`` directory's safetensors (or .bin) files."""
    path = Path(path)
    files = sorted(path.glob("*.safetensors"))
    if files:
        from safetensors.torch import load_file

        state: dict[str, Any] = {}
        for f in files:
            state.update(load_file(str(f)))
        return state_dict_sha256(state)
    raise FileNotFoundError(f"{path}: no *.safetensors weights to hash")


def _worker_info() -> dict[str, Any]:
    return machine_info()


def add_machine_arguments(parser) -> None:
    parser.add_argument(
        "--worker",
        action="store_true",
        help="also report what a worker process (spawned as rlvr reproduce "
        "--jobs spawns them) sees",
    )


def run_machine(args) -> int:
    """``rlvr machine``: this machine as every result records it, as JSON."""
    import json

    info = machine_info()
    if args.worker:
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            info["worker"] = pool.submit(_worker_info).result()
    print(json.dumps(info, indent=2))
    return 0


__all__ = [
    "FLAGS_OF_INTEREST",
    "MODES",
    "MODE_VAR",
    "REPRODUCIBLE_ENV",
    "add_machine_arguments",
    "apply_kernel_mode",
    "effective_mode",
    "is_x86",
    "machine_info",
    "machine_line",
    "run_machine",
    "state_dict_sha256",
    "weights_sha256",
]
