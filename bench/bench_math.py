"""Math verifications per second: the worker pool against serial math-verify, on MATH-500.

    python bench/bench_math.py [--workers 2] [--n 500] [--timeout-s 5] [--group 1]

Each item compares MATH-500's gold ``answer`` with the last ``\\boxed{}`` of its reference
``solution`` (a gold-like prediction). Both paths extract the answer in this process with the
same code; the pool (``score_batch``, ``workers`` processes, hard per-item deadline) runs first
on fresh workers, then the serial baseline (``verify_answer_in_process``: math-verify in this
process with its own ``signal.alarm`` timeouts), so neither path sees a warm parse cache
(math-verify caches parsed strings: a second pass over the same items would measure the cache).
Both warm up on a few unrelated items first.
Worker start-up is timed separately. Wall-clock figures depend on what else runs on the machine,
so CPU seconds are printed too (this process for serial; each worker, from /proc, for the pool):
``workers`` x serial CPU / total worker CPU is the speed-up that otherwise idle cores would give
(items go out in chunks that shrink to single items at the end of a batch, so the work
balances across workers). ``--group G`` scores G responses per gold, as a training reward batch
does (the item's own solution, then those of the next G-1 items): the pool sends the gold once
per chunk and its workers parse it once; serial math-verify parses it for every response. A
last line scores a few towers of exponents (which math-verify never finishes) through the pool to
show the deadline holding.
Needs the shared data folder (``RLVR_SHARED_DATA`` or ``../shared/data``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from rlvr.data_paths import shared_data_dir
from rlvr.envs.math import load_dataset, score_batch
from rlvr.envs.math.data import DATASETS
from rlvr.envs.math.pool import shared_pool
from rlvr.envs.math.reward import final_answer
from rlvr.envs.math.verify import verify_answer_in_process


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc); 0.0 where unavailable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n", type=int, default=500, help="number of MATH-500 items")
    ap.add_argument("--timeout-s", type=float, default=5.0)
    ap.add_argument("--group", type=int, default=1, help="responses per gold (a GRPO group)")
    args = ap.parse_args(argv)

    root = shared_data_dir()
    if root is None or not (root / DATASETS["math500"].local_path).is_file():
        # Checked here so that a fresh clone does not fall through to the hub (retries, traceback).
        print(
            "bench_math: needs MATH-500 in the shared data folder (../shared/data beside the "
            "checkout, or RLVR_SHARED_DATA=<folder>)",
            file=sys.stderr,
        )
        return 2
    recs = load_dataset("math500")[: args.n]
    # A group: the item's own reference solution, then those of the next G-1 items (G distinct
    # responses to one gold, mostly wrong, as early in training).
    golds = [r["ground_truth"] for r in recs for _ in range(args.group)]
    preds = [
        recs[(i + j) % len(recs)]["solution"] for i in range(len(recs)) for j in range(args.group)
    ]

    t0 = time.perf_counter()
    pool = shared_pool(args.workers)
    pool.start(wait=True)
    startup = time.perf_counter() - t0

    # Both paths warm up on the same few items first (parser construction, first imports).
    warm = [
        (r"\frac{1}{2}", "0.5"),
        ("x^2+1", "1+x^2"),
        (r"\sqrt{3}", r"\sqrt3"),
        ("(1,2)", "(1,2)"),
    ]
    score_batch(
        [rf"\boxed{{{a}}}" for _, a in warm] * args.workers,
        [g for g, _ in warm] * args.workers,
        workers=args.workers,
        timeout_s=args.timeout_s,
    )
    for g, a in warm:
        verify_answer_in_process(g, a, args.timeout_s)

    cpu0 = {pid: _cpu_seconds(pid) for pid in pool.pids}
    parent0 = time.process_time()
    t0 = time.perf_counter()
    pooled = score_batch(preds, golds, workers=args.workers, timeout_s=args.timeout_s)
    t_pool = time.perf_counter() - t0
    parent_cpu = time.process_time() - parent0
    worker_cpu = [_cpu_seconds(pid) - c for pid, c in cpu0.items()]
    pool_missed = sum(s.reason == "timeout" for s in pooled)

    serial0 = time.process_time()
    t0 = time.perf_counter()
    serial = []
    for pred, gold in zip(preds, golds):
        answer, _ = final_answer(pred)
        serial.append(verify_answer_in_process(gold, answer, args.timeout_s) if answer else None)
    t_serial = time.perf_counter() - t0
    serial_cpu = time.process_time() - serial0
    serial_ok = [bool(v and v.correct) for v in serial]
    serial_missed = sum(bool(v and v.reason == "timeout") for v in serial)

    n = len(preds)
    print(
        f"MATH-500 gold vs reference-solution last box, n={n} ({len(recs)} golds x "
        f"{args.group}), timeout {args.timeout_s:g} s/item"
    )
    print(f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'':24}{'wall s':>8}{'verif/s':>9}{'CPU s':>22}{'correct':>9}{'past deadline':>15}")
    print(
        f"{'serial math-verify':24}{t_serial:>8.2f}{n / t_serial:>9.1f}{serial_cpu:>22.2f}"
        f"{sum(serial_ok):>9}{serial_missed:>15}"
    )
    cpu_txt = "+".join(f"{c:.2f}" for c in worker_cpu) + f" (+{parent_cpu:.2f})"
    print(
        f"{f'pool, {args.workers} workers':24}{t_pool:>8.2f}{n / t_pool:>9.1f}{cpu_txt:>22}"
        f"{sum(s.correct for s in pooled):>9}{pool_missed:>15}"
    )
    total = sum(worker_cpu)
    idle = f"{args.workers * serial_cpu / total:.2f}x" if total > 0 else "n/a"
    print(
        f"speed-up: wall {t_serial / t_pool:.2f}x; on {args.workers} idle cores (workers x "
        f"serial CPU / pool CPU, the load balances across workers) {idle}; "
        "goal >= 1.7x on 2 cores"
    )
    print(
        f"pool start-up {startup:.2f} s (not included); verdicts agree on "
        f"{sum(a == b.correct for a, b in zip(serial_ok, pooled))}/{n}"
    )

    tower = "2^{" * 5 + "2" + "}" * 5
    t0 = time.perf_counter()
    adversarial = score_batch(
        [f"\\boxed{{{tower}}}"] * 4 + [r"\boxed{4}"], ["4"] * 5, workers=args.workers, timeout_s=1.0
    )
    print(
        f"adversarial: 4 towers + 1 normal item, 1 s deadline: "
        f"{sum(s.reason == 'timeout' for s in adversarial)} past deadline (killed and replaced), "
        f"normal item correct={adversarial[-1].correct}, wall {time.perf_counter() - t0:.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
