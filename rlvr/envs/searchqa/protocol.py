"""Search-R1's retrieval protocol as the service speaks it (``rlvr.envs.searchqa.server``): the
limits on what one client can cost (``ServerLimits``), request validation, and the response bytes,
built the way the service sends them.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field, fields

from rlvr.envs.searchqa.client import MAX_QUERY_CHARS
from rlvr.envs.searchqa.httpio import RequestError

#: Limits that may be 0 (the rest must be > 0).
ZERO_ALLOWED = frozenset({"batch_window_s"})


def _limit(default, help_: str):
    return field(default=default, metadata={"help": help_})


@dataclass(frozen=True)
class ServerLimits:
    """What one client may cost the service. The defaults fit Search-R1's use (a batch of a few
    hundred queries at top-3 per call) with wide margins. Each field's ``help`` is its
    ``rlvr retrieval-serve --help`` line (``--max-connections`` ...)."""

    max_connections: int = _limit(
        256,
        "open connections; at the cap a new one closes the connection that has waited longest "
        "for its request (idle or trickling), or gets 503 when every one is being served",
    )
    request_timeout_s: float = _limit(
        10.0,
        "seconds to receive one whole request however it trickles (408 after), and the most a "
        "kept-alive connection may idle",
    )
    write_timeout_s: float = _limit(30.0, "seconds a client may take to read its response")
    max_header_bytes: int = _limit(16 * 1024, "request line and headers (431 beyond)")
    max_body_bytes: int = _limit(
        4 * 1024 * 1024, "one request body, refused from Content-Length unread (413)"
    )
    max_inflight_body_bytes: int = _limit(
        64 * 1024 * 1024, "body bytes being received or parsed across all connections (503)"
    )
    max_queries: int = _limit(4096, "queries per request (413)")
    max_topk: int = _limit(1000, "topk of a request (422 beyond)")
    max_results: int = _limit(
        16384, "queries x topk of one request: its search work and response size (413)"
    )
    max_response_bytes: int = _limit(32 * 1024 * 1024, "one response (413, checked as it is built)")
    max_inflight_response_bytes: int = _limit(
        96 * 1024 * 1024,
        "response bytes built and not yet taken by their clients, across all connections: the "
        "memory clients that ask and never read can pin (503 beyond; at least one response)",
    )
    search_chunk: int = _limit(
        64, "queries per search chunk: other requests' searches run between a large one's chunks"
    )
    batch_queries: int = _limit(
        256,
        "queries per search call, gathered from the chunks of requests that arrive together "
        "(1: each chunk searched alone, the service before batching)",
    )
    batch_window_s: float = _limit(
        0.002,
        "seconds the search thread waits for more requests after the first (0: it takes only "
        "those already waiting)",
    )

    def __post_init__(self):
        for f in fields(self):  # NaN fails 0 < value, as infinity fails value < inf
            value, whole = getattr(self, f.name), type(f.default) is int
            low_ok = f.name in ZERO_ALLOWED and value == 0
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (0 < value < float("inf") or low_ok)
                or (whole and value != int(value))
            ):
                kind = "a whole number" if whole else "a finite number"
                bound = ">= 0" if f.name in ZERO_ALLOWED else "> 0"
                raise ValueError(f"{f.name} must be {kind} {bound}, got {value!r}")
        if self.max_inflight_response_bytes < self.max_response_bytes:
            raise ValueError(
                f"max_inflight_response_bytes ({self.max_inflight_response_bytes}) must hold at "
                f"least one whole response (max_response_bytes = {self.max_response_bytes})"
            )


LIMITS = ServerLimits()
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
