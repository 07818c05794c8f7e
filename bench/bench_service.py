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

    nice -n 10 python bench/bench_service.py --load [--passages 1000000] [--clients 256]

The paper-scale load instead: a flat index of ``--passages`` random unit vectors of 768 floats
(e5's size; random vectors cost a flat scan what e5's do, and the service benchmark measures
the scan, not retrieval quality: recall of HNSW and IVF-PQ against flat is
``bench/bench_retrieval.py``'s), served twice by one process, with today's batching (queries
that arrive together in one FAISS call) and with ``--batch-queries 1`` (one call per request:
the service before batching). ``--clients`` clients each send one query per request, as the
search-QA agent loop does, waiting 30 s (``RemoteRetriever``'s timeout) for each, for
``--duration`` seconds; then throughput (answered queries/s), latency p50/p99 of the answered,
timeouts and other errors, side by side. The request rate the paper's batch implies is printed
with them. About 4 minutes at 1M passages on 2 shared cores.
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
    ap.add_argument("--load", action="store_true", help="the paper-scale load comparison only")
    ap.add_argument("--passages", type=int, default=1_000_000, help="--load: index size")
    ap.add_argument("--dim", type=int, default=768, help="--load: vector size (e5: 768)")
    ap.add_argument("--clients", type=int, default=256, help="--load: concurrent clients")
    ap.add_argument("--duration", type=float, default=60.0, help="--load: seconds of load")
    ap.add_argument("--serve-random", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_random:
        return serve_random(*args.serve_random)
    if args.load:
        return load(args)

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


# -- the paper-scale load (--load) ---------------------------------------------------------------
#: Search QA's paper setting (rlvr/profiles/paper_searchqa.yaml): 64 questions x 16 rollouts a
#: step, at most 2 turns, so at most one search per episode (a second-turn search truncates the
#: episode unrun); verl 0.9.1 runs 8 agent-loop workers whose env steps share a thread pool of
#: min(32, cpus + 4) threads each: at most 8 x 32 = 256 searches in flight.
PAPER_SEARCHES_PER_STEP, PAPER_IN_FLIGHT, CLIENT_TIMEOUT_S = 64 * 16 * 1, 8 * 32, 30.0


class RandomCorpus:
    """Passage ``i`` made on demand (a million Python objects would cost ~0.5 GB)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        from rlvr.envs.searchqa import Passage

        return Passage(str(i), f"Passage {i}", f"random vector {i}; " * 8)


class HashEncoder:
    """A query's vector: unit normal noise seeded by the query's text (repeatable)."""

    def __init__(self, dim: int):
        self.dim = dim

    def encode_queries(self, queries):
        import hashlib

        import numpy as np

        rows = []
        for q in queries:
            seed = int.from_bytes(hashlib.sha256(q.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows)


def serve_random(n: int, dim: int) -> int:
    """The --load server process: one random flat index, served with batching and without."""
    from rlvr.repro import apply_kernel_mode

    # the kernel environment `rlvr retrieval-serve` runs in by default (before faiss loads)
    apply_kernel_mode(os.environ.get("RLVR_KERNELS") or "reproducible")
    import faiss
    import numpy as np

    from rlvr.envs.searchqa.index import SearchIndex
    from rlvr.envs.searchqa.server import ServerLimits, serve_in_thread

    t0 = time.perf_counter()
    index, rng = faiss.IndexFlatIP(dim), np.random.default_rng(0)
    for start in range(0, n, 100_000):
        x = rng.standard_normal((min(100_000, n - start), dim), dtype=np.float32)
        index.add(x / np.linalg.norm(x, axis=1, keepdims=True))
    search = SearchIndex(index, HashEncoder(dim), RandomCorpus(n), "flat", {})
    batched, url_a = serve_in_thread(search)
    alone, url_b = serve_in_thread(search, limits=ServerLimits(batch_queries=1))
    print(f"{url_a} {url_b} {time.perf_counter() - t0:.1f}", flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
    for server in (batched, alone):
        print(f"calls {server.batcher.calls} queries {server.batcher.searched}", flush=True)
    return 0


def run_load(url: str, clients: int, duration: float) -> dict:
    """``clients`` threads, each sending one query per request for ``duration`` seconds."""
    from rlvr.envs.searchqa.client import RemoteRetriever, RetrievalError

    latencies: list[float] = []
    outcome = collections.Counter()
    stop = time.perf_counter() + duration

    def client(c: int) -> None:
        retriever, n = RemoteRetriever(url, timeout=CLIENT_TIMEOUT_S), 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                retriever.search([f"client {c} question {n}"], 3)
                latencies.append(time.perf_counter() - t0)
                outcome["ok"] += 1
            except RetrievalError as e:
                text = str(e)
                busy = "busy" if "HTTP 503" in text else "error"
                outcome["timeout" if "timed out" in text else busy] += 1
            n += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    latencies.sort()

    def q(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else 0.0

    return {
        "wall": wall,
        "qps": outcome["ok"] / wall,
        "p50": q(0.50),
        "p99": q(0.99),
        "ok": outcome["ok"],
        "timeouts": outcome["timeout"],
        "busy": outcome["busy"],
        "errors": outcome["error"],
    }


def load(args) -> int:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-random", str(args.passages), str(args.dim)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    url_a, url_b, built = proc.stdout.readline().split()
    gb = args.passages * args.dim * 4 / 1e9
    print(
        f"flat index of {args.passages:,} random unit vectors x {args.dim} floats ({gb:.1f} GB), "
        f"built in {built} s; {args.clients} clients x {args.duration:g} s each case, one query "
        f"per request, {CLIENT_TIMEOUT_S:g} s client timeout; kernel mode "
        f"{os.environ.get('RLVR_KERNELS') or 'reproducible'} (as rlvr retrieval-serve); "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    cases = [
        ("batched (default: window 2 ms, <= 256 queries a call)", url_a),
        ("one call per request (--batch-queries 1, before)", url_b),
    ]
    rows = [(name, run_load(url, args.clients, args.duration)) for name, url in cases]
    proc.stdin.close()
    calls = [line.strip() for line in proc.stdout]
    proc.wait(timeout=600)
    head = ("q/s", "p50 s", "p99 s", "answered", "timeouts", "503", "errors")
    print(f"{'service':<52} " + " ".join(f"{h:>9}" for h in head))
    for (name, r), c in zip(rows, calls):
        print(
            f"{name:<52} {r['qps']:9.1f} {r['p50']:9.2f} {r['p99']:9.2f} {r['ok']:9d} "
            f"{r['timeouts']:9d} {r['busy']:9d} {r['errors']:9d}   ({c})"
        )
    burst = PAPER_SEARCHES_PER_STEP / CLIENT_TIMEOUT_S
    keep = PAPER_IN_FLIGHT / CLIENT_TIMEOUT_S
    print(
        f"paper's rate: 64 questions x 16 rollouts x <= 1 search (max_turns 2) = "
        f"{PAPER_SEARCHES_PER_STEP} searches a step, arriving together after the first turn's "
        f"generation, <= {PAPER_IN_FLIGHT} in flight (8 agent-loop workers x 32 threads): "
        f">= {keep:.1f} q/s keeps every in-flight search under the {CLIENT_TIMEOUT_S:g} s "
        f"timeout, >= {burst:.1f} q/s serves a step's burst within it"
    )
    print(
        "503: the connection cap (256) full of connections being served, answered at once, "
        "and the client asks again (the env would show the policy 'Search failed')"
    )
    print(
        f"scale: a flat scan reads every vector once per FAISS call, so a call costs ~ passages x "
        f"dim; wiki-18 (21M x 768, 64 GB) costs ~{21e6 / args.passages:.0f}x a call here: "
        "batching divides the number of scans by the queries a call holds; beyond that, an "
        "HNSW or IVF index (rlvr index --kind, recall in bench/bench_retrieval.py) or FAISS on "
        "GPU (rlvr retrieval-serve --faiss-gpu)"
    )
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
