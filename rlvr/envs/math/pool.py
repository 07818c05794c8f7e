"""Batch verification on worker processes with a hard deadline per item.

math-verify can run for minutes on adversarial LaTeX (towers of exponents, deep fractions) and
its own timeouts only work in the main thread (``signal.alarm``) and raise a ``BaseException``.
So the deadline lives here, outside it: each worker (``python -m rlvr.envs.math.worker``) checks
one item at a time. Items go out in chunks (one pipe write for up to ``MAX_CHUNK`` items, the
gold sent once for a run of items that share it, as the G responses of a prompt do), and the next
chunk is already in the pipe when a worker runs low, so it never idles waiting for the parent.
Every item still has its own deadline: the clock of an item starts when the worker answers the
previous one, and an item still running ``timeout_s`` later gets its worker SIGKILLed and reaped
(no zombies), is reported ``reason="timeout"``, the items queued behind it go back to the queue,
and a fresh worker takes the slot. The other workers keep going meanwhile.

Workers are plain subprocesses, not ``multiprocessing`` children: they work from daemonic
processes (Gymnasium's ``AsyncVectorEnv`` workers), need no ``if __name__ == "__main__"`` guard in
the caller's script, and never fork a parent that holds threads (torch). A worker dies with its
parent: on Linux the kernel sends it SIGKILL when the parent dies (``PR_SET_PDEATHSIG``, which
fires when the *thread* that started the child ends, so every worker is started from one
long-lived spawner thread); elsewhere a watchdog thread in the worker polls its parent id. The
event loop waits with ``poll`` (no ``FD_SETSIZE`` limit, unlike ``select``). POSIX only.
"""

from __future__ import annotations

import atexit
import collections
import json
import math
import os
import queue as queue_mod
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rlvr.envs.math.verify import Verdict

#: Address-space cap per worker (MB): a worker imports sympy in ~0.5 GB of address space.
DEFAULT_MEMORY_LIMIT_MB = 4096
#: How long a fresh worker may take to import math-verify before the pool gives up on it.
START_TIMEOUT_S = 60.0
_MAX_START_FAILURES = 3
#: A worker gets its next chunk when fewer than this many of its items are unanswered, so the
#: next chunk is already in its pipe when it finishes (a busy parent does not leave it idle).
PIPELINE_DEPTH = 2
#: Most items in one chunk (one pipe write). Chunks shrink near the end of a batch so that the
#: last items spread over every worker.
MAX_CHUNK = 16
#: Most bytes in one chunk line (see ``take_chunk``).
CHUNK_BYTES = 16 * 1024
#: Longest accepted deadline (one day): a finite bound that ``poll`` can wait for.
MAX_TIMEOUT_S = 86400.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


class WorkerStartError(RuntimeError):
    """A verifier worker process exited or hung before it was ready."""


def check_timeout(timeout_s) -> float:
    """``timeout_s`` as a float, or ``ValueError`` unless it is a number in (0, ``MAX_TIMEOUT_S``]
    (NaN would disable every deadline comparison; infinity cannot be waited for)."""
    ok = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
    if not ok or not math.isfinite(timeout_s) or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(
            f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout_s!r}"
        )
    return float(timeout_s)


