"""Vendor-neutral float32 matrix products on the CPU, for the reproducible kernel mode.

torch's x86 wheels compute matrix products with oneMKL, and oneMKL chooses its GEMM code by the
processor's vendor: of its conditional-numerical-reproducibility branches only ``COMPATIBLE``
(SSE2) is honoured on non-Intel processors; ``AVX2`` and the others fall back to the AUTO branch
there (oneMKL Developer Guide, "Getting Started with Conditional Numerical Reproducibility",
note). ``COMPATIBLE`` gives the same bits on both vendors but runs GEMMs 3-5x slower
(``bench/bench_kernels.py --gemm``), and GEMMs are most of a training step.

So in the reproducible mode the four products a transformer's forward and backward passes use
(``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``) run, for float32 CPU tensors, on OpenBLAS from
the ``scipy-openblas32`` wheel, with its kernel table pinned to ``Haswell`` (AVX2 + FMA) by
``OPENBLAS_CORETYPE`` and one thread. That table's kernels and block sizes are fixed when OpenBLAS
is compiled, so the same products give the same bits on any x86-64 processor with AVX2, whatever
its vendor or cache sizes (measured: docs/reproduce.md). Everything else MKL still computes
(vector math, other BLAS calls) stays on its ``COMPATIBLE`` branch (``rlvr.repro``).

``install()`` registers the kernels with ``torch.library`` for the CPU dispatch key, below
autograd, so the backward pass's products take the same path; other dtypes go to torch's own
``out=`` kernels. The fused flash-attention CPU kernel calls MKL's GEMM directly, on the
``COMPATIBLE`` branch there: vendor-neutral too, and for attention's small blocks faster than
its math path through these products (``bench/bench_kernels.py --cost``). Sources: OpenBLAS
``docs/runtime_variables.md`` (``OPENBLAS_CORETYPE``), the CBLAS
``cblas_sgemm`` interface, and ``cblas_sgemm_batch_strided`` (OpenBLAS >= 0.3.27).
"""

from __future__ import annotations

import ctypes
import os
import warnings

import numpy as np
import scipy_openblas32
import torch

#: The OpenBLAS kernel table the mode pins (``OPENBLAS_CORETYPE``): AVX2 + FMA, the widest ISA
#: both vendors' x86-64 server CPUs have shared since 2015.
CORETYPE = "Haswell"

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_lib = _SGEMM = _SGEMM_BATCH = None
_installed = False


def _openblas():
    """The ``scipy-openblas32`` library, loaded once, one thread (``OPENBLAS_CORETYPE`` must be
    set before the first load: OpenBLAS reads it when it initialises)."""
    global _lib
    if _lib is None:
        if os.environ.get("OPENBLAS_CORETYPE") != CORETYPE:
            raise RuntimeError(
                f"rlvr.blas: OPENBLAS_CORETYPE must be {CORETYPE!r} before OpenBLAS loads "
                "(rlvr.repro.apply_kernel_mode sets it)"
            )
        lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so"))
        i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
        lib.scipy_cblas_sgemm.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
        lib.scipy_cblas_sgemm.restype = None
        lib.scipy_cblas_sgemm_batch_strided.argtypes = [
            *(i, i, i, i, i, i, f),
            *(p, i, i, p, i, i, f, p, i, i, i),
        ]
        lib.scipy_cblas_sgemm_batch_strided.restype = None
        lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
        lib.scipy_openblas_set_num_threads(1)
        global _SGEMM, _SGEMM_BATCH
        _SGEMM, _SGEMM_BATCH = lib.scipy_cblas_sgemm, lib.scipy_cblas_sgemm_batch_strided
        _lib = lib
    return _lib


def corename() -> str:
    """The kernel table OpenBLAS runs (``Haswell`` in the reproducible mode)."""
    return _openblas().scipy_openblas_get_corename().decode()


def version() -> str:
    return scipy_openblas32.__version__


def _operand(x):
    """``(tensor, transpose flag, leading dimension)`` of a row-major matrix operand (the last two
    dims): a row-major or a transposed view is passed as it is, anything else is copied."""
    rows, cols = x.shape[-2:]
    s0, s1 = x.stride()[-2:]
    if s1 == 1 and s0 >= cols and s0 > 0:
        return x, _NO_TRANS, s0
    if s0 == 1 and s1 >= rows and s1 > 0:
        return x, _TRANS, s1
    return x.contiguous(), _NO_TRANS, max(1, cols)


_F32 = torch.float32
#: Operands OpenBLAS takes: float32 with sizes and strides inside CBLAS's 32-bit ``int``.
_MAX = 2**31 - 1


def _ours(a, b, dims: int) -> bool:
    """Whether OpenBLAS computes this product (anything else, shape errors included, goes to
    torch's own kernel, which raises torch's own messages)."""
    return (
        a.dtype is _F32
        and b.dtype is _F32
        and a.dim() == dims
        and b.dim() == dims
        and a.shape[-1] == b.shape[-2]
        and a.shape[:-2] == b.shape[:-2]
        and a.numel() < _MAX
        and b.numel() < _MAX
        and max(a.stride()) < _MAX
        and max(b.stride()) < _MAX
    )


