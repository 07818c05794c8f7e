"""What one client may cost the retrieval service (``ServerLimits``), each limit a flag of
``rlvr retrieval-serve`` with its default in ``--help``.

Every limit is checked when the service starts: NaN, infinities, zero (except the batch window)
and negatives are refused, every limit in seconds is at most a day (``MAX_SECONDS``) and the
batch window at most a second (``MAX_BATCH_WINDOW_S``): a window of ``1e10`` s once passed here
and killed the search thread with an OverflowError at its first request (issue 51).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

#: Limits that may be 0 (the rest must be > 0).
ZERO_ALLOWED = frozenset({"batch_window_s"})
#: The most any limit in seconds may be (a day): every wait stays a finite one that the clock
#: and the queues can take (``SimpleQueue.get`` raised OverflowError past ~9e9 s).
MAX_SECONDS = 86400.0
#: The longest batch window: past a second it only delays every search that long.
MAX_BATCH_WINDOW_S = 1.0


def _limit(default, help_: str, most: float | None = None):
    return field(default=default, metadata={"help": help_, "most": most})


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
        f"those already waiting; at most {MAX_BATCH_WINDOW_S:g})",
        most=MAX_BATCH_WINDOW_S,
    )
    search_timeout_s: float = _limit(
        300.0,
        "seconds a request waits for its searches, queue included (503 after: the search "
        "thread is stuck or far behind)",
    )

    def __post_init__(self):
        for f in fields(self):  # NaN fails 0 < value, as infinity fails value <= most
            value, whole = getattr(self, f.name), type(f.default) is int
            most = f.metadata["most"] or (MAX_SECONDS if f.name.endswith("_s") else float("inf"))
            low_ok = f.name in ZERO_ALLOWED and value == 0
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (0 < value < float("inf") or low_ok)
                or not value <= most
                or (whole and value != int(value))
            ):
                kind = "a whole number" if whole else "a finite number"
                bound = ">= 0" if f.name in ZERO_ALLOWED else "> 0"
                upper = f" and <= {most:g}" if most < float("inf") else ""
                raise ValueError(f"{f.name} must be {kind} {bound}{upper}, got {value!r}")
        if self.max_inflight_response_bytes < self.max_response_bytes:
            raise ValueError(
                f"max_inflight_response_bytes ({self.max_inflight_response_bytes}) must hold at "
                f"least one whole response (max_response_bytes = {self.max_response_bytes})"
            )


LIMITS = ServerLimits()


__all__ = ["LIMITS", "MAX_BATCH_WINDOW_S", "MAX_SECONDS", "ServerLimits"]
