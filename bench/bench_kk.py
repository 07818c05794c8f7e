"""K&K puzzles per second: rlvr's generator against reasoning-gym's ``knights_knaves``.

    python bench/bench_kk.py                 # 3, 5, 7 people, ~3 s per cell, about 1 minute
    python bench/bench_kk.py --seconds 1 --sizes 2 4 8

Both sides do the same work per puzzle: sample statements (depth 2, width 2), brute-force the
assignments until exactly one solution, pick names and render the question text. The "ours+cot"
column also builds the chat prompt and the solver chain of thought (what ``env.reset`` does).
reasoning-gym is an optional bench dependency: ``pip install reasoning-gym``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import time

from rlvr.envs.kk import generate_puzzle, kk_prompt, solver_cot


def rate(make_one, seconds: float, min_items: int = 20) -> float:
    """Items per second of ``make_one(i)`` over at least ``seconds`` and ``min_items`` calls."""
    make_one(0)  # warm caches/imports outside the timed loop
    i, t0 = 1, time.perf_counter()
    while True:
        make_one(i)
        i += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and i > min_items:
            return (i - 1) / elapsed


def ours(n: int):
    return lambda i: generate_puzzle(i, n)


def ours_with_cot(n: int):
    def make(i):
        p = generate_puzzle(i, n)
        return kk_prompt(p.quiz), solver_cot(p.statements, p.names)

    return make


def peer(n: int):
    import reasoning_gym

    ds = reasoning_gym.create_dataset(
        "knights_knaves", n_people=n, depth_constraint=2, width_constraint=2, size=10**9, seed=0
    )
    return lambda i: ds[i]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--seconds", type=float, default=3.0, help="time per (generator, size) cell")
    args = ap.parse_args(argv)
    try:
        rg_version = importlib.metadata.version("reasoning-gym")
        import reasoning_gym  # noqa: F401

        rg_error = None
    except Exception as exc:  # report exactly why the peer is missing, keep benchmarking ours
        rg_version, rg_error = None, f"{type(exc).__name__}: {exc}"
    print(f"reasoning-gym: {rg_version or 'not available (' + str(rg_error) + ')'}")
    print(f"{'n_people':>8} {'ours/s':>10} {'ours+cot/s':>11} {'rgym/s':>10} {'speedup':>8}")
    for n in args.sizes:
        a = rate(ours(n), args.seconds)
        b = rate(ours_with_cot(n), args.seconds)
        c = rate(peer(n), args.seconds) if rg_error is None else float("nan")
        print(f"{n:>8} {a:>10.0f} {b:>11.0f} {c:>10.1f} {a / c:>7.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
