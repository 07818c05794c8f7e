"""FAISS indexes over passage embeddings: exact inner product (flat), HNSW and IVF-PQ.

Vectors are L2-normalised, so inner product is cosine similarity. A saved index is a folder:
``index.faiss`` (FAISS's own format), ``meta.json`` (kind, search parameters, encoder spec,
corpus location), ``idf.npy`` for the lexical encoder and ``corpus.jsonl`` when the corpus was
in memory. ``load_index`` memory-maps ``index.faiss`` (``faiss.IO_FLAG_MMAP``) so a large index is
paged in from disk on demand instead of being read whole.

Sizes (docs/design.md §4): flat stores 4*d bytes per passage (21M x 768 = 62 GB for e5 over
Wikipedia); HNSW adds about 8*M bytes of graph links; IVF-PQ stores ``pq_m`` bytes per passage,
plus the 4*d-byte full vectors when ``refine`` > 0 re-ranks its candidates exactly.

A query's hits never depend on the other queries searched with it (the retrieval service
gathers concurrent requests into one call): FAISS's flat search computes inner products with
BLAS for 20 queries or more and one at a time below, and BLAS rounding depends on the batch's
shape (on a 768-d random index only 36% of scores were bit-equal between a query searched alone
and in a batch of 256, FAISS 1.15.1), so a flat search takes ``RESCORE_MARGIN`` more candidates
and scores each pair again on its own (``rescore``). HNSW and IVF-PQ already score each
query on its own; ``tests/test_searchqa_index.py`` holds all three.

``to_gpu`` moves an index to the GPUs as Search-R1's ``retrieval_server.py`` does (fp16, sharded
over every visible GPU), where the FAISS build has GPU support; otherwise it says why in one line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import faiss
import numpy as np

from rlvr.envs.searchqa.corpus import JsonlCorpus, Passage, load_corpus, write_corpus
from rlvr.envs.searchqa.encoders import Encoder, HashedTfidfEncoder, encoder_from_spec, get_encoder
from rlvr.files import write_json_atomic
from rlvr.locks import LOCK_FILE, hold

INDEX_KINDS = ("flat", "hnsw", "ivfpq")
#: Extra candidates a flat search takes before scoring each pair again on its own: the
#: BLAS and one-at-a-time scores differ by a few float32 ulps (6e-8 measured), so the true top-k
#: is always among the top k + 16 of either.
RESCORE_MARGIN = 16

#: Defaults: HNSW M=32 / efConstruction=200 / efSearch=128 and IVF nprobe=32 are FAISS-wiki
#: starting points; ``bench/bench_retrieval.py`` measures the recall/throughput they give.
#: IVF-PQ ``refine`` is FAISS's ``k_factor`` of ``IndexRefineFlat``: 0 = plain PQ scores; r > 0 =
#: PQ proposes r*k candidates that are re-ranked by exact inner product with the full vectors.
DEFAULT_PARAMS = {
    "flat": {},
    "hnsw": {"M": 32, "efConstruction": 200, "efSearch": 128},
    "ivfpq": {"nlist": None, "pq_m": None, "nbits": 8, "nprobe": 32, "refine": 0},
}


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float
    row: int


def _pq_m(dim: int) -> int:
    """Largest divisor of ``dim`` not above min(64, dim/4): at least 4 dims per 1-byte code and at
    most 64 bytes per passage (the usual PQ64 for 768-d e5 vectors); at least 1."""
    for m in range(max(min(64, dim // 4), 1), 0, -1):
        if dim % m == 0:
            return m
    return 1


def resolve_params(kind: str, n: int, dim: int, params: dict | None = None) -> dict:
    """Full parameter set for ``kind`` on ``n`` vectors of size ``dim`` (defaults filled in)."""
    if kind not in INDEX_KINDS:
        raise ValueError(f"index kind must be one of {INDEX_KINDS}, got {kind!r}")
    params = dict(params or {})
    unknown = set(params) - set(DEFAULT_PARAMS[kind])
    if unknown:
        raise ValueError(
            f"unknown {kind} index parameters {sorted(unknown)}; "
            f"known: {sorted(DEFAULT_PARAMS[kind])}"
        )
    out = {**DEFAULT_PARAMS[kind], **{k: v for k, v in params.items() if v is not None}}
    if kind == "ivfpq":
        # nlist ~ 4 sqrt(n) (FAISS guideline) with >= 39 training points per list.
        out["nlist"] = int(out["nlist"] or max(1, min(int(4 * math.sqrt(n)), n // 39)))
        out["pq_m"] = int(out["pq_m"] or _pq_m(dim))
        # k-means on 2**nbits centroids per sub-quantizer needs at least that many points.
        out["nbits"] = int(min(out["nbits"], max(1, int(math.log2(max(n, 2))))))
        if dim % out["pq_m"]:
            raise ValueError(f"pq_m={out['pq_m']} must divide the vector size {dim}")
        try:
            refine = float(out["refine"])
        except (TypeError, ValueError):
            refine = float("nan")
        if not (refine == 0 or refine >= 1):
            raise ValueError(
                f"refine must be 0 (no re-ranking) or >= 1 (candidates per result), "
                f"got {out['refine']!r}"
            )
        out["refine"] = int(refine) if refine.is_integer() else refine
    return out


def apply_search_params(index: faiss.Index, kind: str, params: dict) -> None:
    ps = faiss.ParameterSpace()
    if kind == "hnsw":
        ps.set_index_parameter(index, "efSearch", int(params["efSearch"]))
    elif kind == "ivfpq":
        # ParameterSpace passes "nprobe" through an IndexRefine wrapper to its IVF base index.
        ps.set_index_parameter(index, "nprobe", int(min(params["nprobe"], params["nlist"])))
        if params.get("refine", 0) > 0:
            ps.set_index_parameter(index, "k_factor_rf", float(params["refine"]))


def refine_with_full_vectors(
    base: faiss.Index, vectors: np.ndarray, k_factor: float
) -> faiss.IndexRefineFlat:
    """Wrap a filled approximate index so that a search for k takes its ``k_factor * k`` best
    candidates and re-ranks them by exact inner product with ``vectors`` (FAISS IndexRefineFlat)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if len(vectors) != base.ntotal:
        raise ValueError(f"refine needs all {base.ntotal} indexed vectors, got {len(vectors)}")
    index = faiss.IndexRefineFlat(base, faiss.swig_ptr(vectors))
    index.k_factor = float(k_factor)
    return index


