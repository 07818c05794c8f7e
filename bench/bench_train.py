"""One GRPO training step (rollout + update) of rlvr vs TRL's ``GRPOTrainer``, and rlvr's rollout
backend vs plain ``model.generate``, side by side on this CPU.

    python bench/bench_train.py [--model micro] [--prompts 4] [--group 8] [--max-new 64]

Both trainers get the same model (same seed), the same prompts (K&K puzzles, plain template), the
same group size, completion length, sampling temperature, reward function, learning rate, KL
coefficient and clip; fp32, no gradient checkpointing (docs/design.md §8: TRL's CPU defaults of
bf16 and gradient checkpointing would make TRL ~10x slower, which is not a fair comparison).
Each measurement runs in its own forked process so that its peak RSS (``ru_maxrss``) is its own;
the first step is a warm-up and the median of the following steps is reported. Needs
``pip install trl==1.16.0`` for the TRL column.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import time


def rss_now_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def letter_reward(text: str) -> float:
    """The shared reward: share of ASCII letters in the completion (varies under a random model,
    so advantages and gradients are non-zero)."""
    return sum(c.isascii() and c.isalpha() for c in text) / max(1, len(text))


def bench_prompts(n: int) -> list[str]:
    import gymnasium as gym

    import rlvr  # noqa: F401  (registers the envs)

    env = gym.make("rlvr/KnightsKnaves-v0", n_people=3)
    out = []
    for i in range(n):
        _, info = env.reset(seed=i, options={"index": i})
        out.append(f"User: {info['quiz']}\nAssistant: <think>")
    return out


def _child(fn, args, queue):
    import torch

    torch.set_num_threads(args.threads)
    start = rss_now_mib()
    try:
        result = fn(args)
        result.update(peak_rss_mib=peak_rss_mib(), rss_start_mib=start)
    except Exception as e:  # report, do not hang the parent
        result = {"error": f"{type(e).__name__}: {e}"}
    queue.put(result)


def run_isolated(fn, args) -> dict:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(fn, args, q))
    p.start()
    result = q.get()
    p.join()
    return result


# ---------------------------------------------------------------------------------------------
# training step


def ours_step(args) -> dict:
    import gymnasium as gym

    from rlvr.envs.base import AnyText
    from rlvr.models import load_model
    from rlvr.training.train_config import load_train_config
    from rlvr.training.trainer import Trainer

    prompts = bench_prompts(args.prompts * (args.steps + 1))

    class PromptEnv(gym.Env):
        observation_space = AnyText(100_000)
        action_space = AnyText(100_000)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return prompts[options["index"] % len(prompts)], {}

        def step(self, action):
            r = letter_reward(action)
            return "", r, True, False, {"correct": r > 0.5}

    cfg = load_train_config(
        {
            "env": "kk",
            "algo": "grpo",
            "out": tempfile.mkdtemp(),
            "prompts_per_step": args.prompts,
            "group_size": args.group,
            "steps": args.steps + 1,
            "progress": False,
            "rollout": {
                "max_response_tokens": args.max_new,
                "max_prompt_tokens": 1024,
                "temperature": 1.0,
            },
            "optim": {"lr": args.lr, "grad_clip": 1.0},
            "loss": {"kl_coef": args.beta, "clip_low": 0.2, "clip_high": 0.2, "dual_clip": None},
            "track_kl": args.beta > 0,
            "eval": {"every": 0},
        }
    )
    model, tok = load_model(args.model, seed=0)
    trainer = Trainer(cfg, model=model, tokenizer=tok, make_env=lambda split: PromptEnv())
    times, lengths = [], []
    for _ in range(args.steps + 1):
        t0 = time.perf_counter()
        rec = trainer.train_step()
        trainer.step = rec["step"]
        times.append(time.perf_counter() - t0)
        lengths.append(rec["response_length"])
    return {
        "step_s": statistics.median(times[1:]),
        "completion_len": statistics.mean(lengths[1:]),
        "rollout_s": rec["time/rollout_s"],
        "update_s": rec["time/update_s"],
    }


def trl_step(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.models import load_model

    prompts = bench_prompts(args.prompts * (args.steps + 1))
    model, tok = load_model(args.model, seed=0)
    # TRL derives a model id from the model's path: give it a real local one.
    saved = tempfile.mkdtemp()
    model.save_pretrained(saved)
    tok.save_pretrained(saved)
    model.config._name_or_path = saved
    model.name_or_path = saved
    times: list[float] = []
    lengths: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    def reward(completions, **kw):
        return [letter_reward(c) for c in completions]

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group,
        max_completion_length=args.max_new,
        temperature=1.0,
        learning_rate=args.lr,
        beta=args.beta,
        epsilon=0.2,
        num_iterations=1,
        max_steps=args.steps + 1,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_dropout=True,
        shuffle_dataset=False,
        dataloader_num_workers=0,
        seed=0,
        loss_type="dapo",
        max_grad_norm=1.0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tok,
        callbacks=[Timer()],
    )
    torch.manual_seed(0)
    trainer.train()
    return {
        "step_s": statistics.median(times[1:]),
        "completion_len": statistics.mean(lengths[1:]) if len(lengths) > 1 else float("nan"),
    }


# ---------------------------------------------------------------------------------------------
# rollout throughput


def _contexts(args, tok):
    prompts = bench_prompts(args.prompts)
    return [tok(p)["input_ids"] for p in prompts for _ in range(args.group)]


def ours_rollout(args) -> dict:
    from rlvr.agents.rollout.base import SamplingParams
    from rlvr.agents.rollout.hf import HFBackend
    from rlvr.models import load_model

    model, tok = load_model(args.model, seed=0)
    ctx = _contexts(args, tok)
    backend = HFBackend(model, tok)
    sp = SamplingParams(max_new_tokens=args.max_new, temperature=1.0)
    backend.generate(ctx, sp, seed=0)
    tokens, elapsed = 0, 0.0
    for r in range(args.repeats):
        t0 = time.perf_counter()
        gen = backend.generate(ctx, sp, seed=r + 1)
        elapsed += time.perf_counter() - t0
        tokens += sum(len(t) for t in gen.token_ids)
    return {"tokens_s": tokens / elapsed, "tokens": tokens / args.repeats}


def generate_rollout(args) -> dict:
    import torch

    from rlvr.models import load_model

    model, tok = load_model(args.model, seed=0)
    ctx = _contexts(args, tok)
    width = max(map(len, ctx))
    ids = torch.full((len(ctx), width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, c in enumerate(ctx):
        ids[i, width - len(c) :] = torch.tensor(c)
        mask[i, width - len(c) :] = 1
    kw = dict(
        max_new_tokens=args.max_new,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=tok.pad_token_id,
    )
    model.generate(input_ids=ids, attention_mask=mask, **kw)
    tokens, elapsed = 0, 0.0
    for r in range(args.repeats):
        torch.manual_seed(r + 1)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, **kw)
        elapsed += time.perf_counter() - t0
        new = out[:, width:]
        for row in new.tolist():  # real tokens: up to and including the first eos
            tokens += (row.index(tok.eos_token_id) + 1) if tok.eos_token_id in row else len(row)
    return {"tokens_s": tokens / elapsed, "tokens": tokens / args.repeats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="micro", help="micro, a local directory, or a hub name")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    ap.add_argument("--repeats", type=int, default=3, help="timed rollouts")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--beta", type=float, default=0.001, help="KL coefficient (both trainers)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-trl", action="store_true")
    args = ap.parse_args()
    print(
        f"model={args.model} prompts={args.prompts} group={args.group} max_new={args.max_new} "
        f"threads={args.threads} beta={args.beta} (fp32, no gradient checkpointing)"
    )

    ours = run_isolated(ours_step, args)
    trl = {"error": "skipped"} if args.skip_trl else run_isolated(trl_step, args)
    print("\none training step (rollout + update), median of", args.steps, "after a warm-up")
    print(f"{'':>22}{'rlvr':>14}{'TRL GRPOTrainer':>18}")
    for key, fmt in (
        ("step_s", "{:.3f}"),
        ("completion_len", "{:.1f}"),
        ("peak_rss_mib", "{:.0f}"),
    ):
        row = [ours.get(key), trl.get(key)]
        print(
            f"{key:>22}"
            + "".join(
                f"{(fmt.format(v) if v is not None else '-'):>{w}}" for v, w in zip(row, (14, 18))
            )
        )
    if "error" in trl:
        print(f"TRL: {trl['error']}")
    elif "step_s" in ours:
        ratio = ours["step_s"] / trl["step_s"]
        print(f"rlvr / TRL wall time per step: {ratio:.2f}x (goal <= 0.5x)")
    if "error" in ours:
        print(f"rlvr: {ours['error']}")

    a = run_isolated(ours_rollout, args)
    b = run_isolated(generate_rollout, args)
    print(
        f"\nrollout of {args.prompts * args.group} sequences x {args.max_new} new tokens, "
        f"{args.repeats} repeats"
    )
    print(f"{'':>22}{'rlvr HFBackend':>16}{'model.generate':>16}")
    for key, fmt in (("tokens_s", "{:.0f}"), ("tokens", "{:.0f}"), ("peak_rss_mib", "{:.0f}")):
        print(
            f"{key:>22}{fmt.format(a.get(key, float('nan'))):>16}"
            f"{fmt.format(b.get(key, float('nan'))):>16}"
        )
    if "tokens_s" in a and "tokens_s" in b:
        print(f"rlvr / generate tokens/s: {a['tokens_s'] / b['tokens_s']:.2f}x (goal >= 1.5x)")


if __name__ == "__main__":
    main()
