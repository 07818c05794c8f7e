"""``REPORT.md``: every figure and table of a reproduction, the paper's numbers beside ours, seeds,
versions, wall time, and each of the paper's claims with the verdict the statistics gave.

Built only from the files the scripts wrote (``<name>.meta.json``, ``.md``, ``.png``), so it can
be regenerated at any time. Verdicts come from the scripts' paired differences; nothing here
decides a claim. A hand-written ``CHANGES.md`` in the folder (why verdicts moved against the
previous results; ``rlvr reproduce --compare`` lists which) is included as its own section.
"""

from __future__ import annotations

import time
from pathlib import Path

from rlvr.eval.stats import NOT_TESTABLE
from rlvr.files import atomic_write, write_text_atomic
from rlvr.prompt_format import describe
from rlvr.reproduce import paper_numbers
from rlvr.reproduce.common import Context, markdown_table, versions
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


def write_report(ctx: Context) -> Path:
    """REPORT.md of ``ctx.out``; its wall time is the invocation's (``ctx.started``), the
    ``--jobs`` prefetch included: after a prefetch the scripts themselves find every run cached."""
    out = ctx.out
    metas = {}
    for name in report_order():  # the registered figures, each declaring its caption and place
        p = out / f"{name}.meta.json"
        if p.exists():
            metas[name] = load_meta(p)
    v = versions()
    from rlvr.repro import machine_info, machine_line

    machine = machine_info()
    wall = time.perf_counter() - ctx.started
    lines = [
        f"# Reproduction report — grid `{ctx.grid.name}`" + (" (smoke run)" if ctx.smoke else ""),
        "",
        "Paper: arXiv 2511.00066, *Sharpness-Guided Group Relative Policy Optimization via "
        "Probability Shaping* (GRPO-SG).",
        "",
        f"- command: `{ctx.command}`",
        f"- draws: {ctx.draws()} (each method is trained once per base seed x RL seed)",
        f"- generated: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; wall time {wall / 60:.1f} min, "
        "training and evaluation included (runs already in the cache cost nothing)",
        "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- machine: {machine_line(machine)}; each run's own machine is in runs.csv",
        f"- run cache: `{ctx.cache}` (each run is named by its config hash; "
        "see `<name>.meta.json`)",
        "",
    ]
    if ctx.run_source is not None:
        src = ctx.run_source.provenance()
        lines[-1:-1] = [
            f"- engine: **{src['engine']}** "
            f"({', '.join(src.get('verl_versions', [])) or 'version not recorded'}): the training "
            f"runs were read from `{src.get('verl_dir', '')}/runs/` (metrics and final "
            "checkpoints); evaluations, statistics and figures are rlvr's own"
        ]
    if ctx.grid.name == "paper":
        lines += [
            "The paper grid's configs are the public recipes the paper builds on (Logic-RL / "
            "AR-Lopti for K&K and math, verl-tool for search QA); the paper's own training "
            "settings are unpublished.",
            "",
        ]
    if ctx.smoke:
        lines += [
            "**Smoke run**: the random micro model and two training steps per run; it checks the "
            "code path end to end. Its numbers say nothing about the methods.",
            "",
        ]
    claims = [restate(m, c) for m in metas.values() for c in m.get("claims", [])]
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
            f"{ctx.grid.min_grpo_gain:g} over the base with its interval above 0 (whatever the "
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
            f"`{m['command']}` — {m['wall_seconds']:.0f} s; files: "
            + ", ".join(f"[{f}]({f})" for f in m["files"]),
            "",
        ]
        if (out / f"{name}.png").exists():
            lines += [f"![{name}]({name}.png)", ""]
        if (out / f"{name}.md").exists():
            lines += [_strip_header((out / f"{name}.md").read_text()), ""]
        for note in m.get("notes", []):
            lines += [f"- {note}"]
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
    runs = write_run_index(ctx, metas)
    if runs:
        lines += [
            "",
            "## Training runs",
            "",
            f"{len(runs)} runs; each config is in [runs/](runs/) as `<config hash>.yaml`, and "
            "[runs.csv](runs.csv) lists them with their base and its hash, steps, work "
            "(forward-backward tokens of the updates), seconds (rollout + update, one "
            "process), the SHA-256 of their final weights and the machine and kernel mode "
            "that trained them. "
            "`rlvr reproduce --check <this folder>` reruns a sample and compares.",
            "",
        ]
    path = out / "REPORT.md"
    write_text_atomic(path, "\n".join(lines).rstrip() + "\n")
    return path


def write_run_index(ctx: Context, metas: dict[str, dict]) -> list[dict]:
    """Copy the config of every training run the scripts used to ``<out>/runs/<hash>.yaml`` and
    list the runs in ``<out>/runs.csv``, so each figure's hashes resolve inside the output folder.
    Configs of runs that no output uses any more are removed."""
    import csv
    import shutil

    from rlvr.reproduce.runs import base_weights, read_run_record

    keys: dict[str, list[str]] = {}
    for name, m in metas.items():
        for label, key in m.get("train_runs", {}).items():
            keys.setdefault(key, []).append(f"{name}:{label}")
    rows = []
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
    return rows


def _run_hash(run_dir: Path, info: dict) -> str:
    """The final weights' SHA-256 from ``run.json`` (computed for runs that predate it)."""
    if info.get("weights_sha256"):
        return info["weights_sha256"]
    from rlvr.repro import weights_sha256

    try:
        return weights_sha256(run_dir / "final")
    except FileNotFoundError:
        return ""
