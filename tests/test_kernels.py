"""The reproducible kernel mode gives one set of bits on Intel and AMD, with any thread count.

The golden hash below is what three training steps of a small Qwen2 model give in the reproducible
mode. It was measured on Intel Xeons and real AMD EPYCs (2 cores) and, through
``scripts/emulate/run.py`` (CPUID answered as the other vendor's processor would, so oneMKL takes
that vendor's paths), as the other vendor on each; CI fails on either vendor when the mode's bits
move (a library, kernel or training change), and the emulated run fails here if vendor dispatch
creeps back in. Kernel libraries read their variables when torch loads, so every case runs in a
fresh process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.repro import KERNEL_VARS, is_x86

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "emulate"))
import run as emulate  # noqa: E402

#: ``CASE`` in the reproducible mode: an Intel Xeon (family 6 model 207, and emulated as an AMD
#: EPYC), real AMD EPYCs (family 26 model 2; family 25 model 17, and emulated as an Intel Xeon),
#: 1, 2 and 4 threads asked.
GOLDEN = "df70814b8ad5176e"

CASE = r"""
import sys
from rlvr.repro import apply_kernel_mode
apply_kernel_mode(sys.argv[1])
import torch
from transformers import Qwen2ForCausalLM
from rlvr.models.micro import micro_config
from rlvr.repro import effective_mode, state_dict_sha256
torch.manual_seed(0)
model = Qwen2ForCausalLM(micro_config(1024, 128, 2, 4, 2, 384))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
for _ in range(3):
    ids = torch.randint(0, 1024, (4, 97), generator=g)
    model(input_ids=ids, labels=ids).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    opt.zero_grad()
big = torch.randn(1_000_000, generator=g)
print(state_dict_sha256(model.state_dict())[:16], effective_mode(), torch.get_num_threads(),
      big.sum().item().hex())
