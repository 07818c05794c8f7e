"""Does the trained model depend on the CPU kernels the processor would choose? What does the
reproducible kernel mode cost?

Each case is a fresh process (the kernel variables are read when torch loads): AdamW steps of a
model from ``rlvr.models`` on fixed random token batches, then the SHA-256 of its weights
(``rlvr.repro.state_dict_sha256``) and the median step time. Cases: each ``ATEN_CPU_CAPABILITY``
a user's environment might request, without the mode (``RLVR_KERNELS=native``, the processor's
choice) and with it (``RLVR_KERNELS=reproducible``, which overrides the request), at 1 and at
all threads. ``--cost R``: instead, R alternating runs of each mode at one thread with nothing
requested, and the median step time of each (CPU seconds of the process, which a shared machine
disturbs less than wall time).

    python bench/bench_kernels.py [--model micro|tiny-arch] [--steps 20] [--batch 8] [--length 256]
    python bench/bench_kernels.py --model tiny-arch --cost 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, statistics, sys, time
from rlvr.repro import apply_kernel_mode
apply_kernel_mode()
import torch
from rlvr.models import load_model
from rlvr.repro import machine_info, state_dict_sha256
args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
if args["model"] == "tiny-arch":  # the tiny bases' shape (rlvr.models.tiny), random weights
    from transformers import Qwen2ForCausalLM
    from rlvr.models.micro import micro_config
    from rlvr.models.tiny import ArchConfig
    a = ArchConfig()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(micro_config(1024, a.hidden_size, a.num_layers, a.num_heads,
                                          a.num_kv_heads, a.intermediate_size))
    vocab = 1024
else:
    model, tok = load_model(args["model"], seed=0)
    vocab = len(tok)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
times, cpu = [], []
for step in range(args["steps"]):
    ids = torch.randint(0, vocab, (args["batch"], args["length"]), generator=g)
    t0, c0 = time.perf_counter(), time.process_time()
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # as the trainer and SFT do
    opt.step()
    times.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
info = machine_info()
print(json.dumps({"sha": state_dict_sha256(model.state_dict())[:16],
                  "step_ms": 1000 * statistics.median(times[1:] or times),
                  "cpu_ms": 1000 * statistics.median(cpu[1:] or cpu),
                  "aten": info["aten_cpu_capability"], "mode": info["kernel_mode"]}))
"""


def run_case(mode: str, requested: str | None, threads: int, args) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
    }
    env["RLVR_KERNELS"] = mode
    if requested:
        env["ATEN_CPU_CAPABILITY"] = requested
    payload = json.dumps(
        {
            "model": args.model,
            "steps": args.steps,
            "batch": args.batch,
            "length": args.length,
            "threads": threads,
        }
    )
    out = subprocess.run(
        [sys.executable, "-c", CHILD, payload], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        default="micro",
        help="micro, tiny-arch (the tiny bases' shape, random weights) or a model name",
    )
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--requested", default="default,avx2,avx512,unset")
    p.add_argument("--threads", default="", help="comma-separated (default: 1 and all cores)")
    p.add_argument("--cost", type=int, default=0, help="alternating runs per mode (timing only)")
    args = p.parse_args()
    if args.cost:
        return cost(args)
    threads = (
        [int(t) for t in args.threads.split(",")]
        if args.threads
        else sorted({1, os.cpu_count() or 1})
    )
    print(f"{args.steps} AdamW steps of {args.model}, batch {args.batch} x {args.length} tokens")
    print(
        "| RLVR_KERNELS | requested ATEN_CPU_CAPABILITY | threads | dispatched | weights "
        "SHA-256 | median step ms |"
    )
    print("|---|---|---|---|---|---|")
    for mode in ("native", "reproducible"):
        for requested in args.requested.split(","):
            for t in threads:
                r = run_case(mode, None if requested == "unset" else requested, t, args)
                print(
                    f"| {mode} | {requested} | {t} | {r['aten']} | {r['sha']} | "
                    f"{r['step_ms']:.1f} |",
                    flush=True,
                )


def cost(args) -> None:
    import statistics

    got: dict[str, list[dict]] = {"native": [], "reproducible": []}
    for _ in range(args.cost):
        for mode in got:
            got[mode].append(run_case(mode, None, 1, args))
    print(
        f"{args.steps} AdamW steps of {args.model}, batch {args.batch} x {args.length} tokens, "
        f"1 thread, {args.cost} alternating runs per mode (median over runs of each run's "
        "median step)"
    )
    print("| RLVR_KERNELS | dispatched | CPU ms / step | wall ms / step |")
    print("|---|---|---|---|")
    med = {}
    for mode, rs in got.items():
        med[mode] = statistics.median(r["cpu_ms"] for r in rs)
        print(
            f"| {mode} | {rs[0]['aten']} | {med[mode]:.1f} | "
            f"{statistics.median(r['step_ms'] for r in rs):.1f} |"
        )
    print(f"reproducible / native CPU time: {med['reproducible'] / med['native']:.3f}")


if __name__ == "__main__":
    main()