class _Spawner:
    """Starts every worker from one daemon thread that lives as long as the process.

    ``PR_SET_PDEATHSIG`` is tied to the thread that forked the child: a worker started from a
    short-lived thread (a thread pool scoring rewards) would be killed when that thread ends.
    """

    def __init__(self):
        self._jobs: queue_mod.Queue = queue_mod.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._jobs, self._pid = queue_mod.Queue(), os.getpid()
                self._thread = threading.Thread(
                    target=self._run, args=(self._jobs,), name="rlvr-math-spawner", daemon=True
                )
                self._thread.start()
        done = threading.Event()
        box: list = []
        self._jobs.put((args, kwargs, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    @staticmethod
    def _run(jobs: queue_mod.Queue) -> None:
        while True:
            args, kwargs, box, done = jobs.get()
            try:
                box.append(subprocess.Popen(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
                box.append(exc)
            done.set()


_SPAWNER = _Spawner()


class _Worker:
    """One worker process and its pipe state: ``starting`` -> ``ready``, with the items sent to
    it and not yet answered in ``inflight`` (the deadline runs for the first one only)."""

    def __init__(self, memory_limit_mb: int):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.stderr = tempfile.TemporaryFile()
        self.proc = _SPAWNER.popen(
            [sys.executable, "-m", "rlvr.envs.math.worker", str(memory_limit_mb), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            close_fds=True,
        )
        self.fd = self.proc.stdout.fileno()
        self.buffer = b""
        self.state = "starting"
        self.started = time.monotonic()
        self.inflight: collections.deque[int] = collections.deque()
        self.timeout_s = float("inf")
        self.deadline = float("inf")  # of the item the worker is on now, inflight[0]

    def send(self, items: list[int], line: bytes, timeout_s: float) -> bool:
        """Queue a chunk (``take_chunk``) on the worker in one write; False when it is dead."""
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        was_idle = not self.inflight
        self.inflight.extend(items)
        self.timeout_s = timeout_s
        if was_idle:
            self.deadline = time.monotonic() + timeout_s
        return True

    def pop_head(self) -> int:
        """The current item is done; the next queued one starts its clock now."""
        item = self.inflight.popleft()
        self.deadline = time.monotonic() + self.timeout_s if self.inflight else float("inf")
        return item

    def read_lines(self) -> list[str] | None:
        """Complete lines available now; None on EOF (the process died)."""
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            return None
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [ln.decode("utf-8", errors="replace") for ln in lines]

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            self.stderr.seek(0)
            return self.stderr.read().decode("utf-8", errors="replace")[-n:]
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        """SIGKILL and reap: a killed worker never lingers as a zombie."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close_pipes()

    def stop(self, grace_s: float = 2.0) -> None:
        """Close stdin (the worker exits on EOF); kill it if it does not within ``grace_s``."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self.stderr):
            try:
                f.close()
            except OSError:
                pass


class VerifierPool:
    """``workers`` verifier processes; ``verify_many`` checks (gold, answer) pairs in parallel.

    Thread-safe (one batch at a time); usable as a context manager; ``stats`` counts timeouts,
    crashes and worker restarts over the pool's life.
    """

    def __init__(self, workers: int = 2, *, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB):
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        self.n_workers = workers
        self.memory_limit_mb = int(memory_limit_mb)
        self.stats = {"items": 0, "timeouts": 0, "crashes": 0, "restarts": 0}
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._start_failures = 0
        self._on_result = lambda item, verdict: None
        self.closed = False

    # -- life cycle -----------------------------------------------------------------------------
    def __enter__(self) -> "VerifierPool":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, wait: bool = False) -> None:
        """Launch the workers (they import math-verify in parallel); ``wait`` blocks until ready."""
        if self.closed:
            raise RuntimeError("this VerifierPool is closed")
        while len(self._workers) < self.n_workers:
            self._workers.append(_Worker(self.memory_limit_mb))
        if wait:
            with self._lock:
                self._pump_until(lambda: all(w.state != "starting" for w in self._workers))

    def close(self) -> None:
        """Stop every worker and reap it. Idempotent."""
        self.closed = True
        if os.getpid() != self._pid:  # a forked child must not touch its parent's workers
            self._workers = []
            return
        for w in self._workers:
            w.stop()
        self._workers = []

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    # -- verification ---------------------------------------------------------------------------
    def verify_many(self, pairs: list[tuple[str, str]], timeout_s: float) -> list[Verdict]:
        """Verdicts for ``(gold, answer)`` pairs, in order; each item gets ``timeout_s`` seconds
        from the moment a worker takes it. Raises ``WorkerStartError`` only when workers cannot
        start at all (the callers fall back to in-process verification)."""
        timeout_s = check_timeout(timeout_s)
        with self._lock:
            if self.closed or os.getpid() != self._pid:
                raise RuntimeError("this VerifierPool is closed or belongs to another process")
            self.start()
            results: list[Verdict | None] = [None] * len(pairs)
            queue = collections.deque(range(len(pairs)))

            def dispatch() -> None:
                for w in list(self._workers):
                    if w.state == "ready" and len(w.inflight) < PIPELINE_DEPTH and queue:
                        items, line = take_chunk(queue, pairs, len(self._workers))
                        if not w.send(items, line, timeout_s):
                            queue.extendleft(reversed(items))
                            self._replace(w, queue)

            def on_result(i: int, verdict: Verdict) -> None:
                results[i] = verdict

            self._on_result = on_result
            try:
                dispatch()
                self._pump_until(
                    lambda: not queue and all(r is not None for r in results), dispatch, queue
                )
            except BaseException:
                # Interrupted mid-batch (Ctrl-C, start failure): workers still hold items of this
                # batch; replace them so no stale answer leaks into the next batch.
                for w in list(self._workers):
                    if w.inflight:
                        self._replace(w, None)
                raise
            finally:
                self._on_result = lambda item, verdict: None
            self.stats["items"] += len(pairs)
            return list(results)  # type: ignore[arg-type]

    # -- the event loop -------------------------------------------------------------------------
    def _pump_until(self, done, dispatch=lambda: None, queue=None) -> None:
        while not done():
            now = time.monotonic()
            waiting = [w for w in self._workers if w.state == "starting" or w.inflight]
            if not waiting:
                dispatch()
                continue
            next_deadline = min(
                w.started + START_TIMEOUT_S if w.state == "starting" else w.deadline
                for w in waiting
            )
            poller = select.poll()
            for w in waiting:
                poller.register(w.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            wait_ms = math.ceil(max(0.0, next_deadline - now) * 1000)
            by_fd = {w.fd: w for w in waiting}
            for fd, _ in poller.poll(wait_ms):
                self._handle_output(by_fd[fd], queue)
            now = time.monotonic()
            for w in list(self._workers):
                if w.inflight and now >= w.deadline:
                    self._on_result(w.pop_head(), Verdict(False, "timeout"))
                    self.stats["timeouts"] += 1
                    self._replace(w, queue)
                elif w.state == "starting" and now >= w.started + START_TIMEOUT_S:
                    self._start_failed(w, "did not become ready in time")
            dispatch()

    def _handle_output(self, w: _Worker, queue) -> None:
        lines = w.read_lines()
        if lines is None:  # EOF: the process is gone
            if w.state == "starting":
                self._start_failed(w, "exited during start-up")
                return
            if w.inflight:
                self._on_result(w.pop_head(), Verdict(False, "worker_crashed"))
            self.stats["crashes"] += 1
            self._replace(w, queue)
            return
        for line in lines:
            if w.state == "starting" and line == "ready":
                w.state = "ready"
                self._start_failures = 0
                continue
            try:
                tag, correct, reason = json.loads(line)
            except ValueError:
                continue
            if w.inflight and tag == w.inflight[0]:
                self._on_result(w.pop_head(), Verdict(bool(correct), str(reason)))

    def _replace(self, w: _Worker, queue) -> None:
        """Kill ``w`` (its current item is already answered), put the items queued behind it back
        at the front of ``queue``, and start a fresh worker in its slot."""
        if queue is not None:
            queue.extendleft(reversed(w.inflight))
        w.inflight.clear()
        w.kill()
        self._workers[self._workers.index(w)] = _Worker(self.memory_limit_mb)
        self.stats["restarts"] += 1

    def _start_failed(self, w: _Worker, why: str) -> None:
        tail = w.stderr_tail()
        w.kill()
        self._start_failures += 1
        if self._start_failures >= _MAX_START_FAILURES:
            self._workers.remove(w)
            raise WorkerStartError(f"math verifier worker {why}; its stderr ends with:\n{tail}")
        self._workers[self._workers.index(w)] = _Worker(self.memory_limit_mb)


def chunk_size(queued: int, workers: int) -> int:
    """Items in the next chunk: a quarter of an even share of what is left, 1..``MAX_CHUNK``, so
    chunks are large mid-batch and single items at the end (no worker is left with a long tail)."""
    return max(1, min(MAX_CHUNK, queued // (4 * max(1, workers)), queued))


def take_chunk(
    queue: collections.deque, pairs: list[tuple[str, str]], workers: int
) -> tuple[list[int], bytes]:
    """Pop the next chunk off ``queue``: its items and the line that sends them,
    ``[[tag, gold, answer], ...]`` with ``gold`` null when it repeats the previous item's.

    A line stops growing at ``CHUNK_BYTES`` (one item at least: <= ~12 KB, answers and golds
    being capped at 1,000 characters), so a chunk always fits the pipe's 64 KiB buffer and the
    write never blocks the parent while a worker is stuck on an item.
    """
    size, items, parts, nbytes, last_gold = chunk_size(len(queue), workers), [], [], 0, None
    while queue and len(items) < size and nbytes < CHUNK_BYTES:
        i = queue.popleft()
        gold, answer = pairs[i]
        part = json.dumps([i, None if gold == last_gold else gold, answer])
        items.append(i)
        parts.append(part)
        nbytes += len(part) + 2
        last_gold = gold
    return items, ("[" + ", ".join(parts) + "]\n").encode("utf-8")


_POOLS: dict[int, VerifierPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(workers: int | None = None) -> VerifierPool:
    """The process-wide pool with ``workers`` workers (created on first use, closed at exit).

    ``workers=None`` reuses any live pool (the smallest), else starts a one-worker pool; this is
    what the single-response ``score`` uses.
    """
    with _POOLS_LOCK:
        for size, pool in list(_POOLS.items()):
            if pool.closed or pool._pid != os.getpid():
                del _POOLS[size]
        if workers is None:
            if _POOLS:
                return _POOLS[min(_POOLS)]
            workers = 1
        if workers not in _POOLS:
            _POOLS[workers] = VerifierPool(workers)
        return _POOLS[workers]


def close_shared_pools() -> None:
    """Stop every pool made by ``shared_pool`` (also runs at interpreter exit)."""
    with _POOLS_LOCK:
        for pool in _POOLS.values():
            pool.close()
        _POOLS.clear()


atexit.register(close_shared_pools)
