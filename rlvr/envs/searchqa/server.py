"""A retrieval service speaking Search-R1's protocol, on asyncio with explicit limits.

``POST /retrieve`` ``{"queries": [str, ...], "topk": int (optional), "return_scores": bool
(optional, default false)}`` ->
``{"result": [[{"document": {"id", "contents"}, "score": s}, ...]]}`` with scores, or
``{"result": [[{"id", "contents"}, ...]]}`` without, where ``contents = '"Title"\\ntext'``
(Search-R1's ``retrieval_server.py`` returns its corpus rows, which have this shape), serialized
as ``json.dumps`` does. ``GET /health`` -> ``{"status": "ok", "passages": n}``.

Malformed requests get 4xx with ``{"detail": ...}`` (400 bad JSON or nesting too deep, 404 unknown
path, 405 method, 408 request not received in time, 411 no length, 413 too large, 422 wrong fields,
431 headers too large; 503 when over the connection or in-flight body budget) and the server keeps
serving. What one client can cost is bounded (``ServerLimits``): connections, the time to send one
request (headers and body together, however slowly they trickle), body bytes (checked from
``Content-Length`` before any is read, and in flight across all connections), JSON nesting,
queries x topk per request, and response bytes. Searches run on one thread, a request's queries
in chunks of ``search_chunk``, so the searches of other clients interleave with a large request's
instead of waiting for all of it. Why a hand-written asyncio server and not FastAPI + uvicorn:
``docs/reliability.md``. It binds to loopback by default: it has no authentication.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rlvr.envs.searchqa.client import MAX_QUERY_CHARS
from rlvr.envs.searchqa.httpio import ReadState, RequestError, read_request, response_bytes

__all__ = ["RequestError", "RetrievalServer", "ServerLimits", "make_server", "serve_in_thread"]


@dataclass(frozen=True)
class ServerLimits:
    """What one client may cost the service. The defaults fit Search-R1's use (a batch of a few
    hundred queries at top-3 per call) with wide margins."""

    #: Open connections. At the cap a new connection closes the one that has waited longest for
    #: its request (idle or trickling); when every connection is being served it gets 503.
    max_connections: int = 256
    #: Seconds to receive one whole request, and the most a kept-alive connection may idle.
    request_timeout_s: float = 10.0
    #: Seconds a client may take to read its response.
    write_timeout_s: float = 30.0
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 4 * 1024 * 1024
    #: Body bytes being received or parsed across all connections (a memory bound).
    max_inflight_body_bytes: int = 64 * 1024 * 1024
    max_queries: int = 4096
    max_topk: int = 1000
    #: Queries x topk of one request: the search work and response size it may ask for.
    max_results: int = 16384
    max_response_bytes: int = 32 * 1024 * 1024
    #: Queries per search call: other requests' searches run between a large request's chunks.
    search_chunk: int = 64


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


def encode_result(hits_per_query, return_scores: bool, max_bytes: int) -> bytes:
    """``json.dumps(format_result(...))`` as bytes, built query by query so that a response past
    ``max_bytes`` is refused (413) before it is held in memory whole."""
    parts, size = [], 0
    for hits in hits_per_query:
        part = json.dumps(format_result([hits], return_scores)["result"][0]).encode("utf-8")
        size += len(part) + 2
        if size > max_bytes:
            raise RequestError(
                413,
                f"response would exceed {max_bytes} bytes; ask for fewer queries or a smaller topk",
            )
        parts.append(part)
    return b'{"result": [' + b", ".join(parts) + b"]}"


class RetrievalServer:
    """The service over ``retriever`` (anything with ``search(queries, k)`` and ``len``).

    The socket is bound and listening when the constructor returns (``server_address``);
    ``serve_forever`` runs the event loop in the calling thread until ``shutdown``.
    """

    def __init__(
        self,
        retriever,
        host: str = "127.0.0.1",
        port: int = 8000,
        default_topk: int = 3,
        limits: ServerLimits = LIMITS,
    ):
        self.retriever, self.default_topk, self.limits = retriever, int(default_topk), limits
        self._sock = socket.create_server(
            (host, port), backlog=min(1024, 4 * limits.max_connections)
        )
        self.server_address = self._sock.getsockname()
        self._search = ThreadPoolExecutor(1, thread_name_prefix="rlvr-search")
        self._cpu = ThreadPoolExecutor(2, thread_name_prefix="rlvr-json")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._done = threading.Event()
        self._tasks: set[asyncio.Task] = set()
        self._waiting: dict[asyncio.Task, float] = {}  # connection -> since when it waits to read
        self.evicted = 0
        self.connections = 0
        self.inflight_body_bytes = 0

    # -- life cycle -----------------------------------------------------------------------------
    def serve_forever(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self._done.set()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop ``serve_forever`` (from another thread) and wait for it."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not self._done.is_set():
            loop.call_soon_threadsafe(stop.set)
            self._done.wait(timeout)

    def server_close(self) -> None:
        self._sock.close()
        self._search.shutdown(wait=False, cancel_futures=True)
        self._cpu.shutdown(wait=False, cancel_futures=True)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(
            self._handle, sock=self._sock, limit=self.limits.max_header_bytes
        )
        await self._stop.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- one connection -------------------------------------------------------------------------
    def _reserve(self, n: int) -> bool:
        if self.inflight_body_bytes + n > self.limits.max_inflight_body_bytes:
            return False
        self.inflight_body_bytes += n
        return True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self.connections += 1
        try:
            if self.connections > self.limits.max_connections and not self._evict():
                await self._write(
                    writer, 503, {"detail": "too many connections; retry shortly"}, close=True
                )
                return
            while await self._one_request(reader, writer, task):
                pass
        except (ConnectionError, asyncio.TimeoutError, asyncio.CancelledError):
            pass
        finally:
            self.connections -= 1
            self._tasks.discard(task)
            self._waiting.pop(task, None)
            writer.close()

    def _evict(self) -> bool:
        """Close the connection that has waited longest for its request; False if none waits."""
        if not self._waiting:
            return False
        oldest = min(self._waiting, key=self._waiting.__getitem__)
        del self._waiting[oldest]
        oldest.cancel()
        self.evicted += 1
        return True

    async def _one_request(self, reader, writer, task) -> bool:
        """Answer one request; False when the connection is to be closed."""
        state, lim = ReadState(), self.limits
        self._waiting[task] = asyncio.get_running_loop().time()
        try:
            request = await asyncio.wait_for(
                read_request(reader, writer, state, lim.max_body_bytes, self._reserve),
                lim.request_timeout_s,
            )
            self._waiting.pop(task, None)
            if request is None:
                return False
            status, body = await self._respond(request)
            close = not request.keep_alive
        except asyncio.TimeoutError:
            if not state.started:
                return False  # an idle kept-alive connection: close it quietly
            status, close = 408, True
            body = {"detail": f"request not received within {lim.request_timeout_s:g} s"}
        except RequestError as e:
            status, body, close = e.status, {"detail": e.detail}, True
        finally:
            self._waiting.pop(task, None)
            self.inflight_body_bytes -= state.reserved
            state.reserved = 0
        await self._write(writer, status, body, close)
        return not close

    async def _write(self, writer, status: int, body, close: bool) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        writer.write(response_bytes(status, data, close))
        await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)

    async def _respond(self, request) -> tuple[int, bytes | dict]:
        path = request.path.split("?", 1)[0].rstrip("/")
        if request.method == "GET" and path == "/health":
            return 200, {"status": "ok", "passages": len(self.retriever)}
        if path == "/health":
            raise RequestError(405, "use GET /health")
        if path != "/retrieve":
            raise RequestError(404, f"unknown path {request.path[:200]}; POST /retrieve")
        if request.method != "POST":
            raise RequestError(405, "use POST /retrieve")
        loop = asyncio.get_running_loop()
        payload = await loop.run_in_executor(self._cpu, _decode_json, request.body)
        request.body = b""  # the parsed payload is all that is needed from here on
        queries, topk, return_scores = validate_request(payload, self.default_topk, self.limits)
        hits: list = []
        try:
            for i in range(0, len(queries), self.limits.search_chunk):
                chunk = queries[i : i + self.limits.search_chunk]
                hits += await loop.run_in_executor(self._search, self.retriever.search, chunk, topk)
        except Exception as e:  # noqa: BLE001 - keep serving: report the failure to this client
            return 500, {"detail": f"retrieval failed: {type(e).__name__}: {e}"}
        data = await loop.run_in_executor(
            self._cpu, encode_result, hits, return_scores, self.limits.max_response_bytes
        )
        return 200, data


def _decode_json(raw: bytes):
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(400, f"request body is not valid UTF-8 JSON: {e}") from None
    except RecursionError:
        raise RequestError(400, "request body is nested too deeply") from None


def make_server(
    retriever,
    host: str = "127.0.0.1",
    port: int = 8000,
    default_topk: int = 3,
    limits: ServerLimits = LIMITS,
) -> RetrievalServer:
    """The service over ``retriever``; ``port=0`` picks a free port
    (``server.server_address[1]``)."""
    return RetrievalServer(retriever, host, port, default_topk, limits)


def serve_in_thread(
    retriever,
    host: str = "127.0.0.1",
    port: int = 0,
    default_topk: int = 3,
    limits: ServerLimits = LIMITS,
):
    """Start a server in a daemon thread; returns ``(server, url)``. Stop with ``server.shutdown()``
    then ``server.server_close()``."""
    server = make_server(retriever, host, port, default_topk, limits)
    threading.Thread(target=server.serve_forever, name="rlvr-retrieval", daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}/retrieve"
