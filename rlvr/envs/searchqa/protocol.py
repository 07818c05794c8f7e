"""Search-R1's retrieval protocol as the service speaks it (``rlvr.envs.searchqa.server``):
request validation against the limits on what one client can cost (``ServerLimits``, in
``rlvr.envs.searchqa.limits``), and the response bytes, built the way the service sends them.
"""

from __future__ import annotations

import collections
import json

from rlvr.envs.searchqa.client import MAX_QUERY_CHARS
from rlvr.envs.searchqa.httpio import RequestError
from rlvr.envs.searchqa.limits import LIMITS, ServerLimits

MAX_BODY_BYTES, MAX_QUERIES, MAX_TOPK = LIMITS.max_body_bytes, LIMITS.max_queries, LIMITS.max_topk


def validate_request(
    payload, default_topk: int = 3, limits: ServerLimits = LIMITS
) -> tuple[list[str], int, bool]:
    """``(queries, topk, return_scores)`` from a decoded request body, or ``RequestError``
    (422 wrong fields, 413 more work than ``limits`` allow)."""
    if not isinstance(payload, dict):
        raise RequestError(422, "request body must be a JSON object")
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError(422, "'queries' must be a list of strings")
    if len(queries) > limits.max_queries:
        raise RequestError(
            413, f"at most {limits.max_queries} queries per request, got {len(queries)}"
        )
    topk = payload.get("topk")
    if topk is not None and (
        isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= limits.max_topk
    ):
        raise RequestError(422, f"'topk' must be an integer in [1, {limits.max_topk}]")
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(422, "'return_scores' must be true or false")
    topk = topk or default_topk
    if len(queries) * topk > limits.max_results:
        raise RequestError(
            413,
            f"queries x topk = {len(queries)} x {topk} exceeds "
            f"{limits.max_results} results per request; split the request",
        )
    return [q[:MAX_QUERY_CHARS] for q in queries], topk, return_scores


def format_result(hits_per_query, return_scores: bool) -> dict:
    result = []
    for hits in hits_per_query:
        docs = [{"id": h.passage.id, "contents": h.passage.contents} for h in hits]
        result.append(
            [{"document": d, "score": h.score} for d, h in zip(docs, hits)]
            if return_scores
            else docs
        )
    return {"result": result}


def encode_queries(hits_per_query, return_scores: bool) -> list[bytes]:
    """Each query's result list, as ``json.dumps`` writes it inside the response."""
    return [
        json.dumps(format_result([hits], return_scores)["result"][0]).encode("utf-8")
        for hits in hits_per_query
    ]


def frame(parts: list[bytes]) -> collections.deque:
    """The response body around the per-query ``parts``, as pieces to send in order (never
    joined: a large response is not copied, and each piece is freed once it is sent)."""
    out = collections.deque([b'{"result": ['])
    for i, part in enumerate(parts):
        out.extend((b", ", part) if i else (part,))
    out.append(b"]}")
    return out


def busy_error() -> RequestError:
    return RequestError(503, "too many response bytes waiting for their clients; retry shortly")


def too_large_error(max_bytes: int) -> RequestError:
    return RequestError(
        413, f"response would exceed {max_bytes} bytes; ask for fewer queries or a smaller topk"
    )


def encode_result(hits_per_query, return_scores: bool, max_bytes: int) -> bytes:
    """``json.dumps(format_result(...))`` as bytes (413 past ``max_bytes``): the bytes the
    service sends, built the way it builds them."""
    parts = encode_queries(hits_per_query, return_scores)
    if sum(len(p) + 2 for p in parts) > max_bytes:
        raise too_large_error(max_bytes)
    return b"".join(frame(parts))


def decode_json(raw: bytes):
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as e:  # bad UTF-8, bad JSON, an integer past Python's int-string limit
        raise RequestError(400, f"request body is not valid UTF-8 JSON: {str(e)[:200]}") from None
    except RecursionError:
        raise RequestError(400, "request body is nested too deeply") from None