def build_faiss(
    vectors: np.ndarray,
    kind: str = "flat",
    params: dict | None = None,
    *,
    progress: bool = True,
    batch_size: int = 20_000,
    seed: int = 0,
) -> tuple[faiss.Index, dict]:
    """Build a FAISS inner-product index over ``vectors`` (n, d); returns ``(index, params)``."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(vectors) == 0:
        raise ValueError(f"vectors must be a non-empty (n, d) array, got shape {vectors.shape}")
    n, dim = vectors.shape
    params = resolve_params(kind, n, dim, params)
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, int(params["M"]), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(params["efConstruction"])
    else:
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(
            quantizer,
            dim,
            int(params["nlist"]),
            int(params["pq_m"]),
            int(params["nbits"]),
            faiss.METRIC_INNER_PRODUCT,
        )
        # index_factory("IVF..,PQ..") turns on polysemous training, a code-reordering step that
        # took minutes even on 2k vectors here and only matters for polysemous (Hamming) search.
        index.do_polysemous_training = False
        n_train = min(n, max(params["nlist"], 2 ** params["nbits"]) * 64)
        sample = np.random.default_rng(seed).choice(n, size=n_train, replace=False)
        index.train(vectors[np.sort(sample)])
    chunks = range(0, n, batch_size)
    if progress:
        from tqdm import tqdm

        chunks = tqdm(chunks, desc=f"add to {kind} index", unit="batch")
    for start in chunks:
        index.add(vectors[start : start + batch_size])
    if kind == "ivfpq" and params["refine"] > 0:
        index = refine_with_full_vectors(index, vectors, params["refine"])
    apply_search_params(index, kind, params)
    return index, params


class SearchIndex:
    """Encoder + FAISS index + passages: ``search(["query", ...], k)`` -> top-k ``Hit`` lists."""

    def __init__(self, index: faiss.Index, encoder: Encoder, corpus, kind: str, params: dict):
        if index.ntotal != len(corpus):
            raise ValueError(
                f"index holds {index.ntotal} vectors but the corpus has {len(corpus)} passages"
            )
        self.index, self.encoder, self.corpus, self.kind, self.params = (
            index,
            encoder,
            corpus,
            kind,
            params,
        )
        #: What searches: ``index`` itself, or its copy on the GPUs (``use_gpu``); a flat
        #: search's rescoring reads the stored vectors from ``index``.
        self.searcher = index

    def use_gpu(self) -> None:
        """Search on every visible GPU (``to_gpu``); ``ValueError`` in one line where FAISS
        cannot."""
        self.searcher = to_gpu(self.index, self.kind)

    def __len__(self) -> int:
        return self.index.ntotal

    def search_vectors(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ``(scores, ids)`` per row; each row's result is the same whatever other
        rows it is searched with (module docstring)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.kind != "flat":
            return self.searcher.search(vectors, int(k))
        _, ids = self.searcher.search(vectors, int(min(k + RESCORE_MARGIN, len(self))))
        return rescore(self.index, vectors, ids, int(k))

    def search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """Top-``k`` passages per query, best first (fewer when the index holds fewer)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        queries = list(queries)
        if not queries:
            return []
        scores, ids = self.search_vectors(self.encoder.encode_queries(queries), min(k, len(self)))
        return [
            [Hit(self.corpus[int(i)], float(s), int(i)) for s, i in zip(srow, irow) if i >= 0]
            for srow, irow in zip(scores, ids)
        ]

    def save(self, out_dir: str | Path) -> Path:
        """Write the index folder, holding its lock (a second writer: ``FolderInUse``)."""
        out = Path(out_dir)
        with hold(out / LOCK_FILE, wait=False, what=f"index folder {out}"):
            return self._save(out)

    def _save(self, out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(out / "index.faiss"))
        if isinstance(self.corpus, JsonlCorpus):
            corpus_ref = str(self.corpus.path.resolve())
        else:
            write_corpus(self.corpus, out / "corpus.jsonl")
            corpus_ref = "corpus.jsonl"
        if isinstance(self.encoder, HashedTfidfEncoder):
            np.save(out / "idf.npy", self.encoder.idf)
        meta = {
            "format": 1,
            "kind": self.kind,
            "params": self.params,
            "ntotal": int(self.index.ntotal),
            "dim": int(self.index.d),
            "encoder": self.encoder.spec(),
            "corpus": corpus_ref,
        }
        write_json_atomic(out / "meta.json", meta, indent=2)  # last: the index is complete
        return out


