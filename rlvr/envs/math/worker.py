"""One math-verify worker process: ``python -m rlvr.envs.math.worker [memory_limit_mb]``.

Started by ``pool.VerifierPool``; speaks JSON lines. It writes ``ready`` once imported, then for
every ``[tag, gold, answer]`` line on stdin writes ``[tag, correct, reason]``. It has no deadline
of its own (math-verify's ``signal.alarm`` timeouts are off, ``parsing_timeout=None``): the pool
kills it when an item runs past its deadline. Stray prints from libraries go to stderr so they
cannot corrupt the protocol. EOF on stdin ends it.
"""
from __future__ import annotations

import json
import os
import signal
import sys


def _limit_memory(megabytes: int) -> None:
    """Cap the address space so a runaway sympy integer raises MemoryError instead of
    swapping the machine (``2^{2^{2^{2^{2^2}}}}`` grows past 500 MB in seconds)."""
    if megabytes <= 0:
        return
    try:
        import resource

        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass  # not POSIX, or the hard limit is lower: keep the default


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and closes us
    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    from rlvr.envs.math.verify import verify_answer  # heavy import before the memory cap

    _limit_memory(int(argv[0]) if argv else 0)
    protocol.write("ready\n")
    for line in sys.stdin:
        try:
            tag, gold, answer = json.loads(line)
            verdict = verify_answer(str(gold), str(answer))
            reply = [tag, verdict.correct, verdict.reason]
        except (ValueError, TypeError):
            reply = [None, False, "protocol_error"]
        protocol.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
