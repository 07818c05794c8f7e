"""Retrieval benchmark: HNSW and IVF-PQ against exact flat search, flat against numpy.

On a synthetic corpus of ``--passages`` (default 100k) passages encoded with the lexical hashed
TF-IDF encoder (real embeddings at 100k take ~45 min on 2 cores, DESIGN section 8), prints in
one run: build time, memory (serialized index size), queries/s and recall@10 of every setting,
and whether HNSW reaches the goal of >= 10x flat's throughput at recall@10 >= 0.95.

recall@10 is tie-aware: a returned passage counts when its exact inner product with the query is
at least the exact 10th-best score (lexical vectors have many exact ties, so identity-based recall
would punish equally good answers). All searches run batched with ``--threads`` FAISS/BLAS threads.

    python bench/bench_retrieval.py [--passages 100000] [--queries 1000] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def recall_at_k(ids: np.ndarray, queries: np.ndarray, vectors: np.ndarray, kth_exact: np.ndarray) -> float:
    """Mean fraction of returned ids whose exact score reaches the exact k-th best score."""
    hits = 0
    for q, row, thr in zip(queries, ids, kth_exact):
        row = row[row >= 0]
        hits += int(np.sum(vectors[row] @ q >= thr - 1e-5))
    return hits / ids.size


def timed_search(index, queries: np.ndarray, k: int, repeat: int = 1) -> tuple[np.ndarray, float]:
    """Batched search: all queries in one call (FAISS uses BLAS GEMM for flat when nq >= 20)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        _, ids = index.search(queries, k)
        best = min(best, time.perf_counter() - t)
    return ids, len(queries) / best


def one_at_a_time_qps(index, queries: np.ndarray, k: int) -> float:
    """Queries/s when each query is its own call, as the env and the service search per turn."""
    t = time.perf_counter()
    for q in queries:
        index.search(q[None, :], k)
    return len(queries) / (time.perf_counter() - t)


def numpy_topk(queries: np.ndarray, vectors: np.ndarray, k: int, block: int = 256) -> np.ndarray:
    out = np.empty((len(queries), k), np.int64)
    for s in range(0, len(queries), block):
        scores = queries[s : s + block] @ vectors.T
        part = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1)
        out[s : s + block] = np.take_along_axis(part, order, axis=1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=256, help="lexical encoder size")
    ap.add_argument("--threads", type=int, default=1, help="FAISS OpenMP threads (the machine is shared)")
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--single", type=int, default=200, help="queries timed one call each")
    args = ap.parse_args()

    import faiss

    from rlvr.envs.searchqa.encoders import HashedTfidfEncoder
    from rlvr.envs.searchqa.index import build_faiss, index_nbytes
    from rlvr.envs.searchqa.synthetic import synthetic_passages

    faiss.omp_set_num_threads(args.threads)
    k = 10
    t0 = time.perf_counter()
    passages, questions = synthetic_passages(args.passages, seed=args.seed)
    texts = [f"{p.title}\n{p.text}" for p in passages]
    enc = HashedTfidfEncoder(dim=args.dim).fit(texts)
    vectors = enc.encode_passages(texts)
    pick = np.random.default_rng(args.seed).choice(len(questions), size=args.queries, replace=False)
    queries = enc.encode_queries([questions[i] for i in pick])
    print(f"corpus: {len(passages)} passages, lexical dim {args.dim}, {len(queries)} queries, "
          f"{args.threads} thread(s); generate+encode {time.perf_counter() - t0:.1f}s")

    rows = []

    single = queries[: args.single]

    def report(name, index, build_s, ids, qps, flat_qps):
        rec = recall_at_k(ids, queries, vectors, kth)
        mem = index_nbytes(index) / 2**20 if index is not None else vectors.nbytes / 2**20
        one = one_at_a_time_qps(index, single, k) if index is not None else float("nan")
        rows.append((name, build_s, mem, qps, one, rec))
        ratio1 = one / flat_one[0] if flat_one else 1.0
        print(f"{name:<34} build {build_s:6.1f}s mem {mem:7.1f} MiB | batched {qps:7.0f} q/s x{qps / flat_qps:5.1f} "
              f"| one-at-a-time {one:6.0f} q/s x{ratio1:5.1f} | recall@10 {rec:.4f}", flush=True)
        if not flat_one:
            flat_one.append(one)
        return rec, ratio1

    flat_one: list[float] = []

    t = time.perf_counter()
    flat, _ = build_faiss(vectors, "flat", progress=False)
    flat_build = time.perf_counter() - t
    flat_ids, flat_qps = timed_search(flat, queries, k, repeat=2)
    exact = np.sort(queries @ vectors.T, axis=1)[:, -k:]
    kth = exact[:, 0]
    report("flat (exact IP)", flat, flat_build, flat_ids, flat_qps, flat_qps)

    t = time.perf_counter()
    np_ids = numpy_topk(queries, vectors, k)
    np_qps = len(queries) / (time.perf_counter() - t)
    report("numpy brute force", None, 0.0, np_ids, np_qps, flat_qps)
    same = np.mean([len(set(a) & set(b)) / k for a, b in zip(np_ids, flat_ids)])
    print(f"{'':<28} flat vs numpy: identical ids {same:.4f} (the rest are exact-score ties)")

    t = time.perf_counter()
    hnsw, _ = build_faiss(vectors, "hnsw", {"M": args.hnsw_m, "efConstruction": args.ef_construction}, progress=False)
    hnsw_build = time.perf_counter() - t
    goal = None
    for ef in (16, 32, 64, 128, 256):
        faiss.ParameterSpace().set_index_parameter(hnsw, "efSearch", ef)
        ids, qps = timed_search(hnsw, queries, k, repeat=2)
        rec, ratio1 = report(f"hnsw M={args.hnsw_m} efSearch={ef}", hnsw, hnsw_build, ids, qps, flat_qps)
        if goal is None and rec >= 0.95:
            goal = (ef, qps / flat_qps, ratio1, rec)

    t = time.perf_counter()
    ivf, params = build_faiss(vectors, "ivfpq", progress=False, seed=args.seed)
    ivf_build = time.perf_counter() - t
    for nprobe in (8, 16, 32, 64):
        faiss.ParameterSpace().set_index_parameter(ivf, "nprobe", nprobe)
        ids, qps = timed_search(ivf, queries, k, repeat=2)
        report(f"ivfpq nlist={params['nlist']} PQ{params['pq_m']} nprobe={nprobe}", ivf, ivf_build, ids, qps, flat_qps)

    if goal:
        ef, speed, speed1, rec = goal
        verdict = lambda x: "MET" if x >= 10 else "NOT MET"  # noqa: E731
        print(f"goal (HNSW >= 10x flat at recall@10 >= 0.95), efSearch={ef}, recall {rec:.4f}: "
              f"batched x{speed:.1f} {verdict(speed)}; one-at-a-time x{speed1:.1f} {verdict(speed1)}")
    else:
        print("goal (HNSW >= 10x flat at recall@10 >= 0.95): NOT MET — no efSearch reached recall 0.95")
    print(f"total {time.perf_counter() - t0:.1f}s (cpu count {os.cpu_count()})")


if __name__ == "__main__":
    main()