"""


def _has_avx2() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return is_x86() and cpuinfo.exists() and " avx2" in cpuinfo.read_text()


needs_avx2 = pytest.mark.skipif(not _has_avx2(), reason="the held modes need x86-64 with AVX2")


def _case(mode: str, threads: int, env: dict[str, str] | None = None) -> list[str]:
    base = {k: v for k, v in (env or os.environ).items() if k not in KERNEL_VARS}
    base.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", CASE, mode],
        env=base,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


@needs_avx2
def test_the_reproducible_mode_gives_the_golden_bits_whatever_the_thread_count():
    runs = {t: _case("reproducible", t) for t in (1, 2, 4)}
    for threads, (sha, mode, used, total) in runs.items():
        # Before rlvr.blas.sqrt, MKL's sqrt gave 648c561004b77849 on Intel and 97ad2c70c774f24a on
        # a real AMD EPYC: docs/reproduce.md "Measured on a real AMD EPYC".
        assert (sha, mode, used) == (GOLDEN, "reproducible", "1"), f"{threads} threads asked"
    assert len({r[3] for r in runs.values()}) == 1  # the sum of 1e6 floats too
    # Not vacuous: that sum does depend on the thread count where threads are not pinned.
    sums = {_case("mkl-avx2", t)[3] for t in (1, 2)}
    if torch.get_num_threads() > 1:  # torch caps threads at the cores: one core cannot show it
        assert len(sums) == 2


@needs_avx2
@pytest.mark.skipif(emulate.library() is None, reason="needs CPUID faulting and a C compiler")
def test_the_other_vendor_emulated_gives_the_same_bits_and_the_old_mode_did_not():
    other = emulate.env()  # AMD on an Intel host, Intel on an AMD host
    assert _case("reproducible", 1, other)[0] == GOLDEN
    # The vendor-dependent mode this one replaced: oneMKL takes the other vendor's path and the
    # bits move (on an AMD EPYC Zen 4 emulating Intel: c50c9a19b44202d7, a real Intel Xeon's).
    assert _case("mkl-avx2", 1, other)[0] != _case("mkl-avx2", 1)[0]


def test_the_emulated_vendor_is_the_one_this_machine_is_not(monkeypatch):
    monkeypatch.setattr(emulate, "host_vendor", lambda: "amd")
    assert emulate.other_vendor() == "intel"
    monkeypatch.setattr(emulate, "host_vendor", lambda: "intel")
    assert emulate.other_vendor() == "amd"
    with pytest.raises(ValueError, match="vendor"):
        emulate.library("via")


# -- the products themselves (rlvr.blas), in this process -------------------------------------
@pytest.fixture(scope="module")
def blas():
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
    if os.environ["OPENBLAS_CORETYPE"] != "Haswell":
        pytest.skip("OPENBLAS_CORETYPE is set to something else in this environment")
    from rlvr import blas

    return blas


def _ref(a, b):
    return (a.double() @ b.double()).float()


@pytest.mark.skipif(not is_x86(), reason="scipy-openblas32's Haswell kernels are x86-64")
def test_the_products_equal_a_float64_reference_for_every_layout(blas):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(70, 33, generator=g), torch.randn(33, 21, generator=g)
    layouts = {
        "contiguous": (a, b),
        "transposed views": (a.t().contiguous().t(), b.t().contiguous().t()),
        "strided slices": (torch.randn(70, 66, generator=g)[:, ::2], b),
    }
    for name, (x, y) in layouts.items():
        assert torch.allclose(blas.mm(x, y), _ref(x, y), atol=1e-4), name
    bias = torch.randn(21, generator=g)
    got = blas.addmm(bias, a, b, beta=0.5, alpha=2.0)
    assert torch.allclose(got, 0.5 * bias + 2.0 * _ref(a, b), atol=1e-4)
    nan = torch.full((70, 21), float("nan"))
    assert torch.isfinite(blas.addmm(nan, a, b, beta=0)).all()  # beta 0 ignores self, NaN too
    x, y = torch.randn(5, 7, 9, generator=g), torch.randn(5, 9, 4, generator=g)
    assert torch.allclose(blas.bmm(x, y), _ref(x, y), atol=1e-5)
    assert torch.allclose(blas.bmm(x, y.transpose(1, 2).contiguous().transpose(1, 2)), _ref(x, y))
    assert torch.allclose(blas.bmm(x[:1].expand(5, 7, 9), y), _ref(x[:1].expand(5, 7, 9), y))
    c = torch.randn(5, 7, 4, generator=g)
    assert torch.allclose(blas.baddbmm(c, x, y, beta=1, alpha=1), c + _ref(x, y), atol=1e-5)


def test_the_square_root_is_correctly_rounded(blas):
    g = torch.Generator().manual_seed(0)
    # Magnitudes from 1e-30 to 1e30, each element its own, then the edge values.
    scale = 10.0 ** torch.randint(-30, 30, (100_003,), generator=g).float()
    random = torch.randn(100_003, generator=g).abs() * scale
    edges = torch.tensor([0.0, -0.0, 1e-45, 3.4e38, float("inf")])
    x = torch.cat([random, edges])
    # A float64 root rounded to float32 is the correctly rounded float32 root (53 >= 2 * 24 + 2).
    exact = x.double().sqrt().float()
    assert torch.equal(blas.sqrt(x), exact)
    assert torch.equal(blas.sqrt(x[::2]), exact[::2])  # a strided view
    assert torch.equal(blas.sqrt(x[7]), exact[7]) and blas.sqrt(x[7]).shape == ()
    y = x.clone()
    assert blas.sqrt_(y) is y and torch.equal(y, exact)
    z = x.clone()[::3]
    blas.sqrt_(z)
    assert torch.equal(z, exact[::3])
    assert blas.sqrt(torch.tensor([-1.0])).isnan().all()  # as torch: NaN, no warning
    assert torch.equal(blas.sqrt(torch.tensor([4, 9])), torch.tensor([2.0, 3.0]))  # integers
    d = torch.rand(5, dtype=torch.float64, generator=g)
    assert torch.equal(blas.sqrt(d), torch.ops.aten.sqrt.out(d, out=d.new_empty(0)))
    leaf = torch.rand(4, generator=g, requires_grad=True)
    torch.sqrt(leaf).sum().backward()  # autograd above the kernel: the gradient still flows
    assert torch.allclose(leaf.grad, 0.5 / leaf.detach().sqrt())


@pytest.mark.skipif(not is_x86(), reason="scipy-openblas32's Haswell kernels are x86-64")
def test_empty_and_foreign_operands_behave_as_torch(blas):
    assert blas.mm(torch.randn(0, 3), torch.randn(3, 4)).shape == (0, 4)
    assert torch.equal(blas.mm(torch.randn(2, 0), torch.randn(0, 4)), torch.zeros(2, 4))
    a64, b64 = torch.randn(6, 5, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    assert torch.equal(blas.mm(a64, b64), a64 @ b64)  # other dtypes: torch's own kernel
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        blas.mm(torch.randn(2, 3), torch.randn(4, 5))
    with pytest.raises(RuntimeError, match="batch2"):  # torch's own message, from its kernel
        blas.bmm(torch.randn(2, 2, 3), torch.randn(3, 3, 5))


@needs_avx2
def test_more_threads_are_refused_in_the_reproducible_mode(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARS}
    env.update(PYTHONPATH=str(REPO), RLVR_HOME=str(tmp_path / "home"))
    train = [
        *(sys.executable, "-m", "rlvr.cli", "train", "env=kk", "algo=grpo", "profile=micro"),
        *("steps=1", f"out={tmp_path / 'run'}", "num_threads=4"),
    ]
    out = subprocess.run(train, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 2
    assert "one thread per process" in out.stderr and "Traceback" not in out.stderr
    build = [sys.executable, "-m", "rlvr.cli", "build-model", "tiny-kk", "--threads", "2"]
    out = subprocess.run(build, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode != 0 and "one thread per process" in out.stderr
    assert not (tmp_path / "home").exists()  # refused before anything was built
