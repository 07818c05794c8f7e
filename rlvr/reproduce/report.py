"""``REPORT.md``: every figure and table of a reproduction, the paper's numbers beside ours, seeds,
versions, compute time, and each of the paper's claims with the verdict the statistics gave. It
opens with its bottom line: the main claim's intervals and the count of each verdict.

Built only from the files the scripts wrote (``<name>.meta.json``, ``.md``, ``.png``,
``runs.csv`` and ``cost.csv``), so it can be regenerated at any time without rerunning anything
(``rlvr reproduce --report DIR``). It names no path of the machine that made it. Verdicts come
from the scripts' paired differences; nothing here decides a claim. A hand-written
``CHANGES.md`` in the folder (why verdicts moved against the previous results; ``rlvr reproduce
--compare`` lists which) is included as its own section.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rlvr.config import ConfigError
from rlvr.eval.stats import NOT_TESTABLE
from rlvr.files import atomic_write, read_text, write_text_atomic
from rlvr.prompt_format import describe
from rlvr.reproduce import paper_numbers
from rlvr.reproduce.common import Context, markdown_table
from rlvr.reproduce.cost import cost_line, cost_rows, read_cost, write_cost
from rlvr.reproduce.figures import FIGURES, report_order
from rlvr.reproduce.precision import CLAIMS_HEADER, claims_rows, restate
from rlvr.reproduce.records import load_meta

#: The heading of the claims table; ``rlvr.reproduce.compare`` reads the table back under it.
CLAIMS_HEADING = "## The paper's claims at this scale"
PLAIN = {
    "held": "held at this scale",
    "reversed": "did NOT hold: the opposite was observed at this scale",
    "underpowered": "was not decided at this scale: the interval includes no effect",
}


def plain(c: dict) -> str:
    """The verdict of claim ``c`` in words, with its MDE when underpowered."""
    v = c["verdict"]
    if v == NOT_TESTABLE:
        return (
            f"{v}: GRPO itself did not move this endpoint over the base (the evidence gives its "
            "gain), so a comparison of methods on it decides nothing"
        )
    if v.startswith("no effect beyond"):
        return f"{v} at this scale: the interval includes zero and lies inside ±{c['margin']:g}"
    text = PLAIN.get(v, v)
    if v == "underpowered" and "no power" in c.get("evidence", ""):
        return "was not decided at this scale: both methods score alike on every item (no power)"
    if v == "underpowered" and c.get("close"):
        text = f"was not decided at this scale: the interval crosses the margin ±{c['margin']:g}"
    elif v == "underpowered" and c.get("margin"):
        text += f" and reaches beyond ±{c['margin']:g}"
    if v == "underpowered":
        if c.get("mde") is not None and c["mde"] == c["mde"]:  # nan: unmeasured
            text += f"; only an effect of {c['mde']:.3f} or more would be seen at 80% power"
    return text


def _strip_header(text: str) -> str:
    lines = text.splitlines()
    if lines and lines[0].startswith("<!--"):
        lines = lines[1:]
    return "\n".join("#" + line if line.startswith("#") else line for line in lines)


#: The paper's main claim: the report's bottom line states its intervals first.
HEADLINE = "GRPO-SG beats GRPO"


def read_metas(out: Path) -> dict[str, dict]:
    """The ``<name>.meta.json`` files of a results folder, in report order (the registered
    figures, each declaring its caption and place)."""
    return {
        name: load_meta(out / f"{name}.meta.json")
        for name in report_order()
        if (out / f"{name}.meta.json").exists()
    }


def bottom_line(claims: list[dict]) -> list[str]:
    """The report's first lines: the main claim's paired differences with their 95% intervals
    per setting, then how many claims got each verdict."""
    if not claims:
        return []

    def interval(c: dict) -> str:
        mean, low, high = (c.get(k) for k in ("diff_mean", "diff_low", "diff_high"))
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (mean, low, high)):
            return c["verdict"]
        return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}], {c['verdict']}"

    head = [c for c in claims if c["claim"] == HEADLINE]
    text = ""
    if head:
        text = f"{HEADLINE}, the paper's main claim: " + "; ".join(
            f"{c['setting']} {interval(c)}" for c in head
        )
        text += " (paired difference in greedy accuracy, 95% interval). "
    counts = Counter(c["verdict"] for c in claims)
    text += f"Of the {len(claims)} claims checked at this scale: " + ", ".join(
        f"{n} {v}" for v, n in counts.most_common()
    )
    return ["## Bottom line", "", text + " (the claims table below).", ""]


def header_lines(
    metas: dict[str, dict], cost: list[dict], generated: str, wall_s, runs: Sequence[dict] = ()
) -> list[str]:
    """Where the numbers come from, read from the metas: command, draws, time, versions,
    machine, engine (no path of the machine that made them)."""
    first = next(iter(metas.values()), {})
    grid = first.get("grid", "?")
    seeds, bases = first.get("seeds", [0]), first.get("base_seeds", [0])
    draws = f"seeds {seeds}" + (f" on bases {bases}" if bases != [0] else "")
    from rlvr.repro import machine_line

    lines = [
        f"- command: `{first.get('command', '')}`",
        f"- draws: {draws} (each method is trained once per base seed x RL seed)",
        f"- generated: {generated}",
        cost_line(cost, wall_s),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in first.get("versions", {}).items()),
    ]
    if first.get("machine"):
        lines.append(f"- machine: {machine_line(first['machine'])}; each run's own is in runs.csv")
    lines.append("- runs: each named by its config hash (runs.csv, runs/<hash>.yaml)")
    lines += runs_machines(runs)
    if first.get("engine") == "verl":
        verl = ", ".join(first.get("verl_versions", [])) or "version not recorded"
        lines.append(
            f"- engine: **verl** ({verl}): the training runs were read from the runs/ of the "
            f"verl folder `{Path(first.get('verl_dir', '')).name}` (metrics and final "
            "checkpoints); evaluations, statistics and figures are rlvr's own"
        )
    lines.append("")
    if grid == "paper":
        lines += [
            "The paper grid's configs are the public recipes the paper builds on (Logic-RL / "
            "AR-Lopti for K&K and math, verl-tool for search QA); the paper's own training "
            "settings are unpublished.",
            "",
        ]
    return lines


def runs_machines(runs: Sequence[dict]) -> list[str]:
    """A line counting the training runs per machine and kernel mode (``runs.csv``): runs made
    in another mode than the reproducible one do not give the same bits on another processor,
    and a folder may mix them (records of several sessions)."""
    count = Counter(r["machine"] for r in runs if r.get("machine"))
    if not count:
        return []
    each = "; ".join(f"{n} x {machine}" for machine, n in count.most_common())
    modes = {m.split(", ")[-2].removesuffix(" kernels") for m in count if m.count(", ") >= 2}
    others = sorted(modes - {"reproducible"})
    mixed = (
        " (mixed kernel modes: only the reproducible ones give the same bits elsewhere; "
        f"`rlvr reproduce ... --retrain {others[0] if others else 'MODE'}` trains the others "
        "again)"
    )
    return [f"- training runs: {each}" + (mixed if len(modes) > 1 else "")]


def write_report(ctx: Context) -> Path:
    """REPORT.md of ``ctx.out`` after an invocation (its wall time is ``ctx.started``'s, the
    ``--jobs`` prefetch included); ``runs.csv`` and ``runs/`` are written from the run cache."""
    metas = read_metas(ctx.out)
    runs, seconds = write_run_index(ctx, metas)
    cost = cost_rows(ctx.cache, metas, seconds)
    write_cost(ctx.out, cost)
    generated = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return _write(ctx.out, metas, runs, cost, generated, time.perf_counter() - ctx.started)


def rewrite_report(out: Path) -> Path:
    """REPORT.md of a finished results folder again from its files alone (``<name>.meta.json``,
    ``.md``, ``.png``, ``runs.csv``, ``cost.csv``, ``CHANGES.md``): nothing is rerun and no other
    file is written (``rlvr reproduce --report DIR``)."""
    import csv

    metas = read_metas(out)
    if not metas:
        raise ConfigError(f"--report: {out} holds no <name>.meta.json")
    index = out / "runs.csv"
    runs = list(csv.DictReader(read_text(index, 1 << 24).splitlines())) if index.exists() else []
    commit = next(iter(metas.values())).get("versions", {}).get("git_commit", "")[:7]
    generated = (
        f"{time.strftime('%Y-%m-%d')} from the files of a reproduction made with rlvr at "
        f"{commit or 'an unrecorded commit'} (`rlvr reproduce --report`; nothing rerun)"
    )
    return _write(out, metas, runs, read_cost(out, runs), generated, None)


def _write(
    out: Path, metas: dict[str, dict], runs: list[dict], cost: list[dict], generated: str, wall_s
) -> Path:
    first = next(iter(metas.values()), {})
    smoke = " (smoke run)" if first.get("smoke") else ""
    claims = [restate(m, c) for m in metas.values() for c in m.get("claims", [])]
    lines = [f"# Reproduction report — grid `{first.get('grid', '?')}`{smoke}", ""]
    if smoke:
        lines += [
            "**Smoke run**: the random micro model and two training steps per run; it checks the "
            "code path end to end. Its numbers say nothing about the methods.",
            "",
        ]
    lines += bottom_line(claims)
    lines += [
        "Paper: arXiv 2511.00066, *Sharpness-Guided Group Relative Policy Optimization via "
        "Probability Shaping* (GRPO-SG).",
        "",
    ]
    lines += header_lines(metas, cost, generated, wall_s, runs)
    lines += [CLAIMS_HEADING, ""]
    if claims:
        lines += [markdown_table(CLAIMS_HEADER, claims_rows(claims)), ""]
        lines += [f"- {c['claim']} ({c['setting']}): {plain(c)}." for c in claims]
        lines += [
            "",
            "Verdicts come from 95% bootstrap intervals of paired differences (per item for "
            "accuracies, per run for training curves), resampled over base builds, runs on "
            "each base and items: *held* when the interval lies on the claimed side of zero "
            "(or, for 'close', inside the margin), *reversed* when on the other side (for "
            "'close': wholly outside the margin), *no effect beyond ±X* when it includes zero "
            "and lies inside the stated margin X, *underpowered* otherwise; a comparison of "
            f"methods is *{NOT_TESTABLE}* on an endpoint where GRPO did not gain at least "
            "the grid's `min_grpo_gain` over the base with its interval above 0 (the claim's "
            "evidence states GRPO's gain and the threshold; whatever the "
            "interval of the comparison says). The half-width is "
            "the interval's; the MDE is the smallest effect a two-sided 5% test would detect "
            "with 80% power, (z_0.975 + z_0.8) x SE = 2.80 x SE (Bloom 1995), with SE^2 = "
            "s2_base/B + s2_seed/(B S) + s2_item/n + s2_resid/(B S n) from the claim's "
            "variance components over B bases x S RL seeds x n items (Searle, Casella & "
            "McCulloch 1992; `rlvr.eval.power`). `rlvr reproduce --power <this folder>` "
            "prints the components and the bases, seeds and items that would give a "
            "half-width of 0.03.",
            "",
        ]
    else:
        lines += ["No script that decides a claim has run yet.", ""]
    changes = out / "CHANGES.md"
    if changes.exists():  # written by hand: why verdicts moved against the previous results
        text = _strip_header(changes.read_text(encoding="utf-8")).strip()
        if not text.startswith("## "):
            lines += ["## Changes against the previous results", ""]
        lines += [text, ""]
    lines += ["## The paper's reported numbers", ""]
    lines += paper_numbers.kk_lines() + paper_numbers.math_lines() + paper_numbers.qa_lines() + [""]
    for name, m in metas.items():
        lines += [
            f"## {FIGURES[name].caption}",
            "",
            f"`{m['command']}` — {m['wall_seconds']:.0f} s (its last invocation); files: "
            + ", ".join(f"[{f}]({f})" for f in m["files"]),
            "",
        ]
        if (out / f"{name}.png").exists():
            lines += [f"![{name}]({name}.png)", ""]
        if (out / f"{name}.md").exists():
            lines += [_strip_header((out / f"{name}.md").read_text()), ""]
        notes = [f"- {note}" for note in m.get("notes", [])]
        lines += [*notes, ""] if notes else []
    prompts = {k: p for meta in metas.values() for k, p in meta.get("prompt_formats", {}).items()}
    if prompts:
        lines += [
            "",
            "## Prompt formats",
            "",
            "What every model of a setting was prompted with (the template, system prompt and "
            "assistant prefill; `None` is the environment's own default text): the format its "
            "base was built on (`rlvr.models.prompt_formats`) under the grid's settings.",
            "",
            markdown_table(
                ["setting", "prompt settings"],
                [[k, f"`{describe(p)}`"] for k, p in sorted(prompts.items())],
            ),
            "",
        ]
    bases = {m: b for meta in metas.values() for m, b in meta.get("bases", {}).items() if b}
    if bases:
        lines += [
            "",
            "## Base models",
            "",
            "SHA-256 of each base's weights (`rlvr.repro.weights_sha256`): a user whose "
            "`$RLVR_HOME/models/<build>/build.json` shows the same hash has the committed "
            "base, bit for bit.",
            "",
            markdown_table(
                ["model", "build", "weights SHA-256"],
                [
                    [
                        f"`{m}`",
                        f"`{b.get('build', '')}`",
                        f"`{b.get('weights_sha256') or 'not built here'}`",
                    ]
                    for m, b in sorted(bases.items())
                ],
            ),
            "",
        ]
    if runs:
        lines += [
            "",
            "## Training runs",
            "",
            f"{len(runs)} runs; each config is in [runs/](runs/) as `<config hash>.yaml`, and "
            "[runs.csv](runs.csv) lists them with their base and its hash, steps, work "
            "(forward-backward tokens of the updates), seconds (rollout + update, one "
            "process; [cost.csv](cost.csv) adds every other piece of the folder's compute), "
            "the SHA-256 of their final weights and the machine and kernel mode "
            "that trained them. "
            "`rlvr reproduce --check <this folder>` reruns a sample and compares.",
            "",
        ]
    path = out / "REPORT.md"
    write_text_atomic(path, "\n".join(lines).rstrip() + "\n")
    return path


def write_run_index(ctx: Context, metas: dict[str, dict]) -> tuple[list[dict], dict[str, dict]]:
    """Copy the config of every training run the scripts used to ``<out>/runs/<hash>.yaml`` and
    list the runs in ``<out>/runs.csv``, so each figure's hashes resolve inside the output folder.
    Configs of runs that no output uses any more are removed. Returns the rows and, by config
    hash, each run's seconds and threads (``rlvr.reproduce.cost.cost_rows``)."""
    import csv
    import shutil

    from rlvr.reproduce.runs import base_weights, eval_seconds, read_metrics, read_run_record

    keys: dict[str, list[str]] = {}
    for name, m in metas.items():
        for label, key in m.get("train_runs", {}).items():
            keys.setdefault(key, []).append(f"{name}:{label}")
    rows, seconds = [], {}
    for key, used_by in sorted(keys.items()):
        if ctx.run_source is not None:
            run_dir, info = ctx.run_source.folder(key), ctx.run_source.info(key)
        else:
            run_dir = Path(ctx.cache) / "runs" / key
            info = read_run_record(run_dir) or {}
        if (run_dir / "config.yaml").exists():
            (out_runs := ctx.out / "runs").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run_dir / "config.yaml", out_runs / f"{key}.yaml")
        machine = info.get("machine", {})
        seconds[key] = {
            "compute_seconds": info.get("compute_seconds"),
            "eval_seconds": info["eval_seconds"]  # run.json has it since 2026-12-06
            if "eval_seconds" in info
            else eval_seconds(read_metrics(run_dir / "metrics.jsonl")),
            "threads": machine.get("torch_threads", ""),
        }
        rows.append(
            {
                "config_hash": key,
                "env": info.get("env", ""),
                "algo": info.get("algo", ""),
                "seed": info.get("seed", ""),
                "base_seed": info.get("base_seed", 0),
                "model": info.get("model", ""),
                "steps": info.get("steps", ""),
                "update_tokens": info.get("update_tokens", ""),
                "compute_seconds": info.get("compute_seconds", ""),
                "weights_sha256": _run_hash(run_dir, info),
                "base_sha256": base_weights(info["model"]).get("weights_sha256", "")
                if info.get("model")
                else "",
                "machine": (
                    f"{machine.get('cpu', '')} ({machine.get('arch', '')}), "
                    f"{machine.get('kernel_mode', '')} kernels, "
                    f"{machine.get('torch_threads', '')} thread(s)"
                )
                if machine
                else "",
                "used_by": " ".join(sorted(set(u.split(":")[0] for u in used_by))),
                "labels": " ".join(sorted(u.split(":", 1)[1] for u in used_by)),
            }
        )
    for stale in (ctx.out / "runs").glob("*.yaml"):  # configs of runs no output uses any more
        if stale.stem not in keys:
            stale.unlink()
    if rows:
        with atomic_write(ctx.out / "runs.csv", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return rows, seconds


def _run_hash(run_dir: Path, info: dict) -> str:
    """The final weights' SHA-256 from ``run.json`` (computed for runs that predate it)."""
    if info.get("weights_sha256"):
        return info["weights_sha256"]
    from rlvr.repro import weights_sha256

    try:
        return weights_sha256(run_dir / "final")
    except FileNotFoundError:
        return ""
