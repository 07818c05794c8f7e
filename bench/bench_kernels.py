"""Does the trained model depend on the processor's kernels? What does each kernel mode cost?

Each case is a fresh process (the kernel variables are read when torch loads).

- Default: AdamW steps of a model on fixed random token batches, then the SHA-256 of its weights
  (``rlvr.repro.state_dict_sha256``), for each kernel mode (``native``, ``mkl-avx2``,
  ``reproducible``), each ``ATEN_CPU_CAPABILITY`` a user's environment might request, and each
  requested thread count; ``--emulate`` adds the same cases with the processor answering CPUID
  as the other vendor's processor (``scripts/emulate/run.py``: an AMD EPYC on an Intel host, an
  Intel Xeon on an AMD host), so vendor-dispatched kernels show.
- ``--cost R``: R alternating runs of each mode, nothing requested, one thread (the reproducible
  mode's count): the CPU seconds per step of a tiny base build's warm start (``rlvr build-model
  tiny-kk``, ``sft.steps`` of the preset's SFT) and of an RL run of the tiny profile's shape
  (``rlvr train profile=tiny model=micro``), side by side (CPU time, which a shared machine
  disturbs less than wall time).
- ``--gemm``: GFLOP/s of float32 matrix products at the tiny bases' shapes under each mode's
  GEMM (MKL AVX2 branch, MKL COMPATIBLE branch, OpenBLAS Haswell as ``rlvr.blas`` runs it).

    python bench/bench_kernels.py [--model micro|tiny-arch] [--steps 20] [--emulate]
    python bench/bench_kernels.py --cost 3
    python bench/bench_kernels.py --gemm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "emulate"))
import run as emulate  # noqa: E402

from rlvr.repro import KERNEL_VARS  # noqa: E402  (rlvr.repro does not import torch)

MODES = ("native", "mkl-avx2", "reproducible")

STEPS = r"""
import json, statistics, sys, time
from rlvr.repro import apply_kernel_mode
apply_kernel_mode()
import torch
from rlvr.models import load_model
from rlvr.repro import machine_info, state_dict_sha256
args = json.loads(sys.argv[1])
if args["threads"]:
    torch.set_num_threads(args["threads"])  # what a user's code might ask for
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
                  "aten": info["aten_cpu_capability"], "mode": info["kernel_mode"],
                  "gemm": info["gemm"], "threads": info["torch_threads"]}))
"""

GEMM = r"""
import json, sys, time
from rlvr.repro import apply_kernel_mode
apply_kernel_mode()
import torch
import rlvr.models  # installs the mode's kernels
torch.set_num_threads(1)
out = {}
for m, k, n in [(2048, 128, 384), (2048, 384, 128), (2048, 128, 1024), (32, 128, 1024)]:
    a, b = torch.randn(m, k), torch.randn(k, n)
    reps = max(5, int(3e8 / (2 * m * k * n)))
    a @ b
    t = time.process_time()
    for _ in range(reps):
        a @ b
    out[f"{m}x{k}x{n}"] = 2 * m * k * n * reps / (time.process_time() - t) / 1e9
