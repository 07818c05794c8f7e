"""What the retrieval service withstands: ``rlvr retrieval-serve`` against hostile clients.

    python bench/bench_service.py [--idle 601] [--bodies 12] [--slow 120] [--slow-long 20]

Builds the synthetic corpus's lexical flat index in a temporary folder, starts
``rlvr retrieval-serve`` on a free loopback port in a subprocess and measures: a normal client's
latency alone; a request over the work bound (4,096 queries x topk 1,000) and an allowed large one
(4,096 x 4, with a normal client's latency while it runs); ``--idle`` idle connections (server
threads and RSS, a normal client's latency meanwhile, and whether they are closed after the 10 s
request deadline); ``--bodies`` clients announcing 30 MB bodies (RSS after); a body of 100,000
``[``; a body promised and never sent; ``--slow`` clients that ask for the largest allowed
response (~3 MB on this index) and never read it, and ``--slow-long`` clients doing the same for
~28 MB responses on a second index of 1,000 long passages (server RSS before, at its peak while
they hold their connections, and after they leave).
Needs nothing beyond the core install; takes about 2 minutes.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=int, default=601, help="idle connections to open")
    ap.add_argument("--bodies", type=int, default=12, help="clients announcing 30 MB bodies")
    ap.add_argument("--slow", type=int, default=120, help="never-reading clients, ~3 MB each")
    ap.add_argument("--slow-long", type=int, default=20, help="never-reading clients, ~28 MB each")
    args = ap.parse_args()

    from rlvr.envs.searchqa import Passage, build_index, synthetic_task
    from rlvr.envs.searchqa.synthetic import synthetic_passages

    tmp = tempfile.mkdtemp(prefix="rlvr-bench-service-")
    build_index(
        synthetic_task(seed=0)[0],
        encoder="lexical",
        kind="flat",
        progress=False,
        out_dir=os.path.join(tmp, "idx"),
    )
    proc, port = serve(os.path.join(tmp, "idx"))
    url = f"http://127.0.0.1:{port}/retrieve"

    def rss_mb() -> int:
        return process_rss_mb(proc.pid)

    def threads() -> int:
        return len(os.listdir(f"/proc/{proc.pid}/task"))

    def post(body: bytes, timeout: float = 60) -> tuple[int, int]:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, len(r.read())
        except urllib.error.HTTPError as e:
            return e.code, len(e.read())

    def latencies(n: int = 50) -> str:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            post(json.dumps({"queries": ["Who founded the Gollim Trust?"], "topk": 3}).encode())
            out.append(time.perf_counter() - t0)
        return f"median {statistics.median(out) * 1e3:.1f} ms, max {max(out) * 1e3:.1f} ms"

    def timed(label: str, body: bytes) -> None:
        t0 = time.perf_counter()
        status, size = post(body)
        print(f"{label}: HTTP {status}, {size} bytes in {time.perf_counter() - t0:.3f} s")

    try:
        print(
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; server RSS "
            f"{rss_mb()} MB, {threads()} threads"
        )
        print(f"normal client alone: {latencies()}")
        timed(
            "4,096 queries x topk 1,000",
            json.dumps({"queries": ["q"] * 4096, "topk": 1000}).encode(),
        )
        large = json.dumps({"queries": [f"q{i}" for i in range(4096)], "topk": 4}).encode()
        runner = threading.Thread(target=timed, args=("4,096 queries x topk 4", large))
        runner.start()
        time.sleep(0.05)
        print(f"normal client while it runs: {latencies(20)}")
        runner.join()
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.idle)]
        time.sleep(0.5)
        print(
            f"{args.idle} idle connections: server {threads()} threads, RSS {rss_mb()} MB; "
            f"normal client meanwhile: {latencies()}"
        )
        big = b"x" * (30 * 1024 * 1024)
        answers: list[bytes] = []

        def send_big() -> None:
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /retrieve HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(big))
            try:
                s.sendall(big)
            except OSError:
                pass  # the server answered and closed before reading the body
            try:
                answers.append(s.recv(100).split(b"\r\n")[0])
            except OSError as e:
                answers.append(str(e).encode())
            s.close()

        senders = [threading.Thread(target=send_big) for _ in range(args.bodies)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        print(f"{args.bodies} x 30 MB bodies: {sorted(set(answers))}; RSS after {rss_mb()} MB")
        timed("100,000 '['", b"[" * 100_000)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /retrieve HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{")
        t0 = time.perf_counter()
        line = s.recv(100).split(b"\r\n")[0]
        print(f"body promised, never sent: {line.decode()} after {time.perf_counter() - t0:.1f} s")
        s.close()
        time.sleep(1.0)  # the idle ones were opened > 10.5 s ago by now
        still_open = 0
        for c in idle:
            c.settimeout(0.05)
            try:
                still_open += c.recv(1) != b""
            except socket.timeout:
                still_open += 1
            except OSError:
                pass
            c.close()
        print(f"idle connections still open after the 10 s deadline: {still_open}/{args.idle}")
        # 58 queries x topk 280 (every passage) = 16,240 results: the largest allowed response
        widest = json.dumps(
            {"queries": [f"q{i}" for i in range(58)], "topk": 280, "return_scores": True}
        ).encode()
        print(f"{args.slow} never-reading clients: {slow_readers(port, widest, args.slow, proc)}")
    finally:
        proc.terminate()
        proc.wait()
    if args.slow_long:
        people, _ = synthetic_passages(1000, seed=0)
        long_passages = [Passage(p.id, p.title, " ".join([p.text] * 17)) for p in people]
        build_index(
            long_passages,
            encoder="lexical",
            kind="flat",
            progress=False,
            out_dir=os.path.join(tmp, "long"),
        )
        proc, port = serve(os.path.join(tmp, "long"))
        try:
            body = json.dumps(
                {"queries": [f"q{i}" for i in range(16)], "topk": 1000, "return_scores": True}
            ).encode()
            print(
                f"{args.slow_long} never-reading clients (1,000 long passages): "
                f"{slow_readers(port, body, args.slow_long, proc)}"
            )
        finally:
            proc.terminate()
            proc.wait()
    return 0


def serve(index: str) -> tuple[subprocess.Popen, int]:
    """``rlvr retrieval-serve`` over ``index`` on a free loopback port, once it listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "rlvr.cli", "retrieval-serve", "--index", index]
    proc = subprocess.Popen(
        [*argv, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    print(proc.stdout.readline().strip())
    return proc, port


def process_rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) // 1024


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])


