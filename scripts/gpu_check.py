"""The native trainer on a GPU, checked against a CPU fp32 run (run it through gpu_check.sh).

1. Base: the micro model (byte tokenizer, ~0.3M parameters) warm-started on the device with
   the project's SFT (``rlvr.models.sft``) on 2-person K&K traces that answer without a chain of
   thought, 300 steps at a time until its sampled answers differ in reward (GRPO learns nothing
   from groups of equal rewards), at most 1,200 steps.
2. Numerics: teacher-forced log-probs of the base on the device under bf16 autocast against
   CPU fp32 (``rlvr.agents.policy.response_token_stats``), and the gradient of their sum with
   gradient checkpointing on (cosine to the fp32 gradient).
3. Training: ``Trainer`` with ``device=cuda dtype=bfloat16 gradient_checkpointing=true``,
   ``algo=grpo_sg`` for 30 steps, and a CPU fp32 run of the same seed for 2 steps. Checked:
   step 1 of both agrees within sampling noise (reward, mean token log-prob), every loss and
   gradient norm is finite, the parameters stay fp32 (master weights of mixed precision); one
   step with checkpointing peaks lower than one without.
4. Updates: the trainer's own update (``Trainer.updater``: autocast, checkpointing, AdamW on the
   fp32 master weights) on a fixed batch of SFT traces with fixed advantages (+1 / -1 by
   sequence), so that the gradient never depends on the sampled rewards: one update at the
   run's lr must move the parameters, and three at lr 1e-5 must too (a bf16 copy of the weights
   would round those updates away).
5. Prints step time, tokens/s and peak memory; exits 1 when a check fails.

Every check means the same whatever rewards the base's samples get (a base whose groups all
have equal rewards gives GRPO no gradient, so no check reads the rollouts' gradient).

Without CUDA (or with ``GPU_CHECK_DEVICE=cpu``) a reduced variant runs everything on the CPU in
fp32 (2 SFT steps, short runs, no memory comparison) in about a minute; the test suite runs it
(``tests/test_gpu_check.py``), so that this file cannot rot.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

KK = {"n_people": [2], "template": "plain", "prefill_think": True, "system_prompt": ""}
FAILURES: list[str] = []


def log(msg: str) -> None:
    print(f"[gpu-check] {msg}", flush=True)


def check(ok: bool, what: str) -> None:
    log(f"{'PASS' if ok else 'FAIL'} {what}")
    if not ok:
        FAILURES.append(what)


def reward_spread(model, tok, n: int = 64) -> float:
    """Std of the K&K rewards of ``n`` sampled answers (GRPO needs unequal rewards to learn)."""
    from rlvr.agents.rollout.base import SamplingParams
    from rlvr.agents.rollout.hf import HFBackend
    from rlvr.agents.rollout.multiturn import run_episodes
    from rlvr.envs import warmstart

    envs = [warmstart.make_env("kk", KK, "train") for _ in range(n)]
    prompts = [e.reset(seed=i // 8)[0] for i, e in enumerate(envs)]
    eps = run_episodes(
        HFBackend(model, tok),
        tok,
        envs,
        prompts,
        SamplingParams(max_new_tokens=96),
        max_response_tokens=96,
        seed=0,
    )
    return float(torch.tensor([e.reward for e in eps]).std())


def build_base(out: Path, steps: int, device: torch.device, rounds: int) -> Path:
    """Micro + SFT in rounds of ``steps`` until sampled rewards differ (at most ``rounds``; with
    one round, no sampling: the checks do not need the spread, only a realistic GPU run does)."""
    from rlvr.envs import warmstart
    from rlvr.models import load_model
    from rlvr.models.sft import SFTConfig, sft

    t0 = time.perf_counter()
    model, tok = load_model("micro", seed=0)
    model.to(device)
    stream = warmstart.example_stream("kk", {**KK, "think": "none"}, seed=0)
    for r in range(rounds):
        stats = sft(
            model,
            tok,
            stream,
            SFTConfig(
                steps=steps,
                batch_size=32 if steps > 10 else 4,
                lr=3e-3,
                warmup_steps=min(10, steps // 2),
                seed=r,
                max_length=1024,
            ),
            progress=False,
        )
        spread = reward_spread(model, tok) if rounds > 1 else float("nan")
        log(
            f"base: micro + {(r + 1) * steps} SFT steps on {device.type} "
            f"({time.perf_counter() - t0:.1f} s, loss {stats['loss_ema']}); sampled reward std "
            f"{spread:.3f}"
        )
        if not spread == 0:  # above zero, or not measured
            break
    model.to("cpu").save_pretrained(out)
    tok.save_pretrained(out)
    return out


def fixed_batch(tok, n: int = 8) -> list[tuple[list[int], list[int]]]:
    from rlvr.envs import warmstart

    stream = warmstart.example_stream("kk", {**KK, "think": "none"}, seed=123)
    out = []
    for _ in range(n):
        segs = next(stream)
        prompt = "".join(t for t, train in segs if not train)
        resp = "".join(t for t, train in segs if train)
        out.append((tok(prompt)["input_ids"], tok(resp, add_special_tokens=False)["input_ids"]))
    return out


def teacher_forced(model, batch, device: torch.device, autocast: bool, grad: bool):
    """Log-probs of each fixed response, and (``grad``) the gradient of their sum."""
    from rlvr.agents.policy import response_token_stats

    model.zero_grad(set_to_none=True)
    lps = []
    ctx = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if autocast
        else torch.autocast(device.type, enabled=False)
    )
    with torch.set_grad_enabled(grad), ctx:
        for prompt, resp in batch:
            ids = torch.tensor([prompt + resp], device=device)
            stats = response_token_stats(model, ids, torch.ones_like(ids), len(resp))
            if grad:
                stats.logprobs.float().sum().backward()
            lps.append(stats.logprobs.detach().float().cpu()[0])
    g = (
        torch.cat(
            [
                p.grad.detach().float().cpu().flatten()
                for p in model.parameters()
                if p.grad is not None
            ]
        )
        if grad
        else None
    )
    return torch.cat(lps), g


def numerics(base: Path, device: torch.device) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    batch = fixed_batch(tok)
    ref = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    ref.train()
    lp_ref, g_ref = teacher_forced(ref, batch, torch.device("cpu"), False, True)
    dev = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).to(device)
    dev.gradient_checkpointing_enable()
    dev.train()
    mixed = device.type == "cuda"
    lp_dev, g_dev = teacher_forced(dev, batch, device, mixed, True)
    diff = (lp_dev - lp_ref).abs()
    cos = float(torch.nn.functional.cosine_similarity(g_dev, g_ref, dim=0))
    log(
        f"teacher-forced log-probs ({'bf16 autocast' if mixed else 'fp32'} vs CPU fp32, "
        f"{lp_ref.numel()} tokens): mean |diff| {diff.mean():.4f}, max {diff.max():.4f}; "
        f"gradient cosine with checkpointing {cos:.5f}"
    )
    check(float(diff.mean()) < (0.05 if mixed else 1e-4), "log-probs agree with CPU fp32")
    check(cos > (0.99 if mixed else 0.99999), "gradient (checkpointed) agrees with CPU fp32")


def train(
    base: Path,
    out: Path,
    *,
    device: str,
    dtype: str,
    steps: int,
    ckpt: bool,
    prompts: int,
    group: int,
    response: int = 96,
    **extra,
):
    trainer = make_trainer(
        base,
        out,
        device=device,
        dtype=dtype,
        gradient_checkpointing=ckpt,
        steps=steps,
        prompts_per_step=prompts,
        group_size=group,
        rollout={"max_prompt_tokens": 384, "max_response_tokens": response},
        **extra,
    )
    start = snapshot(trainer)
    t0 = time.perf_counter()
    records = trainer.train()
    wall = time.perf_counter() - t0
    return records, moved_share(trainer, start), param_dtypes(trainer), wall


def make_trainer(base: Path, out: Path, **overrides):
    """The trainer of the check: GRPO-SG on K&K with the micro profile on ``base``, with
    ``overrides`` (device, dtype, batch shape...) on top."""
    from rlvr.training.train_config import load_train_config
    from rlvr.training.trainer import Trainer

    cfg = {
        "profile": "micro",
        "env": "kk",
        "algo": "grpo_sg",
        "model": str(base),
        "seed": 0,
        "out": str(out),
        "num_threads": 0,
        "progress": False,
        "save_every": 0,
        "env_kwargs": dict(KK),
    }
    return Trainer(load_train_config({**cfg, **overrides}))


def snapshot(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().float().cpu().clone() for n, p in trainer.model.named_parameters()}


def moved_share(trainer, start: dict[str, torch.Tensor]) -> float:
    """The share of parameters that differ from ``start``."""
    moved = sum(
        int((p.detach().float().cpu() != start[n]).sum())
        for n, p in trainer.model.named_parameters()
    )
    return moved / sum(v.numel() for v in start.values())


def param_dtypes(trainer) -> set[str]:
    return {str(p.dtype) for p in trainer.model.parameters()}


def fixed_update(base: Path, out: Path, *, device: str, dtype: str, updates: int, **extra):
    """``updates`` calls of the trainer's own update (``Trainer.updater``) on the fixed batch of
    SFT traces with fixed advantages (+1 / -1 by sequence); returns the share of parameters that
    changed, the last update's metrics and the parameter dtypes."""
    from transformers import AutoTokenizer

    from rlvr.agents.rollout.base import collate

    tok = AutoTokenizer.from_pretrained(base)
    batch = fixed_batch(tok)
    prompts, responses = [p for p, _ in batch], [r for _, r in batch]
    rollout = collate(
        prompts,
        responses,
        [[1] * len(r) for r in responses],
        [[0.0] * len(r) for r in responses],
        ["eos"] * len(batch),
        tok.pad_token_id if tok.pad_token_id is not None else 0,
    )
    advantages = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(batch))])
    trainer = make_trainer(
        base,
        out,
        device=device,
        dtype=dtype,
        gradient_checkpointing=True,
        prompts_per_step=len(batch),
        group_size=1,
        rollout={"max_prompt_tokens": 1024, "max_response_tokens": rollout.n_response},
        **extra,
    )
    start = snapshot(trainer)
    for step in range(1, updates + 1):
        metrics = trainer.updater.update(rollout, advantages, step)
    return moved_share(trainer, start), metrics, param_dtypes(trainer)


