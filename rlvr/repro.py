"""Reproducible CPU kernels, the machine a result came from, and hashes of model weights.

CPU kernels are chosen per processor, and thousands of training steps amplify their last-bit
differences into different models. Four things choose:

- ATen (torch's operator library) dispatches its vectorised kernels to the widest instruction set
  the CPU has (``ATEN_CPU_CAPABILITY``: default / avx2 / avx512).
- oneMKL, torch's BLAS and vector-math library on x86, picks its code by ISA *and vendor*: of its
  conditional-numerical-reproducibility branches (``MKL_CBWR``) only ``COMPATIBLE`` is honoured
  on non-Intel processors, every other branch becomes AUTO there (oneMKL Developer Guide,
  "Getting Started with Conditional Numerical Reproducibility", note). Measured: ``AVX2,STRICT``
  gave AMD EPYC and Intel Xeon different weights.
- Some instructions are approximations whose results the vendors define differently (``rcpps``,
  ``rsqrtps``): in torch's wheel only MKL's functions use them (its vector math, e.g. the square
  root AdamW takes; docs/reproduce.md lists how this was checked), and ``COMPATIBLE`` is the
  branch without them.
- The number of threads splits reductions and vector loops differently (a sum of 1e6 floats
  differs between 1 and 2 threads).

Kernel modes (``RLVR_KERNELS`` or ``rlvr --kernels``):

- ``reproducible`` (the default): the same bits on any x86-64 CPU with AVX2, Intel or AMD, with
  any number of cores. ATen held to AVX2; matrix products on OpenBLAS's Haswell kernels
  (``rlvr.blas``: MKL's ``COMPATIBLE`` GEMMs are 3-5x slower); what MKL still computes on its
  ``COMPATIBLE`` branch; oneDNN held to AVX2; one thread per process (``rlvr reproduce --jobs``
  runs processes side by side).
- ``mkl-avx2``: the previous reproducible mode, faster (docs/reproduce.md gives the cost): ATen
  and oneDNN held to AVX2, MKL on its ``AVX2,STRICT`` branch, threads as configured. The same bits
  among Intel CPUs with AVX2 (MKL's documented guarantee); AMD CPUs run MKL's AUTO branch and
  their own ``rsqrtps`` under it and give other bits.
- ``native``: whatever the processor and the environment choose (GPU runs use this).

The variables are read when torch and the BLAS libraries load, so ``apply_kernel_mode`` must run
before ``import torch``: the ``rlvr`` command calls it first thing, and worker processes inherit
the environment. The rest of the reproducible mode (one torch thread, the OpenBLAS products)
needs torch: ``install_kernels`` does it, and the modules that make models call it on import
(``rlvr.models.micro``, which ``tiny`` and ``loader`` import; ``rlvr.models`` itself when torch
is already loaded), before any model exists. This module does not import torch at import time.

Variables (documented by each library):
- ``ATEN_CPU_CAPABILITY``: PyTorch ``aten/src/ATen/native/DispatchStub.cpp``
  (``compute_cpu_capability``), values ``default``, ``avx2``, ``avx512``.
- ``MKL_CBWR``: oneMKL developer guide, "Specifying Code Branches": ``COMPATIBLE`` is SSE2
  without rcpps/rsqrtps; ``AVX2,STRICT`` fixes the AVX2 branch and, with STRICT, the order of
  operations independently of the number of threads.
- ``ONEDNN_MAX_CPU_ISA``: oneDNN developer guide, "CPU Dispatcher Control"; value ``AVX2``.
- ``OPENBLAS_CORETYPE``, ``OPENBLAS_NUM_THREADS``: OpenBLAS ``docs/runtime_variables.md``.
- ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``: torch's and MKL's thread pools (OpenMP).
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path
from typing import Any

#: Environment of each held mode (see the module docstring for each variable's source).
MODE_ENV: dict[str, dict[str, str]] = {
    "reproducible": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    },
    "mkl-avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "AVX2,STRICT",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
}
REPRODUCIBLE_ENV = MODE_ENV["reproducible"]
#: Every variable a mode sets.
KERNEL_VARS = tuple(dict.fromkeys(k for env in MODE_ENV.values() for k in env))
#: The thread counts among them: a held mode clears the others' kernel choices, not the user's
#: thread settings (only the reproducible mode pins those).
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: ``RLVR_KERNELS`` selects the mode: ``reproducible`` (the default), ``mkl-avx2``, ``native``.
MODE_VAR = "RLVR_KERNELS"
MODES = ("reproducible", "mkl-avx2", "native")
#: Torch threads of the reproducible mode: one, whatever the machine has.
REPRODUCIBLE_THREADS = 1
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

    A held mode overrides whatever the environment asked for, so the same bits come out whatever
    capability or thread count a user's shell had set. On non-x86 machines there is nothing to
    hold (the variables name x86 paths), and on an x86 CPU without AVX2 the AVX2 paths cannot
    run: both fall back to ``native``, and the records say so. Returns the mode.
    """
    import sys

    mode = mode or requested_mode()
    if mode not in MODES:
        raise SystemExit(f"kernel mode {mode!r}: expected one of {list(MODES)}")
    if mode != "native" and not (is_x86() and _has_avx2()):
        mode = "native"
    if mode != "native":
        env = MODE_ENV[mode]
        if "torch" in sys.modules and any(os.environ.get(k) != v for k, v in env.items()):
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
        for k in KERNEL_VARS:
            if k not in THREAD_VARS:
                os.environ.pop(k, None)
        os.environ.update(env)
    os.environ[MODE_VAR] = mode
    return mode