def _gemm(a, b, c, alpha: float, beta: float):
    """``c = alpha * a @ b + beta * c`` for 2-D float32 ``a``, ``b`` and a contiguous ``c``."""
    if _SGEMM is None:
        _openblas()
    (a, ta, lda), (b, tb, ldb) = _operand(a), _operand(b)
    m, k = a.shape
    n = b.shape[1]
    if m and n:
        if k == 0 and beta == 0.0:
            return c.zero_()
        _SGEMM(_ROW_MAJOR, ta, tb, m, n, k, alpha, a.data_ptr(), lda, b.data_ptr(), ldb, beta,
               c.data_ptr(), n)  # fmt: skip
    return c


def _batched(a, b, c, alpha: float, beta: float):
    """``c[i] = alpha * a[i] @ b[i] + beta * c[i]`` for 3-D float32 operands."""
    if _SGEMM is None:
        _openblas()
    if a.stride(0) == 0 or b.stride(0) == 0:  # a broadcast batch: one stride cannot describe it
        a, b = a.contiguous(), b.contiguous()
    (a, ta, lda), (b, tb, ldb) = _operand(a), _operand(b)
    batch, m, k = a.shape
    n = b.shape[2]
    if batch and m and n:
        if k == 0 and beta == 0.0:
            return c.zero_()
        _SGEMM_BATCH(
            _ROW_MAJOR, ta, tb, m, n, k, alpha, a.data_ptr(), lda, a.stride(0), b.data_ptr(),
            ldb, b.stride(0), beta, c.data_ptr(), n, m * n, batch,
        )  # fmt: skip
    return c


def _start(self, shape, beta):
    """The accumulator of ``addmm``/``baddbmm``: ``self`` broadcast to the output (a fresh
    tensor), or nothing when ``beta`` is 0 (``self`` is then ignored, NaNs included)."""
    return None if beta == 0 else self.expand(shape).clone(memory_format=torch.contiguous_format)


def mm(a, b):
    if not _ours(a, b, 2):
        return torch.ops.aten.mm.out(a, b, out=a.new_empty(0))
    return _gemm(a, b, torch.empty((a.shape[0], b.shape[1]), dtype=_F32), 1.0, 0.0)


def addmm(self, a, b, *, beta=1, alpha=1):
    if not (_ours(a, b, 2) and self.dtype is _F32):
        return torch.ops.aten.addmm.out(self, a, b, beta=beta, alpha=alpha, out=a.new_empty(0))
    shape = (a.shape[0], b.shape[1])
    c = _start(self, shape, beta)
    if c is None:
        return _gemm(a, b, torch.empty(shape, dtype=_F32), float(alpha), 0.0)
    return _gemm(a, b, c, float(alpha), float(beta))


def bmm(a, b):
    if not _ours(a, b, 3):
        return torch.ops.aten.bmm.out(a, b, out=a.new_empty(0))
    return _batched(a, b, torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=_F32), 1.0, 0.0)


def baddbmm(self, a, b, *, beta=1, alpha=1):
    if not (_ours(a, b, 3) and self.dtype is _F32):
        return torch.ops.aten.baddbmm.out(self, a, b, beta=beta, alpha=alpha, out=a.new_empty(0))
    shape = (a.shape[0], a.shape[1], b.shape[2])
    c = _start(self, shape, beta)
    if c is None:
        return _batched(a, b, torch.empty(shape, dtype=_F32), float(alpha), 0.0)
    return _batched(a, b, c, float(alpha), float(beta))


def sqrt(x):
    """``sqrt(x)``, correctly rounded for float32 CPU tensors.

    torch computes a contiguous float32 ``sqrt`` with oneMKL's vector math (``vsSqrt``), which is
    not correctly rounded and, even on its ``COMPATIBLE`` branch, gave other bits on a real AMD
    EPYC (Zen 5) than on an Intel Xeon (docs/reproduce.md, "Measured on a real AMD EPYC"): AdamW's
    ``exp_avg_sq.sqrt()`` moved every weight. numpy's ``sqrt`` is the processor's ``sqrtps``,
    which IEEE 754 requires to be correctly rounded, so one set of bits on any x86-64.
    """
    if x.dtype is not _F32 or x.device.type != "cpu":  # integers give the default float dtype
        return torch.ops.aten.sqrt.out(x, out=x.new_empty(0, dtype=torch.result_type(x, 1.0)))
    out = torch.empty(x.shape, dtype=_F32)
    with np.errstate(invalid="ignore"):  # a negative input gives NaN, as torch's does, silently
        np.sqrt(x.detach().contiguous().numpy(), out=out.numpy())
    return out


def sqrt_(x):
    if x.dtype is not _F32 or x.device.type != "cpu":
        return torch.ops.aten.sqrt.out(x, out=x)
    return x.copy_(sqrt(x))


_registrations = []


def install() -> None:
    """Route CPU float32 ``mm``/``addmm``/``bmm``/``baddbmm`` through OpenBLAS and
    ``sqrt``/``sqrt_`` through the processor's correctly rounded square root (idempotent)."""
    global _installed
    if _installed:
        return
    _openblas()  # fail here, before any kernel is replaced, if the library cannot load
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": intended
        warnings.simplefilter("ignore", UserWarning)
        kernels = {"mm": mm, "addmm": addmm, "bmm": bmm, "baddbmm": baddbmm, "sqrt": sqrt,
                   "sqrt_": sqrt_}  # fmt: skip
        for name, fn in kernels.items():
            lib.impl(name, fn, "CPU")
    _registrations.append(lib)  # the registration lives as long as the Library object
    _installed = True


def installed() -> bool:
    return _installed


__all__ = ["CORETYPE", "corename", "install", "installed", "version"]
