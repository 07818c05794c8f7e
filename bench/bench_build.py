"""What do micro-batches buy a tiny base build, and do they keep its bits?

The reproducible kernel mode runs one torch thread per process, so a plain build uses one core.
``SFTConfig.micro_batches`` computes slices of each batch on as many threads
(``rlvr.models.sft``). This builds the first ``--steps`` steps of a preset (default tiny-kk)
three ways, each in a fresh process and without the preset's acceptance check: one slice;
``--micro`` slices on every core; ``--micro`` slices pinned to one core. It prints wall time,
tokens/s and the weights' SHA-256 side by side: the last two must be the same bits, the first
other bits (and slower on 2+ cores).

    python bench/bench_build.py [--preset tiny-kk] [--steps 300] [--micro 2]

Measured: docs/tiny_models.md ("Two micro-batches").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = """
import json, os, sys
from rlvr.repro import apply_kernel_mode
apply_kernel_mode()
from rlvr.models.build import build, with_overrides
from rlvr.models.presets import preset_config
preset, steps, micro, one_core, out = sys.argv[1:6]
if one_core == "1":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
cfg = with_overrides(
    preset_config(preset), [f"sft.steps={steps}", f"sft.micro_batches={micro}", "accept.draws=1"]
)
rec = build(cfg, out, progress=False)
print(json.dumps({"seconds": rec["sft"]["seconds"], "tokens_per_s": rec["sft"]["tokens_per_s"],
                  "weights": rec["weights_sha256"], "cores": len(os.sched_getaffinity(0))}))
"""


def run(preset: str, steps: int, micro: int, one_core: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = [preset, str(steps), str(micro), "1" if one_core else "0", os.path.join(tmp, "m")]
        out = subprocess.run(
            [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=True
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-kk")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--micro", type=int, default=2, help="slices of the compared builds (>= 2)")
    args = ap.parse_args()
    micro = args.micro
    if micro < 2:
        sys.exit(f"--micro {micro}: compare one slice against 2 or more")
    cases = [
        ("1 slice, every core", 1, False),
        (f"{micro} slices, every core", micro, False),
        (f"{micro} slices, one core", micro, True),
    ]
    print(f"{args.preset}, {args.steps} steps, reproducible kernel mode")
    print(f"{'case':<24} {'cores':>5} {'seconds':>8} {'tok/s':>8}  weights")
    rows = []
    for label, n, one in cases:
        r = run(args.preset, args.steps, n, one)
        rows.append(r)
        print(
            f"{label:<24} {r['cores']:>5} {r['seconds']:>8.1f} {r['tokens_per_s']:>8.0f}  "
            f"{r['weights'][:16]}"
        )
    same = rows[1]["weights"] == rows[2]["weights"]
    print(
        f"speed-up of {micro} slices: {rows[1]['tokens_per_s'] / rows[0]['tokens_per_s']:.2f}x; "
        f"same bits on one core and on all: {'yes' if same else 'NO'}"
    )
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
