#!/usr/bin/env python3
"""Run a command as if on the other x86 vendor's processor, to see which kernels give other bits.

    python scripts/emulate/run.py rlvr machine --fingerprint --against docs/fingerprints/X.json
    python scripts/emulate/run.py --as amd python bench/bench_kernels.py --model tiny-arch

The command runs with ``vendor_cpuid.c`` preloaded (compiled here with ``cc`` on first use, once
per vendor): the processor answers CPUID as an AMD EPYC 9004 (Zen 4) or an Intel Xeon 4th
generation (Sapphire Rapids) would, by default the vendor this machine is not (``--as amd`` or
``--as intel`` to choose), so libraries that choose their code by vendor, as oneMKL does, take
that vendor's paths, while the instructions run on this CPU. It needs Linux on an x86-64 CPU with
CPUID faulting (``cpuid_fault`` in /proc/cpuinfo: Intel since Ivy Bridge, AMD since Zen 4 or so,
as KVM exposes it) and a C compiler; it exits 2 with one line saying what is missing. What it
shows is vendor dispatch only: the other processor's other differences (cache sizes, the
instructions' own results) are not emulated. docs/reproduce.md says what it measured.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("vendor_cpuid.c")
VENDORS = {"amd": "AuthenticAMD", "intel": "GenuineIntel"}
_FLAGS = {"amd": [], "intel": ["-DEMULATE_INTEL"]}


def _cpuinfo() -> str:
    """/proc/cpuinfo's text; empty where there is none (not Linux)."""
    path = Path("/proc/cpuinfo")
    return path.read_text() if path.exists() else ""


def host_vendor() -> str | None:
    """``"amd"`` or ``"intel"`` from /proc/cpuinfo's vendor_id; None elsewhere."""
    text = _cpuinfo()
    return next((v for v, ident in VENDORS.items() if ident in text), None)


def other_vendor() -> str:
    """The vendor to emulate by default: the one this machine is not (AMD on anything else)."""
    return "intel" if host_vendor() == "amd" else "amd"


def library(vendor: str | None = None) -> Path | None:
    """The compiled preload library answering as ``vendor`` (default ``other_vendor()``; cached
    by the source's hash), or None where it cannot be built or CPUID faulting is missing."""
    vendor = vendor or other_vendor()
    if vendor not in VENDORS:
        raise ValueError(f"vendor must be one of {sorted(VENDORS)}, got {vendor!r}")
    if " cpuid_fault" not in _cpuinfo():
        return None
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    out = Path(tempfile.gettempdir()) / f"rlvr-{vendor}-cpuid-{digest}.so"
    if not out.exists():
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        done = subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", *_FLAGS[vendor], "-o", str(tmp), str(SOURCE)],
            capture_output=True,
        )
        if done.returncode != 0:
            return None
        tmp.replace(out)
    probe = subprocess.run(
        [sys.executable, "-c", "print('ok')"], env={**os.environ, "LD_PRELOAD": str(out)},
        capture_output=True, text=True,
    )  # fmt: skip
    return out if probe.stdout.strip() == "ok" else None


def env(base: dict[str, str] | None = None, vendor: str | None = None) -> dict[str, str] | None:
    """``base`` (default ``os.environ``) with the library of ``vendor`` (default
    ``other_vendor()``) preloaded, or None where unavailable."""
    lib = library(vendor)
    if lib is None:
        return None
    base = dict(os.environ if base is None else base)
    base["LD_PRELOAD"] = f"{lib}:{base['LD_PRELOAD']}" if base.get("LD_PRELOAD") else str(lib)
    return base


def main(argv: list[str]) -> int:
    vendor = None
    if argv[:1] == ["--as"] and len(argv) > 1:
        vendor, argv = argv[1], argv[2:]
        if vendor not in VENDORS:
            print(f"emulate/run.py: --as takes one of {sorted(VENDORS)}", file=sys.stderr)
            return 2
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    e = env(vendor=vendor)
    if e is None:
        print(
            "emulate/run.py: needs Linux x86-64 with CPUID faulting (cpuid_fault in "
            "/proc/cpuinfo) and a C compiler (cc)",
            file=sys.stderr,
        )
        return 2
    return subprocess.run(argv, env=e).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
