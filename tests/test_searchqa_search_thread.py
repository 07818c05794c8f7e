"""The retrieval service's search thread never dies silently and no request waits on it without a
deadline; a request waiting for its search holds no body budget (issue 51, items 2 and 3)."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from rlvr.envs.searchqa.batcher import SearchBatcher
from rlvr.envs.searchqa.limits import ServerLimits
from rlvr.envs.searchqa.server import serve_in_thread


class Stop(BaseException):
    """What no ``except Exception`` catches: it ends the search thread."""


class Retriever:
    """Answers ``q`` with ``[q]``; ``die`` ends the thread; every call sleeps ``delay_s``."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s, self.calls = delay_s, 0

    def __len__(self):
        return 1

    def search(self, queries, k):
        self.calls += 1
        if "die" in queries:
            raise Stop("the index went away under the thread")
        time.sleep(self.delay_s)
        return [[] for _ in queries]


def _request(url: str, method: str, path: str, body: dict | None = None, timeout: float = 30):
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _serving(retriever, **limits):
    return serve_in_thread(retriever, limits=ServerLimits(**limits))


def test_a_window_past_a_second_or_a_timeout_past_a_day_is_refused():
    with pytest.raises(ValueError, match=r"batch_window_s must be a finite number >= 0 and <= 1"):
        ServerLimits(batch_window_s=1e10)
    with pytest.raises(ValueError, match=r"request_timeout_s .* <= 86400"):
        ServerLimits(request_timeout_s=1e12)
    assert ServerLimits(batch_window_s=1.0).batch_window_s == 1.0


def test_a_batch_that_fails_outside_the_search_answers_its_jobs_and_the_thread_goes_on():
    """A window the queue cannot wait for (OverflowError in the gathering, which used to kill
    the thread and leave every later search hanging) fails each batch, not the thread."""
    batcher = SearchBatcher(Retriever(), window_s=1e10, max_queries=10)
    try:
        for _ in range(3):
            job = batcher.submit(["q"], 1)
            assert isinstance(job.exception(timeout=5), OverflowError)
        assert batcher.alive
    finally:
        batcher.close()


def test_a_dead_search_thread_fails_every_request_at_once_and_health_says_so():
    server, url = _serving(Retriever())
    try:
        assert _request(url, "GET", "/health")[0] == 200
        start = time.monotonic()
        status, body = _request(url, "POST", "/retrieve", {"queries": ["die"]}, timeout=10)
        assert status == 500 and "Stop" in body["detail"], body
        status, body = _request(url, "GET", "/health")
        assert status == 503 and "the search thread has stopped (Stop" in body["detail"], body
        status, body = _request(url, "POST", "/retrieve", {"queries": ["q"]}, timeout=10)
        assert status == 500 and "search thread has stopped" in body["detail"], body
        assert time.monotonic() - start < 5  # answered, not left to the client's timeout
    finally:
        server.shutdown()
        server.server_close()


def test_a_search_that_does_not_finish_is_503_at_the_deadline():
    server, url = _serving(Retriever(delay_s=3.0), search_timeout_s=0.5)
    try:
        start = time.monotonic()
        status, body = _request(url, "POST", "/retrieve", {"queries": ["q"]})
        waited = time.monotonic() - start
        assert status == 503 and "not finished within 0.5 s" in body["detail"], body
        assert 0.5 <= waited < 2.5, waited
    finally:
        server.shutdown()
        server.server_close()


def test_requests_waiting_for_their_search_hold_no_body_budget():
    """Two large requests fill the body budget; once parsed they wait for a slow search, and a
    normal request meanwhile is served, not refused (it was 503 while the budget was held for
    the whole search)."""
    retriever = Retriever(delay_s=1.5)
    server, url = _serving(
        retriever,
        max_body_bytes=64 * 1024,
        max_inflight_body_bytes=128 * 1024,
        batch_queries=1,
    )
    large = {"queries": ["q" * 1000] * 60}  # ~60 KiB each: two fill the budget
    answers: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(_request(url, "POST", "/retrieve", large)[0])
        )
        for _ in range(2)
    ]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while retriever.calls == 0 and time.monotonic() < deadline:
            time.sleep(0.02)  # both bodies are in and parsed once the first search runs
        time.sleep(0.2)
        assert server.inflight_body_bytes == 0
        status, _ = _request(url, "POST", "/retrieve", {"queries": ["q"]})
        assert status == 200
        for t in threads:
            t.join(30)
        assert answers == [200, 200]
    finally:
        server.shutdown()
        server.server_close()
