"""``rlvr machine``: this machine as results record it, and per-kernel fingerprints.

Fingerprints: the SHA-256 of the outputs of each CPU kernel a tiny build and an RL
step use, so that two machines' fingerprints show which kernels give other bits.

``rlvr machine --fingerprint`` prints this machine's, under the kernel mode it runs
(``rlvr --kernels mkl-avx2 machine --fingerprint`` for another mode); ``--against FILE`` lists
the kernels whose outputs differ from a fingerprint saved by another machine. The committed ones
are in ``docs/fingerprints/`` (each names its processor). Inputs come from a fixed seed, and each
case is small (the whole fingerprint takes seconds): GEMMs at the tiny bases' shapes (hidden 128,
MLP 384, vocabulary 1,024, 8 x 256 tokens), a linear layer's forward and backward, attention,
softmax, RMSNorm, the pointwise functions the model and the loss use, reductions, the
cross-entropy and its gradient, the embedding gradient, AdamW and gradient clipping, weight
initialisation, sampling, a BPE tokenizer trained and applied on fixed text, and one whole
training step of a micro model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from rlvr.files import RecordError, read_json_object
from rlvr.models.micro import build_micro  # rlvr.models installs the mode's kernels
from rlvr.repro import machine_info


def _h(x) -> str:
    if isinstance(x, torch.Tensor):
        data = x.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    else:
        data = json.dumps(x).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _cases() -> dict[str, Callable[[torch.Generator], Any]]:
    r = lambda g, *s: torch.randn(*s, generator=g)  # noqa: E731
    cases: dict[str, Callable[[torch.Generator], Any]] = {}
    for m, k, n in [(2048, 128, 384), (2048, 384, 128), (2048, 128, 1024), (32, 128, 1024)]:
        cases[f"mm {m}x{k}x{n}"] = lambda g, m=m, k=k, n=n: r(g, m, k) @ r(g, k, n)

    def linear(g):
        x, w, b = (r(g, 2048, 128).requires_grad_(), r(g, 384, 128).requires_grad_(), r(g, 384))
        y = F.linear(x, w, b)
        y.square().sum().backward()
        return [_h(y), _h(x.grad), _h(w.grad)]

    def attention(g):
        q, k, v = (r(g, 8, 4, 256, 32).requires_grad_() for _ in range(3))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.sum().backward()
        return [_h(o), _h(q.grad), _h(k.grad)]

    def rmsnorm(g):
        x = r(g, 2048, 128)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def cross_entropy(g):
        logits = r(g, 2048, 1024).requires_grad_()
        target = torch.randint(0, 1024, (2048,), generator=g)
        loss = F.cross_entropy(logits, target)
        loss.backward()
        return [_h(loss), _h(logits.grad)]

    def embedding(g):
        emb = torch.nn.Embedding(1024, 128)
        torch.nn.init.normal_(emb.weight, generator=g)
        ids = torch.randint(0, 1024, (8, 256), generator=g)
        emb(ids).square().sum().backward()
        return emb.weight.grad

    def adamw(g):
        p = torch.nn.Parameter(r(g, 1024, 128))
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01)
        for _ in range(3):
            p.grad = r(g, 1024, 128)
            opt.step()
        return p

    def sqrt(g):
        x = r(g, 100_003).abs()
        return [_h(torch.sqrt(x)), _h(x.sqrt_())]

    def clip(g):
        ps = [torch.nn.Parameter(r(g, 1024, 128)), torch.nn.Parameter(r(g, 384))]
        for p in ps:
            p.grad = r(g, *p.shape) * 10
        norm = torch.nn.utils.clip_grad_norm_(ps, 1.0)
        return [_h(norm), _h(ps[0].grad)]

    def sampling(g):
        probs = r(g, 64, 1024).softmax(-1)
        return torch.multinomial(probs, 4, replacement=True, generator=g)

    def init(g):
        w = torch.empty(1024, 128)
        torch.nn.init.normal_(w, std=0.02, generator=g)
        return w

    cases.update(
        {
            "linear fwd/dx/dw": linear,
            "sdpa fwd/dq/dk": attention,
            "softmax": lambda g: r(g, 512, 1024).softmax(-1),
            "log_softmax": lambda g: r(g, 512, 1024).log_softmax(-1),
            "exp": lambda g: torch.exp(r(g, 100_003)),
            "log": lambda g: torch.log(r(g, 100_003).abs() + 1e-3),
            "tanh": lambda g: torch.tanh(r(g, 100_003)),
            "sigmoid": lambda g: torch.sigmoid(r(g, 100_003)),
            "silu": lambda g: F.silu(r(g, 100_003)),
            "rsqrt": lambda g: torch.rsqrt(r(g, 100_003).abs() + 1e-3),
            "sqrt/sqrt_": sqrt,
            "sum 1e6": lambda g: r(g, 1_000_000).sum(),
            "mean rows": lambda g: r(g, 1000, 1000).mean(-1),
            "rmsnorm": rmsnorm,
            "cross_entropy/grad": cross_entropy,
            "embedding grad": embedding,
            "adamw 3 steps": adamw,
            "clip_grad_norm norm/grad": clip,
            "normal_ init": init,
            "multinomial": sampling,
            "tokenizer": lambda g: _tokenizer(),
            "micro train step": lambda g: _train_step(),
        }
    )
    return cases


def _tokenizer() -> list[list[int]]:
    """A byte-level BPE trained on fixed text (as ``rlvr.models.tokenizer`` trains the tiny
    bases' one), then applied to other fixed text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = [
        f"(1) Person {i} is a knight. <think> {i} + {i} = {2 * i} </think>" for i in range(99)
    ]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    return [tok.encode(t).ids for t in ("Zoey says that Oliver is a knave.", "12 + 7 = 19")]