def summary(records) -> str:
    r = records[0]
    return (
        f"reward {r['reward/mean']:.3f} (std {r['reward/std']:.3f}), logprob/mean "
        f"{r['logprob/mean']:.3f}, response_length {r['response_length']:.1f}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=os.environ.get("GPU_CHECK_DEVICE", "auto"))
    p.add_argument("--work", default=None, help="folder for the base and the runs (default: tmp)")
    args = p.parse_args()
    cuda = torch.cuda.is_available() and args.device != "cpu"
    device = torch.device("cuda" if cuda else "cpu")
    full = cuda
    log(
        f"device {torch.cuda.get_device_name(0) if cuda else 'cpu'}; torch {torch.__version__}; "
        f"{'full check' if full else 'reduced CPU variant'}"
    )
    work = Path(args.work or tempfile.mkdtemp(prefix="rlvr-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    base = build_base(work / "base", 300 if full else 2, device, rounds=4 if full else 1)
    numerics(base, device)

    steps, prompts, group, response = (30, 16, 8, 96) if full else (2, 2, 2, 24)
    dtype = "bfloat16" if cuda else "float32"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    recs, moved, dtypes, wall = train(
        base,
        work / "dev",
        device=device.type,
        dtype=dtype,
        steps=steps,
        ckpt=True,
        prompts=prompts,
        group=group,
        response=response,
    )
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan")
    step_s = [r["time/step_s"] for r in recs]
    log(
        f"{device.type} {dtype} + checkpointing: {steps} steps in {wall:.1f} s; step time "
        f"median {sorted(step_s)[len(step_s) // 2]:.3f} s; tokens/s "
        f"{sum(r['tokens/s'] for r in recs) / len(recs):.0f}; peak memory {peak:.0f} MiB"
    )
    log(
        f"step 1 on {device.type}: {summary(recs)}; last step reward {recs[-1]['reward/mean']:.3f}"
        f"; {moved:.1%} of parameters changed over the run (share of groups with equal rewards "
        f"at step 1: {recs[0]['groups/zero_std']:.2f})"
    )
    finite = all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in recs)
    check(finite, "every loss and gradient norm is finite")
    check(dtypes == {"torch.float32"}, f"parameters stay fp32 under dtype={dtype} ({dtypes})")

    cpu_recs, _, _, _ = train(
        base,
        work / "cpu",
        device="cpu",
        dtype="float32",
        steps=1,
        ckpt=False,
        prompts=prompts,
        group=group,
        response=response,
    )
    log(f"step 1 on cpu fp32: {summary(cpu_recs)}")
    a, b = recs[0], cpu_recs[0]
    check(
        abs(a["reward/mean"] - b["reward/mean"]) <= (1.0 if cuda else 1e-6),
        "step-1 reward agrees with the CPU fp32 run (same seed; sampling noise on GPU)",
    )
    check(
        abs(a["logprob/mean"] - b["logprob/mean"]) <= (0.3 if cuda else 1e-4),
        "step-1 mean token log-prob agrees with the CPU fp32 run",
    )

    # The updates, on fixed advantages: meaningful whatever the base's rewards.
    share, last, dtypes = fixed_update(
        base, work / "fixed", device=device.type, dtype=dtype, updates=1
    )
    check(
        math.isfinite(last["loss"]) and last["grad_norm"] > 0 and share > 0.5,
        f"an update on fixed advantages moves the weights ({share:.1%} of parameters changed; "
        f"grad norm {last['grad_norm']:.3g}, parameters {sorted(dtypes)})",
    )
    share, last, _ = fixed_update(
        base, work / "small-lr", device=device.type, dtype=dtype, updates=3, optim={"lr": 1e-5}
    )
    check(
        last["update/optimizer_steps"] >= 1 and share > 0.5,
        f"lr 1e-5 updates are kept ({share:.1%} of parameters changed after 3 updates on fixed "
        "advantages; bf16 weights would round them away)",
    )

    if cuda:
        peaks = {}
        for ckpt in (False, True):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            train(
                base,
                work / f"mem-{ckpt}",
                device="cuda",
                dtype=dtype,
                steps=1,
                ckpt=ckpt,
                prompts=32,
                group=8,
                rollout={"max_prompt_tokens": 384, "max_response_tokens": 256},
            )
            peaks[ckpt] = torch.cuda.max_memory_allocated() / 2**20
        log(
            f"one step, 256 episodes: peak {peaks[False]:.0f} MiB without checkpointing, "
            f"{peaks[True]:.0f} MiB with"
        )
        check(peaks[True] < 0.9 * peaks[False], "gradient checkpointing lowers peak memory")
    print(
        json.dumps(
            {
                "device": device.type,
                "failures": FAILURES,
                "steps": steps,
                "peak_MiB": None if not cuda else round(peak),
            }
        ),
        flush=True,
    )
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
