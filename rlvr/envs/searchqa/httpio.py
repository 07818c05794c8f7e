"""The little HTTP/1.1 the retrieval service needs, on asyncio streams, with every limit explicit.

``read_request`` reads one request (request line, headers, a ``Content-Length`` body) and raises
``RequestError`` with the HTTP status to answer when a limit is crossed. It never waits on its own:
the caller bounds the whole read with one deadline (``asyncio.wait_for``), so a client that sends
slowly, or promises a body and never sends it, is cut off after that deadline however it trickles
its bytes. Chunked bodies are refused (411): the clients of this protocol (Search-R1's
``requests.post(json=...)``, ``urllib``) always send a length.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

REASONS = {
    200: "OK",
    100: "Continue",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    422: "Unprocessable Content",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class RequestError(ValueError):
    """A request answered with ``status`` and ``{"detail": detail}``."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        return conn != "close" if self.version == "HTTP/1.1" else conn == "keep-alive"


@dataclass
class ReadState:
    """What the current read has seen (so a timeout can tell an idle connection from a slow
    request) and the body bytes it has reserved from the server's budget."""

    started: bool = False
    reserved: int = 0


async def read_request(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    state: ReadState,
    max_body_bytes: int,
    reserve,
) -> Request | None:
    """One request from ``reader``; None on a clean EOF before any byte.

    ``reserve(n) -> bool`` asks the server for ``n`` bytes of its in-flight body budget before the
    body is read (False: answer 503). The header block is bounded by the reader's ``limit``.
    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise RequestError(400, "connection closed in the middle of the request headers") from None
    except asyncio.LimitOverrunError:
        raise RequestError(431, "request line and headers too large") from None
    state.started = True
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = lines[0].split(" ")
    except ValueError:
        raise RequestError(400, "malformed request line") from None
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise RequestError(400, f"unsupported protocol version {version[:20]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise RequestError(400, "malformed header line")
            headers[name.strip().lower()] = value.strip()
    request = Request(method, path, version, headers)
    if method != "POST":
        return request
    if "transfer-encoding" in headers:
        raise RequestError(411, "chunked bodies are not accepted: send Content-Length")
    length = headers.get("content-length")
    if length is None:
        raise RequestError(411, "Content-Length required")
    if not length.isdigit():
        raise RequestError(400, "Content-Length is not a number")
    if int(length) > max_body_bytes:
        raise RequestError(413, f"request body larger than {max_body_bytes} bytes")
    if not reserve(int(length)):
        raise RequestError(503, "too many request bodies in flight; retry shortly")
    state.reserved = int(length)
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        request.body = await reader.readexactly(int(length))
    except asyncio.IncompleteReadError:
        raise RequestError(400, "connection closed before the whole body arrived") from None
    return request


def response_bytes(status: int, body: bytes, close: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode("latin-1") + body
