"""``rlvr index`` (build a FAISS index from a passage JSONL) and ``rlvr retrieval-serve``
(serve an index over Search-R1's ``POST /retrieve`` protocol on loopback)."""

from __future__ import annotations

import argparse
import json
import sys
import time


def add_index_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--corpus",
        required=True,
        help=(
            "passages JSONL ({id,title,text} or Search-R1 {id,contents}); "
            "'synthetic' for the synthetic task's corpus"
        ),
    )
    p.add_argument("--out", required=True, help="output folder (index.faiss, meta.json, ...)")
    p.add_argument(
        "--encoder",
        default="minilm",
        help="lexical | minilm (offline default) | e5 | a sentence-transformers name or folder",
    )
    p.add_argument("--kind", default="flat", choices=["flat", "hnsw", "ivfpq"])
    p.add_argument("--hnsw-m", type=int, help="HNSW graph degree M (default 32)")
    p.add_argument("--ef-construction", type=int, help="HNSW efConstruction (default 200)")
    p.add_argument("--ef-search", type=int, help="HNSW efSearch (default 128)")
    p.add_argument("--nlist", type=int, help="IVF lists (default ~4 sqrt(n))")
    p.add_argument("--pq-m", type=int, help="PQ bytes per vector (default min(64, d/4) dividing d)")
    p.add_argument("--nprobe", type=int, help="IVF lists visited per query (default 32)")
    p.add_argument(
        "--refine",
        type=float,
        help="IVF-PQ: re-rank refine*k PQ candidates with the full vectors (default 0: off)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic corpus")
    p.add_argument(
        "--device",
        default="cpu",
        help="where a sentence-transformers encoder runs (cuda: for wiki-18 with e5)",
    )


def run_index(args) -> int:
    from rlvr.envs.searchqa.index import build_index
    from rlvr.envs.searchqa.synthetic import synthetic_task
    from rlvr.locks import FolderInUse

    params = {
        "hnsw": {
            "M": args.hnsw_m,
            "efConstruction": args.ef_construction,
            "efSearch": args.ef_search,
        },
        "ivfpq": {
            "nlist": args.nlist,
            "pq_m": args.pq_m,
            "nprobe": args.nprobe,
            "refine": args.refine,
        },
        "flat": {},
    }[args.kind]
    corpus = synthetic_task(args.seed)[0] if args.corpus == "synthetic" else args.corpus
    t0 = time.perf_counter()
    try:
        encoder = args.encoder
        if args.device != "cpu" and encoder not in ("lexical", "tfidf"):
            from rlvr.envs.searchqa.encoders import get_encoder

            encoder = get_encoder(encoder, device=args.device)
        index = build_index(
            corpus, encoder=encoder, kind=args.kind, params=params, out_dir=args.out
        )
    except (FileNotFoundError, ValueError, ImportError, OSError, FolderInUse) as e:
        print(f"rlvr index: {e}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "out": args.out,
                "passages": len(index),
                "kind": index.kind,
                "params": index.params,
                "encoder": index.encoder.spec(),
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
    )
    return 0


def add_retrieval_serve_arguments(p: argparse.ArgumentParser) -> None:
    from dataclasses import fields

    from rlvr.envs.searchqa.limits import LIMITS

    p.add_argument("--index", required=True, help="folder written by `rlvr index`")
    p.add_argument("--corpus", help="passages JSONL, overriding the one recorded in the index")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="bind address (default loopback; the service has no auth)",
    )
    p.add_argument("--port", type=int, default=8000, help="TCP port, 0-65535 (0: any free one)")
    p.add_argument("--topk", type=int, default=3, help="top-k when a request gives none")
    p.add_argument(
        "--no-mmap",
        action="store_true",
        help="read the index into memory instead of memory-mapping it",
    )
    p.add_argument(
        "--faiss-gpu",
        action="store_true",
        help="search on every visible GPU (a FAISS GPU build; flat or ivfpq: fp16 vectors "
        "sharded across the GPUs, as Search-R1's retrieval_server.py)",
    )
    limits = p.add_argument_group("limits (what one client may cost the service)")
    for f in fields(LIMITS):
        default = getattr(LIMITS, f.name)
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        if f.name.endswith("_bytes"):
            shown += (
                f" = {default / 2**10:g} KiB" if default < 2**20 else f" = {default / 2**20:g} MiB"
            )
        limits.add_argument(
            "--" + f.name.replace("_", "-"),
            type=type(default),
            default=default,
            metavar="N" if isinstance(default, int) else "S",
            help=f"{f.metadata['help']} (default {shown})",
        )


def run_retrieval_serve(args) -> int:
    from dataclasses import fields

    from rlvr.envs.searchqa.index import load_index
    from rlvr.envs.searchqa.limits import LIMITS, ServerLimits
    from rlvr.envs.searchqa.server import make_server

    def fail(message: str) -> int:
        print(f"rlvr retrieval-serve: {message}", file=sys.stderr)
        return 2

    try:
        limits = ServerLimits(**{f.name: getattr(args, f.name) for f in fields(LIMITS)})
    except ValueError as e:
        return fail(f"--{str(e).replace('_', '-')}")
    if not 1 <= args.topk <= limits.max_topk:
        return fail(f"--topk must be in [1, {limits.max_topk}], got {args.topk}")
    if not 0 <= args.port <= 65535:
        return fail(f"--port must be in [0, 65535], got {args.port}")
    try:
        index = load_index(args.index, corpus=args.corpus, mmap=not args.no_mmap)
    except (FileNotFoundError, ValueError, ImportError, OSError) as e:
        return fail(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    if args.faiss_gpu:
        try:
            index.use_gpu()
        except (ValueError, RuntimeError) as e:
            return fail(f"--faiss-gpu: {str(e).strip().splitlines()[0][:300]}")
    try:
        server = make_server(index, args.host, args.port, args.topk, limits)
    except (OSError, OverflowError) as e:  # port taken, address not local, no permission
        return fail(
            f"cannot listen on {args.host}:{args.port}: {getattr(e, 'strerror', None) or e}"
        )
    host, port = server.server_address[:2]
    print(
        f"serving {len(index)} passages ({index.kind}{', GPU' if args.faiss_gpu else ''}) at "
        f"http://{host}:{port}/retrieve",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
