"""Curves of the SmolLM2 RL runs (``profile=smol env=math``) from their ``metrics.jsonl``.

    python results/smollm2/history/plot.py RUNS_DIR [BASE_EVAL_DIR] [NAME] [TITLE]

``RUNS_DIR`` holds one folder per algorithm (``grpo``, ``grpo_sg``) as ``rlvr train`` wrote
them; ``BASE_EVAL_DIR`` is the ``rlvr eval`` of the base on the same held-out tasks
(``eval.sh synthetic1_prefill``), drawn at step 0. Writes ``rl_curves.csv`` and
``rl_curves.png`` here (or ``NAME.csv`` and ``NAME.png``, the plot titled ``TITLE``): the
training reward (mean over the step's 32 episodes) and the held-out
greedy and sampled accuracy (math-verify's) on the first 32 test tasks, per step. No model is
run.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
KEYS = (
    "reward/mean",
    "accuracy",
    "response_length",
    "eval/greedy_accuracy",
    "eval/sampled_accuracy",
    "time/step_s",
)


def base_row(folder: Path) -> dict:
    records = [json.loads(x) for x in (folder / "responses.jsonl").read_text().splitlines()]
    greedy = [r["correct"] for r in records if r["mode"] == "greedy"]
    sampled = [r["correct"] for r in records if r["mode"] == "sample"]
    return {
        "eval/greedy_accuracy": sum(greedy) / len(greedy),
        "eval/sampled_accuracy": sum(sampled) / len(sampled),
    }


def main() -> int:
    runs = Path(sys.argv[1])
    base = base_row(Path(sys.argv[2])) if len(sys.argv) > 2 else {}
    name = sys.argv[3] if len(sys.argv) > 3 else "rl_curves"
    title = sys.argv[4] if len(sys.argv) > 4 else "profile=smol env=math"
    csv_path, png_path = HERE / f"{name}.csv", HERE / f"{name}.png"
    rows = []
    for run in sorted(p for p in runs.iterdir() if (p / "metrics.jsonl").exists()):
        if base:
            rows.append({"algo": run.name, "step": 0, **base})
        for line in (run / "metrics.jsonl").read_text().splitlines():
            m = json.loads(line)
            rows.append({"algo": run.name, "step": m["step"], **{k: m.get(k) for k in KEYS}})
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["algo", "step", *KEYS])
        w.writeheader()
        w.writerows(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for algo in sorted({r["algo"] for r in rows}):
        mine = [r for r in rows if r["algo"] == algo]
        train = [r for r in mine if r.get("reward/mean") is not None]
        axes[0].plot(
            [r["step"] for r in train], [r["reward/mean"] for r in train], "o-", label=algo
        )
        ev = [r for r in mine if r.get("eval/greedy_accuracy") is not None]
        for key, style in (("eval/greedy_accuracy", "o-"), ("eval/sampled_accuracy", "s--")):
            axes[1].plot(
                [r["step"] for r in ev],
                [r[key] for r in ev],
                style,
                label=f"{algo} {key.split('/')[1].split('_')[0]}",
            )
    axes[0].set(xlabel="step", ylabel="training reward (mean)", title="train: synthetic level 1")
    axes[1].set(xlabel="step", ylabel="accuracy", title="held out: 32 test tasks")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"SmolLM2-135M-Instruct, {title} (Intel Xeon, 2 cores)", fontsize=9)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    print(f"wrote {csv_path} and {png_path} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
