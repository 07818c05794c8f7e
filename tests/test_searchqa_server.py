"""The Search-R1-protocol retrieval service on loopback and its client."""

import http.client
import json
import socket

import pytest

from rlvr.envs.searchqa import (
    RemoteRetriever,
    RetrievalError,
    SearchQAEnv,
    build_index,
    serve_in_thread,
    synthetic_task,
)


@pytest.fixture(scope="module")
def service():
    corpus = synthetic_task(seed=0)[0]
    index = build_index(corpus, encoder="lexical", kind="flat", progress=False)
    server, url = serve_in_thread(index)
    yield index, url, server
    server.shutdown()
    server.server_close()


def _post(url, body: bytes, path="/retrieve", headers=None):
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", path, body=body, headers=headers or {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    return resp.status, data


def test_round_trip_matches_in_process_search(service):
    index, url, _ = service
    queries = ["Who founded the Gollim Trust?", index.corpus[5].text]
    remote = RemoteRetriever(url).search(queries, 3)
    local = index.search(queries, 3)
    assert [[h.passage for h in r] for r in remote] == [[h.passage for h in r] for r in local]
    assert [[round(h.score, 5) for h in r] for r in remote] == [
        [round(h.score, 5) for h in r] for r in local
    ]
    assert remote[1][0].passage == index.corpus[5]


def test_search_r1_response_shape(service):
    index, url, _ = service
    status, data = _post(
        url, json.dumps({"queries": ["a", "b"], "topk": 2, "return_scores": True}).encode()
    )
    assert status == 200 and len(data["result"]) == 2 and len(data["result"][0]) == 2
    entry = data["result"][0][0]
    assert set(entry) == {"document", "score"} and set(entry["document"]) == {"id", "contents"}
    assert entry["document"]["contents"].startswith('"') and '"\n' in entry["document"]["contents"]
    status, data = _post(url, json.dumps({"queries": ["a"]}).encode())
    assert (
        status == 200
        and len(data["result"][0]) == 3
        and set(data["result"][0][0]) == {"id", "contents"}
    )


@pytest.mark.parametrize(
    "body, status",
    [
        (b"{not json", 400),
        (b"\xff\xfe", 400),
        (b"[1, 2]", 422),
        (b'{"topk": 3}', 422),
        (b'{"queries": "one string"}', 422),
        (b'{"queries": [1, 2]}', 422),
        (b'{"queries": ["q"], "topk": 0}', 422),
        (b'{"queries": ["q"], "topk": "3"}', 422),
        (b'{"queries": ["q"], "return_scores": "yes"}', 422),
    ],
)
def test_malformed_requests_get_4xx_and_server_keeps_serving(service, body, status):
    _, url, _ = service
    got, data = _post(url, body)
    assert got == status and "detail" in data
    assert len(RemoteRetriever(url).search(["still there?"], 1)[0]) == 1


def test_unknown_path_and_long_query(service):
    _, url, _ = service
    assert _post(url, b"{}", path="/search")[0] == 404
    hits = RemoteRetriever(url).search(["x" * 100_000, ""], 2)
    assert len(hits) == 2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_service_down_is_a_clear_error_and_an_observation():
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(RetrievalError, match="unreachable"):
        RemoteRetriever(url, timeout=2).search(["q"], 3)
    env = SearchQAEnv(retriever=url)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("<search>q</search>")
    assert "Search failed" in obs and "unreachable" in obs and not term and info["search_error"]


def test_env_over_the_service(service):
    _, url, _ = service
    env = SearchQAEnv(retriever=url)
    _, info = env.reset(options={"index": 2})
    local = SearchQAEnv()
    local.reset(options={"index": 2})
    action = f"<search>{info['question']}</search>"
    assert env.step(action)[0] == local.step(action)[0]


def test_bad_url():
    with pytest.raises(ValueError, match="URL"):
        RemoteRetriever("localhost:8000")