def slow_readers(port: int, body: bytes, n: int, proc: subprocess.Popen) -> str:
    """``n`` clients send ``body`` and read nothing until the server has built what it will build
    (its CPU idle for 1 s, at most 25 s: inside the 30 s write deadline); then each reads its
    status line and leaves. Server RSS before, at the peak, and 2 s after they left."""
    request = b"POST /retrieve HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    with socket.create_connection(("127.0.0.1", port)) as s:  # one read in full: the baseline
        s.sendall(request[: -len(body)].replace(b"HTTP/1.1", b"HTTP/1.0") + body)
        size = sum(iter(lambda: len(s.recv(1 << 20)), 0))
    before = peak = process_rss_mb(proc.pid)
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(request)
        socks.append(s)
    t0, idle_since, ticks = time.monotonic(), time.monotonic(), cpu_ticks(proc.pid)
    while time.monotonic() - t0 < 25 and time.monotonic() - idle_since < 1.0:
        time.sleep(0.1)
        peak = max(peak, process_rss_mb(proc.pid))
        now = cpu_ticks(proc.pid)
        if now != ticks:
            ticks, idle_since = now, time.monotonic()
    statuses: collections.Counter = collections.Counter()
    for s in socks:
        s.settimeout(5)
        try:
            statuses[s.recv(64).split(b"\r\n")[0].decode(errors="replace") or "closed"] += 1
        except OSError as e:
            statuses[type(e).__name__] += 1
        s.close()
    time.sleep(2.0)
    return (
        f"{size / 2**20:.1f} MiB responses, {dict(statuses)}; server RSS {before} MB before "
        f"(after one such response read in full), {peak} MB at the peak, "
        f"{process_rss_mb(proc.pid)} MB 2 s after they left"
    )


if __name__ == "__main__":
    raise SystemExit(main())
