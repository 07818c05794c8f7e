"""A retrieval service speaking Search-R1's protocol, on asyncio with explicit limits.

``POST /retrieve`` ``{"queries": [str, ...], "topk": int (optional), "return_scores": bool
(optional, default false)}`` ->
``{"result": [[{"document": {"id", "contents"}, "score": s}, ...]]}`` with scores, or
``{"result": [[{"id", "contents"}, ...]]}`` without, where ``contents = '"Title"\\ntext'``
(Search-R1's ``retrieval_server.py`` returns its corpus rows, which have this shape), serialized
as ``json.dumps`` does. ``GET /health`` -> ``{"status": "ok", "passages": n}``.

Malformed requests get 4xx with ``{"detail": ...}`` (400 bad JSON or nesting too deep, 404 unknown
path, 405 method, 408 request not received in time, 411 no length, 413 too large, 422 wrong fields,
431 headers too large; 503 when over the connection, in-flight body or response budget; 500 with
one stderr line for an error of the service itself) and the server keeps serving. What one client
can cost is bounded (``ServerLimits``): connections, the time to send one request (headers and
body together, however slowly they trickle), body bytes (checked from ``Content-Length`` before
any is read, and in flight across all connections), JSON nesting, queries x topk per request,
response bytes, the time to read a response, and the response bytes built and not yet taken by
their clients across all connections (``_hold``, ``_send``). Searches run on one thread, a
request's queries in chunks of ``search_chunk``, so the searches of other clients interleave with
a large request's instead of waiting for all of it; the chunks that arrive together (within
``batch_window_s``, up to ``batch_queries`` queries) are searched in one call
(``rlvr.envs.searchqa.batcher``), each getting the hits it would get alone. Why a hand-written
asyncio server and not FastAPI + uvicorn, or h11: ``docs/reliability.md``. It binds to loopback
by default: it has no authentication.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import json
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from rlvr.envs.searchqa.batcher import SearchBatcher
from rlvr.envs.searchqa.httpio import ReadState, RequestError, read_request, response_head
from rlvr.envs.searchqa.limits import LIMITS, ServerLimits
from rlvr.envs.searchqa.protocol import (
    busy_error,
    decode_json,
    encode_queries,
    frame,
    too_large_error,
    validate_request,
)

_LIBC = ctypes.CDLL(None)

__all__ = [
    "LIMITS",
    "RequestError",
    "RetrievalServer",
    "ServerLimits",
    "make_server",
    "serve_in_thread",
]


#: A response goes out in slices of at most this size, each waiting for the client to take the
#: previous one: the transport never holds a second copy of a large response.
WRITE_CHUNK = 256 * 1024
#: Encoded bytes per search result assumed before the first response is built (a Wikipedia
#: passage with its score is ~700 bytes): sizes the first requests' admission to the budget.
PRIOR_RESULT_BYTES = 1024
#: Response bytes given back to the budget after which the heap is trimmed (``malloc_trim``).
TRIM_AFTER_BYTES = 32 * 1024 * 1024


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
        self.batcher = SearchBatcher(retriever, limits.batch_window_s, limits.batch_queries)
        self._cpu = ThreadPoolExecutor(2, thread_name_prefix="rlvr-json")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._done = threading.Event()
        self._tasks: set[asyncio.Task] = set()
        self._waiting: dict[asyncio.Task, float] = {}  # connection -> since when it waits to read
        self.evicted = 0
        self.connections = 0
        self.inflight_body_bytes = 0
        self.inflight_response_bytes = 0
        self._given_back = 0  # response bytes returned since the heap was last trimmed
        self._encoded = [0, 0]  # bytes and results encoded so far (``_result_bytes``)
        self._budget_lock = threading.Lock()

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
        self.batcher.close()
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

    def _release_body(self, state: ReadState) -> None:
        """Give the body budget back once the body is parsed (a request waiting for its search
        holds no body bytes), or when the exchange ends without a parse."""
        self.inflight_body_bytes -= state.reserved
        state.reserved = 0

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
        except (OSError, asyncio.TimeoutError, asyncio.CancelledError):
            pass  # the client went away or did not read its response in time
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
            status, body = await self._respond(request, state)
            close = not request.keep_alive
        except asyncio.TimeoutError:
            if not state.started:
                return False  # an idle kept-alive connection: close it quietly
            status, close = 408, True
            body = {"detail": f"request not received within {lim.request_timeout_s:g} s"}
        except RequestError as e:
            status, body, close = e.status, {"detail": e.detail}, True
        except ConnectionError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug costs this request a 500, not the server
            print(
                f"rlvr retrieval-serve: 500 on a request: {type(e).__name__}: {e}"[:300],
                file=sys.stderr,
            )
            status, body, close = 500, {"detail": f"internal error ({type(e).__name__})"}, True
        finally:
            self._waiting.pop(task, None)
            self._release_body(state)
        if isinstance(body, dict):  # an error or /health: what a result held is given back now
            self._give_back(state, state.held)
        try:
            await self._write(writer, status, body, close, state)
        finally:
            self._give_back(state, state.held)
        return not close

    def _give_back(self, state: ReadState, n: int) -> None:
        """Return ``n`` of the response bytes ``state`` holds to the budget (as they are sent, or
        all of them when the exchange ends). When the budget is whole again after large
        responses, freed heap pages go back to the OS once the current frames are gone: Python's
        allocator (glibc's, whose mmap threshold grows with every large block freed) would
        otherwise keep them, and a burst of slow readers would leave the service at its peak."""
        with self._budget_lock:
            n = min(n, state.held)
            state.held -= n
            self.inflight_response_bytes -= n
        self._given_back += n
        if self.inflight_response_bytes == 0 and self._given_back >= TRIM_AFTER_BYTES:
            self._given_back = 0
            asyncio.get_running_loop().call_soon(malloc_trim)

    async def _write(self, writer, status: int, body, close: bool, state=None) -> None:
        """Send a response (a dict, or the pieces of ``frame``) within ``write_timeout_s``, in
        slices of at most ``WRITE_CHUNK``; a client that does not take it in time (or leaves)
        has its connection aborted, which drops at once whatever the transport still holds."""
        parts = (
            collections.deque([json.dumps(body).encode("utf-8")])
            if isinstance(body, dict)
            else body
        )
        head = response_head(status, sum(len(p) for p in parts), close)

        def sent(n: int) -> None:  # bytes the transport has taken are no longer held here
            if state is not None:
                self._give_back(state, n)

        try:
            await asyncio.wait_for(_send(writer, head, parts, sent), self.limits.write_timeout_s)
        except (OSError, asyncio.TimeoutError):
            writer.transport.abort()
            raise

    def _result_bytes(self) -> float:
        """Mean encoded bytes per search result so far (``PRIOR_RESULT_BYTES`` before any)."""
        return self._encoded[0] / self._encoded[1] if self._encoded[1] else PRIOR_RESULT_BYTES

    def _searched(self, queries: list[str], topk: int, admit) -> asyncio.Future:
        """The hits of ``queries`` from the search thread (``SearchBatcher``). A request's first
        search first admits its whole response to the budget (``admit = (state, estimated
        bytes)``, at the size of the results sent so far): in turn on the search thread, once the
        responses searched before it have gone to their clients or not, so a burst of clients
        that never read costs no searches past the budget, and an admitted request is never cut
        off half built by others interleaved with it."""
        hold = None if admit is None else (lambda: self._hold(*admit))
        return asyncio.wrap_future(self.batcher.submit(queries, topk, hold))

    async def _search_within_deadline(self, queries: list[str], topk: int, admit):
        """``_searched``, waited for at most ``search_timeout_s`` (503 after; the job is
        cancelled if it has not started)."""
        limit = self.limits.search_timeout_s
        try:
            return await asyncio.wait_for(self._searched(queries, topk, admit), limit)
        except asyncio.TimeoutError:
            raise RequestError(
                503, f"search not finished within {limit:g} s (the service is overloaded)"
            ) from None

    def _hold(self, state: ReadState, n: int) -> None:
        """Take ``n`` bytes of the response budget for ``state``'s exchange, or answer 503."""
        with self._budget_lock:  # taken on the search thread, given back on the event loop
            if self.inflight_response_bytes + n > self.limits.max_inflight_response_bytes:
                raise busy_error()
            self.inflight_response_bytes += n
            state.held += n

    async def _respond(self, request, state: ReadState) -> tuple[int, collections.deque | dict]:
        path = request.path.split("?", 1)[0].rstrip("/")
        if request.method == "GET" and path == "/health":
            if not self.batcher.alive:  # every search would fail: say so, not "ok"
                detail = str(self.batcher.stopped_error())
                return 503, {"status": "error", "detail": detail}
            return 200, {"status": "ok", "passages": len(self.retriever)}
        if path == "/health":
            raise RequestError(405, "use GET /health")
        if path != "/retrieve":
            raise RequestError(404, f"unknown path {request.path[:200]}; POST /retrieve")
        if request.method != "POST":
            raise RequestError(405, "use POST /retrieve")
        loop = asyncio.get_running_loop()
        payload = await loop.run_in_executor(self._cpu, decode_json, request.body)
        request.body = b""  # the parsed payload is all that is needed from here on
        self._release_body(state)
        queries, topk, return_scores = validate_request(payload, self.default_topk, self.limits)
        parts: list[bytes] = []
        size, lim = 0, self.limits
        estimate = int(min(len(queries) * topk * self._result_bytes(), lim.max_response_bytes))
        for i in range(0, len(queries), lim.search_chunk):
            chunk = queries[i : i + lim.search_chunk]
            admit = (state, estimate) if i == 0 else None
            try:
                hits = await self._search_within_deadline(chunk, topk, admit)
            except RequestError:
                raise
            except Exception as e:  # noqa: BLE001 - keep serving: report the failure to this client
                return 500, {"detail": f"retrieval failed: {type(e).__name__}: {e}"}
            # Encoded chunk by chunk: a request holds bytes counted in the budget, never the
            # passages of all its hits at once.
            encoded = await loop.run_in_executor(self._cpu, encode_queries, hits, return_scores)
            n = sum(len(p) + 2 for p in encoded)
            self._encoded[0] += n
            self._encoded[1] += sum(len(h) for h in hits)
            del hits
            if size + n > lim.max_response_bytes:
                raise too_large_error(lim.max_response_bytes)
            size += n
            if size > state.held:  # larger than estimated: the rest must fit the budget too
                self._hold(state, size - state.held)
            parts += encoded
        self._give_back(state, state.held - size)  # what the estimate held beyond the response
        return 200, frame(parts)


async def _send(writer: asyncio.StreamWriter, head: bytes, parts: collections.deque, sent) -> None:
    """Write ``parts`` in order, each piece freed once it is sent, and all of them when the client
    fails or times out: the exception that ends the write (caught in a reference cycle with
    ``wait_for``'s frames) must not keep the response alive until the next garbage collection."""
    try:
        writer.write(head)
        while parts:
            view = memoryview(parts.popleft())
            for start in range(0, len(view), WRITE_CHUNK):
                piece = view[start : start + WRITE_CHUNK]
                writer.write(piece)
                await writer.drain()
                sent(len(piece))
    finally:
        parts.clear()


def malloc_trim() -> None:
    """glibc's ``malloc_trim(0)``: return every free heap page of every arena to the OS (a few
    ms for hundreds of MB); nothing where the C library has no such call."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


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