def _held(mode: str) -> bool:
    return mode in MODE_ENV and all(os.environ.get(k) == v for k, v in MODE_ENV[mode].items())


def install_kernels() -> None:
    """After ``import torch``, in a process started in the reproducible mode: one torch thread
    and the vendor-neutral matrix products of ``rlvr.blas``. Nothing in the other modes."""
    if os.environ.get(MODE_VAR) != "reproducible" or not _held("reproducible"):
        return
    import torch

    from rlvr import blas

    torch.set_num_threads(REPRODUCIBLE_THREADS)
    blas.install()


def set_threads(n: int) -> int:
    """``torch.set_num_threads(n)`` (``n`` <= 0: leave torch's default), except in the reproducible
    mode, which keeps its one thread. Returns the threads torch now uses."""
    import torch

    if os.environ.get(MODE_VAR) == "reproducible" and _held("reproducible"):
        torch.set_num_threads(REPRODUCIBLE_THREADS)
    elif n > 0:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def check_threads(n: int, what: str) -> None:
    """``ValueError`` for a thread count above one in the reproducible mode (its results must not
    depend on the machine's cores: parallelism comes from processes there)."""
    if n > REPRODUCIBLE_THREADS and os.environ.get(MODE_VAR, "reproducible") == "reproducible":
        raise ValueError(
            f"{what}: {n} threads, but the reproducible kernel mode runs one thread per process "
            "so that results do not depend on the core count (use rlvr reproduce --jobs, or "
            "--kernels mkl-avx2 / native for threads)"
        )


def effective_mode() -> str:
    """The mode this process really runs (what the record states, whatever was requested):
    ``reproducible`` when its variables hold, ATen dispatches to AVX2, the OpenBLAS products are
    installed on the Haswell kernels and torch runs one thread; ``mkl-avx2`` when its variables
    hold and ATen dispatches to AVX2; else ``native``."""
    import torch

    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        return "native"
    if _held("reproducible"):
        from rlvr import blas

        ok = (
            blas.installed()
            and blas.corename() == blas.CORETYPE
            and torch.get_num_threads() == REPRODUCIBLE_THREADS
        )
        return "reproducible" if ok else "native"
    return "mkl-avx2" if _held("mkl-avx2") else "native"


def running_mode() -> str:
    """The kernel mode this process's runs get: its kernels installed first
    (``install_kernels``, idempotent), as a model's import would, then ``effective_mode``."""
    install_kernels()
    return effective_mode()


def kernel_mode_note() -> str:
    """``""`` when this process runs the kernel mode it was asked for (``$RLVR_KERNELS``, default
    reproducible; native where no mode can hold: not x86, or no AVX2), else one line naming both.

    The rlvr command sets the mode before torch loads. A script that imports rlvr and never calls
    ``apply_kernel_mode`` first runs the processor's native kernels: its runs record that
    (``machine_info``), but their bits are not the command's, and a later ``rlvr reproduce
    --check`` on another machine cannot match them (16 of the smol grid's 18 runs, 2026-12-06).
    Measures what the run will use (``running_mode``). Silent where ``apply_kernel_mode`` has
    already said that the process runs native kernels (torch came first): one notice each.
    """
    if _warned_late:  # apply_kernel_mode has said it already (the command came after torch)
        return ""
    asked = requested_mode() if is_x86() and _has_avx2() else "native"
    got = running_mode()
    if got == asked:
        return ""
    return (
        f"[rlvr] this process runs {got} kernels, not the {asked} mode asked for ({MODE_VAR}, "
        "default reproducible): call rlvr.repro.apply_kernel_mode() before torch is imported, as "
        "the rlvr command does, or what it trains will not have the command's bits"
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
        "gemm": gemm_backend(),
        "env": {k: os.environ.get(k, "") for k in KERNEL_VARS},
        "torch_threads": torch.get_num_threads(),
    }


def gemm_backend() -> str:
    """What computes float32 CPU matrix products: ``openblas <version> <kernels>`` (the
    reproducible mode) or ``mkl`` (torch's own)."""
    if not _held("reproducible"):
        return "mkl"  # rlvr.blas (and its OpenBLAS) is only ever loaded in the reproducible mode
    from rlvr import blas

    return f"openblas {blas.version()} {blas.corename()}" if blas.installed() else "mkl"


def machine_line(info: dict[str, Any]) -> str:
    """One line for a report: ``AMD EPYC (x86_64, 2 cores; avx2 fma ...), kernels ...``."""
    return (
        f"{info['cpu']} ({info['arch']}, {info['cores']} cores; {' '.join(info['flags'])}), "
        f"kernel mode {info['kernel_mode']} (ATen {info['aten_cpu_capability']}, GEMM "
        f"{info.get('gemm', 'mkl')}), {info['torch_threads']} torch thread(s)"
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


__all__ = [
    "FLAGS_OF_INTEREST",
    "KERNEL_VARS",
    "MODES",
    "MODE_ENV",
    "MODE_VAR",
    "REPRODUCIBLE_ENV",
    "REPRODUCIBLE_THREADS",
    "apply_kernel_mode",
    "check_threads",
    "effective_mode",
    "gemm_backend",
    "install_kernels",
    "kernel_mode_note",
    "running_mode",
    "set_threads",
    "is_x86",
    "machine_info",
    "machine_line",
    "state_dict_sha256",
    "weights_sha256",
]