print(json.dumps(out))
"""


def child_env(mode: str, requested: str | None = None, threads: int = 0, other: bool = False):
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARS}
    env["RLVR_KERNELS"] = mode
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if requested:
        env["ATEN_CPU_CAPABILITY"] = requested
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    if other:
        env = emulate.env(env)
        if env is None:
            raise SystemExit(
                "bench_kernels: --emulate needs CPUID faulting (cpuid_fault) and a C compiler"
            )
    return env


def _python(code: str, payload: dict, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(payload)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cpu_seconds(cmd: list[str], env: dict) -> float:
    """CPU seconds (user + system) of a command and its children."""
    code = (
        "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
        "sys.exit(done.stderr[-3000:]) if done.returncode else None; "
        "r = resource.getrusage(resource.RUSAGE_CHILDREN); print(r.ru_utime + r.ru_stime)"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], env=env, capture_output=True,
                         text=True)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"bench_kernels: {' '.join(cmd[2:5])} failed:\n{out.stderr}")
    return float(out.stdout.strip())


def hashes(args) -> None:
    threads = [int(t) for t in args.threads.split(",")]
    where = ["this CPU"] + ([f"emulated {emulate.other_vendor()}"] if args.emulate else [])
    print(f"{args.steps} AdamW steps of {args.model}, batch {args.batch} x {args.length} tokens")
    print(
        "| processor | RLVR_KERNELS | requested ATEN_CPU_CAPABILITY | threads asked | dispatched "
        "| GEMM | threads used | weights SHA-256 | median CPU ms / step |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    payload = {k: getattr(args, k) for k in ("model", "steps", "batch", "length")}
    for proc in where:
        for mode in MODES:
            for requested in args.requested.split(","):
                for t in threads:
                    env = child_env(mode, None if requested == "unset" else requested, t,
                                    other=proc != "this CPU")  # fmt: skip
                    r = _python(STEPS, {**payload, "threads": t}, env)
                    print(
                        f"| {proc} | {mode} | {requested} | {t} | {r['aten']} | {r['gemm']} | "
                        f"{r['threads']} | {r['sha']} | {r['cpu_ms']:.1f} |",
                        flush=True,
                    )


def cost(args) -> None:
    got = {m: {"build": [], "rl": [], "steps": []} for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.cost):
            for mode in MODES:
                env = child_env(mode, threads=1)
                env["RLVR_HOME"] = tmp
                build = [
                    *(sys.executable, "-m", "rlvr.cli", "build-model", "tiny-kk"),
                    *(f"sft.steps={args.build_steps}", "--rebuild", "--quiet", "--threads", "1"),
                    *("--home", f"{tmp}/{mode}"),
                ]
                got[mode]["build"].append(_cpu_seconds(build, env) / args.build_steps)
                rl = [
                    *(sys.executable, "-m", "rlvr.cli", "train", "env=kk", "algo=grpo"),
                    *("profile=tiny", "model=micro", f"steps={args.rl_steps}", "progress=false"),
                    *("num_threads=1", f"out={tmp}/rl-{mode}-{round_}"),
                ]
                got[mode]["rl"].append(_cpu_seconds(rl, env) / args.rl_steps)
                payload = {"model": "tiny-arch", "steps": 10, "batch": 8, "length": 256}
                got[mode]["steps"].append(_python(STEPS, {**payload, "threads": 1}, env)["cpu_ms"])
    print(
        f"CPU time per step, one thread, median of {args.cost} alternating runs per mode "
        f"(tiny-kk warm start: {args.build_steps} SFT steps with its data and tokenizer; RL: "
        f"{args.rl_steps} steps of profile=tiny on the micro model; whole processes, imports "
        "included; AdamW: 10 steps of the tiny shape on 8 x 256 tokens)"
    )
    print("| RLVR_KERNELS | tiny build s / SFT step | RL s / step | AdamW ms / step | vs native |")
    print("|---|---|---|---|---|")
    med = {m: {k: statistics.median(v) for k, v in got[m].items()} for m in MODES}
    for mode in MODES:
        m, n = med[mode], med["native"]
        ratio = " / ".join(f"{m[k] / n[k]:.2f}x" for k in ("build", "rl", "steps"))
        print(f"| {mode} | {m['build']:.3f} | {m['rl']:.2f} | {m['steps']:.1f} | {ratio} |")
    r, s = med["reproducible"], med["mkl-avx2"]
    print(
        "reproducible / mkl-avx2: "
        + ", ".join(f"{k} {r[k] / s[k]:.2f}x" for k in ("build", "rl", "steps"))
    )


def gemm(args) -> None:
    rows = {m: _python(GEMM, {}, child_env(m, threads=1)) for m in MODES}
    shapes = list(rows["native"])
    print("float32 GEMM GFLOP/s, one thread (m x k x n)")
    print("| RLVR_KERNELS | GEMM | " + " | ".join(shapes) + " |")
    print("|---|---|" + "---|" * len(shapes))
    label = {"native": "MKL, AUTO", "mkl-avx2": "MKL, AVX2 branch",
             "reproducible": "OpenBLAS Haswell"}  # fmt: skip
    for mode, r in rows.items():
        print(f"| {mode} | {label[mode]} | " + " | ".join(f"{r[s]:.1f}" for s in shapes) + " |")
    compat = _python(GEMM, {}, {**child_env("native", threads=1), "MKL_CBWR": "COMPATIBLE"})
    print("| (MKL_CBWR=COMPATIBLE) | MKL, COMPATIBLE | "
          + " | ".join(f"{compat[s]:.1f}" for s in shapes) + " |")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        default="tiny-arch",
        help="micro, tiny-arch (the tiny bases' shape, random weights) or a model name",
    )
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--requested", default="unset,avx512", help="ATEN_CPU_CAPABILITY values")
    p.add_argument("--threads", default="1,2,4", help="thread counts to ask for")
    p.add_argument("--emulate", action="store_true", help="also as the other vendor's CPU")
    p.add_argument("--cost", type=int, default=0, help="alternating runs per mode (timing only)")
    p.add_argument("--build-steps", type=int, default=60)
    p.add_argument("--rl-steps", type=int, default=4)
    p.add_argument("--gemm", action="store_true", help="GEMM GFLOP/s per mode")
    args = p.parse_args()
    if args.cost:
        cost(args)
    elif args.gemm:
        gemm(args)
    else:
        hashes(args)


if __name__ == "__main__":
    main()
