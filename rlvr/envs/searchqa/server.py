"""A retrieval service speaking Search-R1's protocol, on the standard library's HTTP server.

``POST /retrieve`` ``{"queries": [str, ...], "topk": int (optional), "return_scores": bool
(optional, default false)}`` -> ``{"result": [[{"document": {"id", "contents"}, "score": s}, ...]]}``
with scores, or ``{"result": [[{"id", "contents"}, ...]]}`` without, where
``contents = '"Title"\\ntext'`` (Search-R1's ``retrieval_server.py`` returns its corpus rows, which
have this shape). ``GET /health`` -> ``{"status": "ok", "passages": n}``.

Malformed requests get 4xx with ``{"detail": ...}`` (400 bad JSON, 404 unknown path, 411 no length,
413 too large, 422 wrong fields, the status FastAPI/pydantic gives in Search-R1's server) and the
server keeps serving. It binds to loopback by default: it has no authentication.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rlvr.envs.searchqa.client import MAX_QUERY_CHARS

MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_QUERIES = 4096
MAX_TOPK = 1000


class RequestError(ValueError):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def validate_request(payload) -> tuple[list[str], int | None, bool]:
    """``(queries, topk, return_scores)`` from a decoded request body, or ``RequestError(422)``."""
    if not isinstance(payload, dict):
        raise RequestError(422, "request body must be a JSON object")
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError(422, "'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES:
        raise RequestError(413, f"at most {MAX_QUERIES} queries per request, got {len(queries)}")
    topk = payload.get("topk")
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK):
        raise RequestError(422, f"'topk' must be an integer in [1, {MAX_TOPK}]")
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(422, "'return_scores' must be true or false")
    return [q[:MAX_QUERY_CHARS] for q in queries], topk, return_scores


def format_result(hits_per_query, return_scores: bool) -> dict:
    result = []
    for hits in hits_per_query:
        docs = [{"id": h.passage.id, "contents": h.passage.contents} for h in hits]
        result.append([{"document": d, "score": h.score} for d, h in zip(docs, hits)] if return_scores else docs)
    return {"result": result}


def make_handler(retriever, default_topk: int, lock: threading.Lock):
    class RetrievalHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # quiet by default; errors still reach the client
            pass

        def do_GET(self):
            if self.path.rstrip("/") == "/health":
                self._send(200, {"status": "ok", "passages": len(retriever)})
            else:
                self._send(404, {"detail": f"unknown path {self.path}; POST /retrieve"})

        def do_POST(self):
            try:
                if self.path.rstrip("/") != "/retrieve":
                    raise RequestError(404, f"unknown path {self.path}; POST /retrieve")
                length = self.headers.get("Content-Length")
                if length is None:
                    raise RequestError(411, "Content-Length required")
                if not length.isdigit() or int(length) > MAX_BODY_BYTES:
                    raise RequestError(413, f"request body larger than {MAX_BODY_BYTES} bytes")
                raw = self.rfile.read(int(length))
                try:
                    payload = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    raise RequestError(400, f"request body is not valid UTF-8 JSON: {e}") from None
                queries, topk, return_scores = validate_request(payload)
            except RequestError as e:
                self.close_connection = True
                self._send(e.status, {"detail": e.detail})
                return
            try:
                with lock:
                    hits = retriever.search(queries, topk or default_topk) if queries else []
                self._send(200, format_result(hits, return_scores))
            except Exception as e:  # keep serving: report the failure to this client only
                self._send(500, {"detail": f"retrieval failed: {type(e).__name__}: {e}"})

    return RetrievalHandler


def make_server(retriever, host: str = "127.0.0.1", port: int = 8000, default_topk: int = 3) -> ThreadingHTTPServer:
    """A threading HTTP server over ``retriever`` (anything with ``search(queries, k)`` and ``len``);
    ``port=0`` picks a free port (``server.server_address[1]``)."""
    server = ThreadingHTTPServer((host, port), make_handler(retriever, int(default_topk), threading.Lock()))
    server.daemon_threads = True
    return server


def serve_in_thread(retriever, host: str = "127.0.0.1", port: int = 0, default_topk: int = 3):
    """Start a server in a daemon thread; returns ``(server, url)``. Stop with ``server.shutdown()``."""
    server = make_server(retriever, host, port, default_topk)
    threading.Thread(target=server.serve_forever, name="rlvr-retrieval", daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}/retrieve"