def rescore(
    index: faiss.Index, vectors: np.ndarray, ids: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of each row's candidate ``ids`` by inner product with the stored vectors,
    each pair scored on its own (FAISS's ``compute_distance_subset``: one SIMD dot product per
    pair, the same arithmetic whatever the batch), ties broken by the lower id; ``-1`` ids (no
    candidate) score -inf."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    valid = ids >= 0
    ids = np.ascontiguousarray(np.where(valid, ids, 0), dtype=np.int64)
    scores = np.empty(ids.shape, dtype=np.float32)
    index.compute_distance_subset(
        len(ids), faiss.swig_ptr(vectors), ids.shape[1], faiss.swig_ptr(scores), faiss.swig_ptr(ids)
    )
    scores[~valid], ids[~valid] = -np.inf, -1
    order = np.lexsort((ids, -scores), axis=-1)[:, :k]
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def to_gpu(index: faiss.Index, kind: str) -> faiss.Index:
    """``index`` on every visible GPU, as Search-R1's ``search_r1/search/retrieval_server.py``
    (commit a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06, ``DenseRetriever``) places it: fp16
    storage, sharded across the GPUs. ``ValueError`` in one line where that cannot be done."""
    if kind == "hnsw":
        raise ValueError("FAISS has no GPU HNSW index; serve an hnsw index on the CPU")
    if not hasattr(faiss, "GpuMultipleClonerOptions"):
        raise ValueError(
            "this FAISS build has no GPU support (faiss-cpu); install a GPU build "
            "(e.g. conda's faiss-gpu, or pip's faiss-gpu-cu12) or serve on the CPU"
        )
    if faiss.get_num_gpus() < 1:
        raise ValueError("FAISS was built with GPU support but sees no GPU")
    options = faiss.GpuMultipleClonerOptions()
    options.useFloat16, options.shard = True, True
    if isinstance(index, faiss.IndexRefine):
        raise ValueError("an ivfpq index with refine > 0 re-ranks on the CPU; serve it there")
    return faiss.index_cpu_to_all_gpus(index, co=options)


def _passage_texts(corpus) -> list[str]:
    return [f"{p.title}\n{p.text}" if p.title else p.text for p in corpus]


def build_index(
    corpus,
    encoder: str | Encoder = "lexical",
    kind: str = "flat",
    params: dict | None = None,
    *,
    out_dir: str | Path | None = None,
    progress: bool = True,
    encode_batch: int = 10_000,
) -> SearchIndex:
    """Encode every passage of ``corpus`` (path, ``Corpus`` or list) and index it.

    A lexical encoder given by name is first fitted (IDF) on the corpus. Saved to ``out_dir``
    when given, whose lock is held from the start: a second builder of the same folder is refused
    (``FolderInUse``) before it encodes anything.
    """
    if out_dir is not None:
        with hold(Path(out_dir) / LOCK_FILE, wait=False, what=f"index folder {out_dir}"):
            built = build_index(
                corpus, encoder, kind, params, progress=progress, encode_batch=encode_batch
            )
            built.save(out_dir)
            return built
    corpus = load_corpus(corpus, progress=progress)
    if len(corpus) == 0:
        raise ValueError("corpus is empty")
    enc = get_encoder(encoder) if isinstance(encoder, str) else encoder
    texts = _passage_texts(corpus)
    if isinstance(enc, HashedTfidfEncoder) and isinstance(encoder, str):
        enc.fit(texts)
    starts = range(0, len(texts), encode_batch)
    if progress:
        from tqdm import tqdm

        starts = tqdm(starts, desc="encode passages", unit="batch")
    vectors = np.concatenate([enc.encode_passages(texts[s : s + encode_batch]) for s in starts])
    index, resolved = build_faiss(vectors, kind, params, progress=progress)
    built = SearchIndex(index, enc, corpus, kind, resolved)
    if out_dir is not None:
        built.save(out_dir)
    return built


def read_faiss(path: str | Path, mmap: bool = True) -> faiss.Index:
    """Read an index file, memory-mapped where this FAISS build supports it for the index type.

    A file FAISS cannot read (truncated, empty, not an index, a folder) raises ``ValueError``
    naming it, with FAISS's own reason."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a file; rebuild the index with `rlvr index`")
    if mmap:
        try:
            return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError:
            pass
    try:
        return faiss.read_index(str(path))
    except RuntimeError as e:
        # "Error in <signature> at <file>.cpp:<line>: <reason>": keep the reason
        reason = re.split(r"\.(?:cpp|h):\d+: ", " ".join(str(e).split()))[-1]
        raise ValueError(
            f"{path} is not a readable FAISS index ({path.stat().st_size} bytes; {reason[:160]}); "
            "rebuild it with `rlvr index`"
        ) from None


def _read_meta(path: Path) -> dict:
    """``meta.json`` of a saved index, checked field by field (``ValueError`` naming it)."""
    try:
        meta = json.loads(path.read_text())
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path} is not valid JSON ({str(e)[:160]})") from None
    fields = {"kind": str, "params": dict, "encoder": dict, "corpus": str}
    if not isinstance(meta, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(meta).__name__}")
    for key, kind in fields.items():
        if not isinstance(meta.get(key), kind):
            raise ValueError(
                f"{path}: {key!r} must be a JSON {kind.__name__}, got {meta.get(key)!r:.80}"
            )
    if meta["kind"] not in INDEX_KINDS:
        raise ValueError(f"{path}: 'kind' must be one of {INDEX_KINDS}, got {meta['kind']!r:.80}")
    return meta


def load_index(
    path: str | Path, corpus=None, *, mmap: bool = True, encoder: Encoder | None = None
) -> SearchIndex:
    """Load a folder written by ``SearchIndex.save``; ``corpus`` overrides the recorded one.
    A damaged folder raises ``ValueError`` (or ``FileNotFoundError``) naming the file at fault."""
    folder = Path(path)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(
            f"no index at {folder} (meta.json missing); build one with `rlvr index`"
        )
    meta = _read_meta(meta_path)
    index = read_faiss(folder / "index.faiss", mmap=mmap)
    for key, value in (("ntotal", index.ntotal), ("dim", index.d)):
        if key in meta and meta[key] != value:
            raise ValueError(
                f"{folder / 'index.faiss'} holds {key} {value} but meta.json says {meta[key]!r:.40}"
            )
    try:
        apply_search_params(index, meta["kind"], meta["params"])
        if encoder is None:
            idf_path = folder / "idf.npy"
            encoder = encoder_from_spec(
                meta["encoder"], np.load(idf_path) if idf_path.is_file() else None
            )
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ValueError(
            f"{folder}: meta.json or idf.npy is damaged ({type(e).__name__}: {e})"[:300]
        ) from None
    if corpus is None:
        ref = Path(meta["corpus"])
        corpus = ref if ref.is_absolute() else folder / ref
    return SearchIndex(index, encoder, load_corpus(corpus), meta["kind"], meta["params"])


def index_nbytes(index: faiss.Index) -> int:
    """Serialized size of an index in bytes (what it occupies in memory, up to small overheads)."""
    return int(faiss.serialize_index(index).nbytes)
