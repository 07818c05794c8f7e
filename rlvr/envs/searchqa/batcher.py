"""One search thread that gathers the queries of requests arriving together into one call.

The agent loop of a trainer sends one query per request, hundreds at a time (verl 0.9.1: 8
agent-loop workers, each stepping its episodes on a thread pool of up to 32 threads). A flat
index reads every stored vector once per call whatever the number of queries in it (FAISS
multiplies the query block by the whole index with BLAS), so searching 256 queries in one call
costs little more than searching one, and 256 calls of one query cost 256 passes over the index.

``SearchBatcher.submit(queries, topk, admit)`` queues a job (a request's chunk of queries) and
returns a ``concurrent.futures.Future`` of its hits. The search thread takes the oldest job, waits
up to ``window_s`` for more (not at all when ``window_s`` is 0, though it still takes every job
already queued), up to ``max_queries`` queries in all (a job is never split; one larger than that
is searched alone), runs each job's ``admit`` in queue order (the response budget of the
service: a job refused there gets the exception and is left out of the search), then calls
``retriever.search`` once per distinct ``topk`` among the gathered jobs and hands each job its
rows. ``max_queries=1`` searches each job alone: the service before batching. A job whose client
left (its future cancelled) is skipped. A failed search fails every job of that call.

The thread never dies silently: an error anywhere in a batch (gathering, admitting, searching)
answers that batch's jobs with it and the thread goes on to the next; should the thread end
all the same, every job still queued, and every job submitted after, gets
``SearchThreadStopped`` at once (``alive`` and ``error`` say why, for ``/health``). No job is
ever left without an answer.

Each query's hits are the same whether it is searched alone or with others: ``SearchIndex``
guarantees it (``rlvr.envs.searchqa.index``), and ``tests/test_searchqa_batching.py`` checks it
through the service.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Job:
    queries: list[str]
    topk: int
    admit: Callable[[], None] | None = None
    future: Future = field(default_factory=Future)


class SearchThreadStopped(RuntimeError):
    """The search thread has ended; the message says why."""


class SearchBatcher:
    """The search thread of the retrieval service (module docstring)."""

    def __init__(self, retriever, window_s: float, max_queries: int):
        self.retriever, self.window_s, self.max_queries = retriever, float(window_s), max_queries
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._carry: Job | None = None
        #: Calls of ``retriever.search`` and the queries they held (``calls``, ``queries``).
        self.calls = self.searched = 0
        #: Why the thread ended (None while it runs, or after a plain ``close``).
        self.error: BaseException | None = None
        self._stopped = False
        self._lock = threading.Lock()  # a job is queued only while the thread can answer it
        self._thread = threading.Thread(target=self._run, name="rlvr-search", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return not self._stopped and self._thread.is_alive()

    def submit(self, queries: list[str], topk: int, admit=None) -> Future:
        job = Job(list(queries), int(topk), admit)
        with self._lock:
            if self._stopped:
                raise self.stopped_error()
            self._queue.put(job)
        return job.future

    def stopped_error(self) -> SearchThreadStopped:
        why = "closed" if self.error is None else f"{type(self.error).__name__}: {self.error}"
        return SearchThreadStopped(f"the search thread has stopped ({why[:200]})")

    def close(self) -> None:
        """Stop the thread after the job in progress; jobs still queued are cancelled."""
        self._queue.put(None)

    # -- the search thread ----------------------------------------------------------------------
    def _next(self, timeout: float | None) -> Job | None:
        """The next queued job, waiting up to ``timeout`` (None: forever); ``None`` when none
        came or the batcher is closing (the sentinel is put back for the outer loop)."""
        if self._carry is not None:
            job, self._carry = self._carry, None
            return job
        try:
            job = (
                self._queue.get(timeout=timeout)
                if timeout is None or timeout > 0
                else (self._queue.get_nowait())
            )
        except queue.Empty:
            return None
        if job is None:
            self._queue.put(None)
        return job

    def _gather(self, batch: list[Job]) -> None:
        """Add to ``batch`` (its first job) the jobs that arrive within the window."""
        n = len(batch[0].queries)
        deadline = time.monotonic() + self.window_s
        while n < self.max_queries:
            job = self._next(deadline - time.monotonic())
            if job is None:
                break
            if n + len(job.queries) > self.max_queries:
                self._carry = job  # it starts the next call
                break
            batch.append(job)
            n += len(job.queries)

    def _run(self) -> None:
        batch: list[Job] = []
        try:
            while True:
                first = self._next(None)
                if first is None:
                    break
                batch = [first]
                try:
                    self._gather(batch)
                    self._search(batch)
                except Exception as e:  # noqa: BLE001 - this batch's requests are told; go on
                    _fail(batch, e)
        except BaseException as e:  # noqa: BLE001 - recorded for /health and said once
            self.error = e
            print(f"rlvr retrieval-serve: {self.stopped_error()}", file=sys.stderr, flush=True)
        finally:
            with self._lock:
                self._stopped = True
                left = self._drain()
            if self.error is None:
                for job in left:
                    job.future.cancel()
            else:
                _fail(batch + left, self.stopped_error())

    def _drain(self) -> list[Job]:
        jobs = [self._carry] if self._carry is not None else []
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return jobs
            if job is not None:
                jobs.append(job)

    def _search(self, batch: list[Job]) -> None:
        admitted: dict[int, list[Job]] = {}
        for job in batch:
            if not job.future.set_running_or_notify_cancel():
                continue  # its client left
            try:
                if job.admit is not None:
                    job.admit()
            except Exception as e:  # noqa: BLE001 - refused (503): this job only
                job.future.set_exception(e)
                continue
            admitted.setdefault(job.topk, []).append(job)
        for topk, jobs in admitted.items():
            queries = [q for job in jobs for q in job.queries]
            try:
                hits: list[Any] = self.retriever.search(queries, topk)
            except Exception as e:  # noqa: BLE001 - every job of the call is told
                for job in jobs:
                    job.future.set_exception(e)
                continue
            self.calls += 1
            self.searched += len(queries)
            start = 0
            for job in jobs:
                job.future.set_result(hits[start : start + len(job.queries)])
                start += len(job.queries)


def _fail(jobs: list[Job], error: BaseException) -> None:
    """Answer every job of ``jobs`` not answered yet (nor cancelled) with ``error``."""
    for job in jobs:
        if job.future.done():
            continue
        if job.future.running() or job.future.set_running_or_notify_cancel():
            job.future.set_exception(error)