def _train_step() -> torch.Tensor:
    """One forward, backward, clipping and AdamW step of a seeded micro model."""
    model, tok = build_micro(seed=0)
    ids = torch.randint(0, len(tok), (4, 64), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=ids, labels=ids).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def fingerprint() -> dict[str, Any]:
    """``{"machine": machine_info(), "ops": {name: sha256[:16] or [..]}}`` for this process."""
    ops: dict[str, Any] = {}
    for name, case in _cases().items():
        out = case(torch.Generator().manual_seed(0))
        ops[name] = out if isinstance(out, list) and isinstance(out[0], str) else _h(out)
    return {"machine": machine_info(), "torch": torch.__version__, "ops": ops}


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The kernels whose outputs differ between two fingerprints (missing ones included)."""
    a, b = ours["ops"], theirs["ops"]
    return [name for name in dict.fromkeys([*a, *b]) if a.get(name) != b.get(name)]


def compare_line(ours: dict[str, Any], theirs: dict[str, Any], label: str) -> str:
    diff = differences(ours, theirs)
    mode = theirs.get("machine", {}).get("kernel_mode", "?")
    cpu = theirs.get("machine", {}).get("cpu", "?")
    head = f"against {label} ({cpu}, {mode} kernels): "
    if not diff:
        return head + f"all {len(ours['ops'])} kernels give the same bits"
    return head + f"{len(diff)} of {len(ours['ops'])} differ: {', '.join(diff)}"


def load(path: str | Path) -> dict[str, Any]:
    """A saved fingerprint, read as a record (``rlvr.files``: a FIFO, a device, bad JSON... is
    one ``RecordError`` line) that must hold an ``ops`` object."""
    found = read_json_object(path)
    if not isinstance(found.get("ops"), dict) or not isinstance(found.get("machine", {}), dict):
        raise RecordError(f"{path} is not a fingerprint (no 'ops' object); refused")
    return found


def _worker_info() -> dict[str, Any]:
    return machine_info()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--worker",
        action="store_true",
        help="also report what a worker process (spawned as rlvr reproduce --jobs spawns them) "
        "sees",
    )
    parser.add_argument(
        "--fingerprint",
        action="store_true",
        help="the SHA-256 of each CPU kernel's outputs on fixed inputs (seconds)",
    )
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="FILE",
        help="with --fingerprint: list the kernels whose bits differ from a saved fingerprint "
        "(repeatable; docs/fingerprints/ holds the committed ones)",
    )


def run(args) -> int:
    """``rlvr machine``: this machine as every result records it (or its fingerprint), as JSON."""
    if args.against and not args.fingerprint:
        raise SystemExit("rlvr machine: --against compares fingerprints: add --fingerprint")
    info: dict[str, Any] = fingerprint() if args.fingerprint else machine_info()
    if args.worker:
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            info["worker"] = pool.submit(_worker_info).result()
    print(json.dumps(info, indent=2))
    for path in args.against:
        print(compare_line(info, load(path), path))  # a bad file: one RecordError line
    return 0


__all__ = ["compare_line", "differences", "fingerprint", "load"]
