"""A scripted OpenAI-compatible chat-completions server on loopback, for checking stacks that
call a model over HTTP (verifiers) without a model: ``reply(messages) -> str`` decides each
answer. Serves ``POST /v1/chat/completions`` (plain JSON, or server-sent events when
``stream`` is set) and ``GET /v1/models``; every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


class ScriptedChatServer:
    def __init__(self, reply: Callable[[list[dict]], str], model: str = "stub-model"):
        self.reply, self.model, self.requests = reply, model, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _json(self, code: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    models = [{"id": server.model, "object": "model"}]
                    self._json(200, {"object": "list", "data": models})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.requests.append(body)
                text = server.reply(body.get("messages", []))
                created, rid = int(time.time()), f"chatcmpl-{len(server.requests)}"
                usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                if not body.get("stream"):
                    self._json(
                        200,
                        {
                            "id": rid,
                            "object": "chat.completion",
                            "created": created,
                            "model": body.get("model", server.model),
                            "usage": usage,
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "logprobs": None,
                                    "message": {"role": "assistant", "content": text},
                                }
                            ],
                        },
                    )
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                base = {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": body.get("model", server.model),
                }
                delta = {"role": "assistant", "content": text}
                chunks = [
                    {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {**base, "choices": [], "usage": usage},
                ]
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "ScriptedChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
