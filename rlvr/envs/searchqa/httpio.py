"""The little HTTP/1.1 the retrieval service needs, on asyncio streams, with every limit explicit.

``read_request`` reads one request (request line, headers, a ``Content-Length`` body) and raises
``RequestError`` with the HTTP status to answer when a limit is crossed. It never waits on its own:
the caller bounds the whole read with one deadline (``asyncio.wait_for``), so a client that sends
slowly, or promises a body and never sends it, is cut off after that deadline however it trickles
its bytes. Chunked bodies are refused (411): the clients of this protocol (Search-R1's
``requests.post(json=...)``, ``urllib``) always send a length.

The grammar is RFC 9112's, strictly and in ASCII only: a header name is a token, a value holds no
control characters, ``Content-Length`` is ASCII digits (``str.isdigit`` would also take ``"\xb2"``
or Arabic-Indic digits), and two different lengths are refused; anything else is a 400, never
another exception (``tests/test_searchqa_http.py`` feeds it arbitrary bytes).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

#: RFC 9110 section 5.6.2 ``token`` (header names, methods) and a field value without control
#: characters other than horizontal tab.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_DIGITS = re.compile(r"[0-9]+")

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
    request) and what the exchange holds of the server's budgets: body bytes while the request
    is read and parsed (``reserved``), response bytes until they are sent (``held``)."""

    started: bool = False
    reserved: int = 0
    held: int = 0


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
        # The first byte on its own: from here on the client has started a request, and a
        # deadline that passes is a 408 however the rest trickles, not a quiet idle close.
        first = await reader.readexactly(1)
        state.started = True
        head = first + await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        if not state.started:
            return None
        raise RequestError(400, "connection closed in the middle of the request headers") from None
    except asyncio.LimitOverrunError:
        raise RequestError(431, "request line and headers too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise RequestError(400, "malformed request line")
    method, path, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise RequestError(400, f"unsupported protocol version {version[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep or not _TOKEN.fullmatch(name) or not _FIELD_VALUE.fullmatch(value):
                raise RequestError(400, "malformed header line")
            name, value = name.lower(), value.strip(" \t")
            if name == "content-length" and headers.get(name, value) != value:
                raise RequestError(400, "conflicting Content-Length headers")
            headers[name] = value
    request = Request(method, path, version, headers)
    if method != "POST":
        return request
    if "transfer-encoding" in headers:
        raise RequestError(411, "chunked bodies are not accepted: send Content-Length")
    length = headers.get("content-length")
    if length is None:
        raise RequestError(411, "Content-Length required")
    if not _DIGITS.fullmatch(length):
        raise RequestError(400, "Content-Length is not a number")
    # Compared by digit count first: int() of more than 4,300 digits raises.
    if len(length.lstrip("0")) > len(str(max_body_bytes)) or int(length) > max_body_bytes:
        raise RequestError(413, f"request body larger than {max_body_bytes} bytes")
    size = int(length)
    if not reserve(size):
        raise RequestError(503, "too many request bodies in flight; retry shortly")
    state.reserved = size
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        request.body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise RequestError(400, "connection closed before the whole body arrived") from None
    return request


def response_head(status: int, length: int, close: bool) -> bytes:
    """Status line and headers of a JSON response of ``length`` bytes."""
    return (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {length}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    ).encode("latin-1")
