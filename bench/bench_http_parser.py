"""The retrieval service's request parser (``rlvr.envs.searchqa.httpio``) next to h11's.

    pip install h11 && python bench/bench_http_parser.py [--n 20000]

Prints, side by side: the time to parse one Search-R1 request (256 queries, 6.6 KB of JSON) and
one ``/health`` GET, and each parser's verdict on crafted requests (digits that ``str.isdigit``
takes, lengths past ``int``'s limit, conflicting lengths, bad header names, control characters,
a chunked body, a body larger than the service allows). h11 is sans-IO: it has no deadlines, no
size limit on bodies and no budgets, so those rows say what the service must do itself either way.
Needs h11 (not a dependency of rlvr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from rlvr.envs.searchqa.httpio import ReadState, RequestError, read_request
from rlvr.envs.searchqa.server import LIMITS

MAX_BODY = LIMITS.max_body_bytes


async def _ours(data: bytes) -> str:
    reader = asyncio.StreamReader(limit=LIMITS.max_header_bytes)
    reader.feed_data(data)
    reader.feed_eof()
    try:
        request = await read_request(reader, _Sink(), ReadState(), MAX_BODY, lambda n: True)
    except RequestError as e:
        return f"{e.status}"
    return "ok" if request is not None else "eof"


def ours(data: bytes) -> str:
    return asyncio.run(_ours(data))


class _Sink:
    def write(self, _):
        pass


def h11_parse(data: bytes) -> str:
    import h11

    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=LIMITS.max_header_bytes)
    conn.receive_data(data)
    conn.receive_data(b"")
    body = 0
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Data):
                body += len(event.data)
            if (
                isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed))
                or event is h11.NEED_DATA
            ):
                return "ok" if body <= MAX_BODY else f"ok ({body} body bytes: no limit)"
    except h11.RemoteProtocolError as e:
        return f"{e.error_status_hint}"


def post(body: bytes, length: bytes | None = None, extra: bytes = b"") -> bytes:
    n = str(len(body)).encode() if length is None else length
    return (
        b"POST /retrieve HTTP/1.1\r\nHost: x\r\n"
        + extra
        + b"Content-Length: "
        + n
        + b"\r\n\r\n"
        + body
    )


CRAFTED = {
    "Content-Length: \\xb2 (superscript two)": post(b"ab", b"\xb2"),
    "Content-Length: Arabic-Indic 2": post(b"ab", "\u0662".encode()),
    "Content-Length: 5,000 digits": post(b"", b"9" * 5000),
    "two different Content-Lengths": post(b"ab", b"2", b"Content-Length: 3\r\n"),
    "header name with a space": post(b"ab", extra=b"Bad Name: 1\r\n"),
    "NUL in a header value": post(b"ab", extra=b"X: a\x00b\r\n"),
    "obsolete line folding": post(b"ab", extra=b"X: a\r\n b\r\n"),
    "a TLS client hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    "chunked body": b"POST /retrieve HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"2\r\nab\r\n0\r\n\r\n",
    "5 MB body (over the 4 MiB limit)": post(b" " * 5_000_000),
}


def per_request_us(parse, data: bytes, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        parse(data)
    return (time.perf_counter() - t0) / n * 1e6


def ours_per_request_us(data: bytes, n: int) -> float:
    """Inside one running event loop, as the service parses."""

    async def many():
        t0 = time.perf_counter()
        for _ in range(n):
            await _ours(data)
        return (time.perf_counter() - t0) / n * 1e6

    return asyncio.run(many())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="parses per timing")
    args = ap.parse_args()
    try:
        import h11
    except ImportError:
        print("bench_http_parser: needs h11 (pip install h11)", file=sys.stderr)
        return 2
    query = json.dumps({"queries": [f"who founded trust {i}?" for i in range(256)], "topk": 3})
    typical = post(query.encode())
    health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    print(f"h11 {h11.__version__}; Python {sys.version.split()[0]}")
    print(f"{'':44} {'rlvr httpio':>14} {'h11':>14}")
    for label, data in ((f"POST, {len(query)} B of JSON", typical), ("GET /health", health)):
        a, b = ours_per_request_us(data, args.n), per_request_us(h11_parse, data, args.n)
        print(f"{label + ' (us per request)':44} {a:14.1f} {b:14.1f}")
    print("verdicts (status answered, or ok):")
    for label, data in CRAFTED.items():
        print(f"  {label:42} {ours(data):>14} {h11_parse(data):>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
