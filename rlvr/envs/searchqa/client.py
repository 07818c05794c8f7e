"""Client for a retrieval service speaking Search-R1's protocol (ours or Search-R1's own).

``POST {url}`` with ``{"queries": [...], "topk": k, "return_scores": true}`` returns
``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}`` (one list per query;
without scores each entry is the document itself), as in Search-R1's
``search_r1/search/retrieval_server.py``. Only the standard library is used.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Sequence

from rlvr.envs.searchqa.corpus import Passage, split_contents
from rlvr.envs.searchqa.index import Hit

#: Queries are cut to this many characters before encoding (the service and the env both apply it);
#: e5 reads at most 512 tokens anyway.
MAX_QUERY_CHARS = 2000
#: The most a response may hold: twice the service's own response limit (32 MiB); a larger one is
#: refused instead of being read into memory.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class RetrievalError(RuntimeError):
    """The retrieval service could not answer (down, timed out, or sent something unexpected)."""


def retrieve_url(url: str) -> str:
    """``http://host:port`` -> ``http://host:port/retrieve``; a URL with a path is kept."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"retriever URL must look like http://host:port[/retrieve], got {url!r}")
    return url if parsed.path not in ("", "/") else url.rstrip("/") + "/retrieve"


def _document_to_passage(doc, fallback_id: str) -> Passage:
    if not isinstance(doc, dict):
        raise RetrievalError(f"document is not a JSON object: {str(doc)[:200]}")
    pid = str(doc.get("id", fallback_id))
    if "contents" in doc:
        return Passage(pid, *split_contents(str(doc["contents"])))
    return Passage(pid, str(doc.get("title", "")), str(doc.get("text", "")))


def parse_response(payload, n_queries: int) -> list[list[Hit]]:
    """Hits from a Search-R1 ``/retrieve`` response (with or without scores)."""
    result = payload.get("result") if isinstance(payload, dict) else None
    if not isinstance(result, list) or len(result) != n_queries:
        raise RetrievalError(
            f"response has no 'result' list of {n_queries} entries: {str(payload)[:200]}"
        )
    out = []
    for per_query in result:
        if not isinstance(per_query, (list, type(None))):
            raise RetrievalError(f"result entry is not a list: {str(per_query)[:200]}")
        hits = []
        for rank, entry in enumerate(per_query or []):
            if isinstance(entry, dict) and "document" in entry:
                score = entry.get("score", 0.0)
                if isinstance(score, bool) or not isinstance(score, (int, float)):
                    raise RetrievalError(f"score is not a number: {str(score)[:200]}")
                hits.append(
                    Hit(_document_to_passage(entry["document"], str(rank)), float(score), -1)
                )
            else:
                hits.append(Hit(_document_to_passage(entry, str(rank)), 0.0, -1))
        out.append(hits)
    return out


class RemoteRetriever:
    """``search(queries, k)`` over HTTP; raises ``RetrievalError`` when the service fails."""

    def __init__(self, url: str, timeout: float = 30.0):
        self.url = retrieve_url(url)
        self.timeout = float(timeout)

    def search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        queries = [str(q)[:MAX_QUERY_CHARS] for q in queries]
        if not queries:
            return []
        body = json.dumps({"queries": queries, "topk": int(k), "return_scores": True}).encode(
            "utf-8"
        )
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                raw = resp.read(MAX_RESPONSE_BYTES + 1)
            if len(raw) > MAX_RESPONSE_BYTES:
                raise RetrievalError(
                    f"retrieval service at {self.url} sent more than {MAX_RESPONSE_BYTES} bytes"
                )
            payload = json.loads(raw.decode("utf-8"))
        except urllib.error.HTTPError as e:
            detail = e.read(4096).decode("utf-8", "replace")[:300]
            raise RetrievalError(
                f"retrieval service at {self.url} answered HTTP {e.code}: {detail}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise RetrievalError(
                f"retrieval service at {self.url} is unreachable: {reason}"
            ) from None
        except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON, the int-string limit
            raise RetrievalError(
                f"retrieval service at {self.url} sent invalid JSON: {str(e)[:200]}"
            ) from None
        return parse_response(payload, len(queries))
