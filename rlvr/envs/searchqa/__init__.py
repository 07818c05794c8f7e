"""Retrieval tool-use QA (Search-R1 / verl-tool "VT-Search"): reward, encoders, FAISS indexes,
a Search-R1-protocol retrieval service and client, data loaders, a synthetic knowledge task and
the ``rlvr/SearchQA-v0`` environment. See ``docs/envs_searchqa.md``."""

from rlvr.envs.searchqa.client import RemoteRetriever, RetrievalError
from rlvr.envs.searchqa.corpus import Corpus, JsonlCorpus, Passage, load_corpus, write_corpus
from rlvr.envs.searchqa.data import QAItem, load_qa
from rlvr.envs.searchqa.encoders import HashedTfidfEncoder, SentenceTransformerEncoder, get_encoder
from rlvr.envs.searchqa.env import SearchQAEnv, parse_action
from rlvr.envs.searchqa.index import Hit, SearchIndex, build_faiss, build_index, load_index
from rlvr.envs.searchqa.normalize import exact_match, max_f1, normalize_answer, token_f1
from rlvr.envs.searchqa.reward import compute_score, extract_answer, score
from rlvr.envs.searchqa.server import make_server, serve_in_thread
from rlvr.envs.searchqa.synthetic import make_world, synthetic_passages, synthetic_task

__all__ = [
    "Corpus",
    "HashedTfidfEncoder",
    "Hit",
    "JsonlCorpus",
    "Passage",
    "QAItem",
    "RemoteRetriever",
    "RetrievalError",
    "SearchIndex",
    "SearchQAEnv",
    "SentenceTransformerEncoder",
    "build_faiss",
    "build_index",
    "compute_score",
    "exact_match",
    "extract_answer",
    "get_encoder",
    "load_corpus",
    "load_index",
    "load_qa",
    "make_server",
    "make_world",
    "max_f1",
    "normalize_answer",
    "parse_action",
    "score",
    "serve_in_thread",
    "synthetic_passages",
    "synthetic_task",
    "token_f1",
    "write_corpus",
]
