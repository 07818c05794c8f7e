"""What every reproduce script shares: the run context, output files with provenance, plot style.

Each output ``<name>.<ext>`` in the output folder gets a sidecar ``<name>.meta.json`` recording
the command line, grid, seeds, the config hashes of every training run and evaluation it
used, the SHA-256 of each base's and each run's weights with the run's evaluation numbers, the
machine and kernel mode, the claims it decided, versions and wall time, so any figure or table can
be traced back to what produced it and checked against a rerun (``rlvr reproduce --check``).
"""

from __future__ import annotations

import csv
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

from rlvr.agents.algorithms import algorithm_names, get_algorithm
from rlvr.config import KEY_SCHEMA
from rlvr.files import atomic_write, write_json_atomic, write_text_atomic
from rlvr.reproduce.archive import keep

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

#: Colour and label of each method: the algorithms' own (``rlvr.agents.algorithms``) plus the
#: two reference rows of the tables.
METHOD_COLORS = {
    "base": "#7f7f7f",
    "sft": "#bcbd22",
    **{a.name: a.color for a in map(get_algorithm, algorithm_names())},
}
METHOD_LABELS = {
    "base": "base model",
    "sft": "continued SFT (equal compute)",
    **{a.name: a.label for a in map(get_algorithm, algorithm_names())},
}


def versions() -> dict[str, str]:
    """Versions of python, torch, transformers, rlvr and the git commit of the checkout."""
    import torch
    import transformers

    import rlvr

    repo = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":!results",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        commit = (commit + ("+dirty" if dirty else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "rlvr": rlvr.__version__,
        "git_commit": commit,
    }


@dataclass
class Context:
    """Settings of one ``rlvr reproduce`` invocation, handed to every script."""

    grid: Any  # rlvr.reproduce.grid.Grid
    out: Path
    cache: Path
    seeds: list[int]
    smoke: bool = False
    command: str = ""
    progress: bool = True
    log: list[str] = field(default_factory=list)
    #: When the invocation started (``--jobs`` prefetching included), for the report's wall time.
    started: float = field(default_factory=time.perf_counter)
    #: Base builds each method is trained from (``tiny-kk@b``; 0 is the preset itself).
    base_seeds: list[int] = field(default_factory=lambda: [0])
    #: Where finished runs come from: None trains them here (``runs.ensure_run``); a
    #: ``rlvr.reproduce.verl.results.VerlRuns`` reads the runs verl trained (``--from-verl``).
    run_source: Any = None
    #: The runs the invocation's figures need, each with its identity (``rlvr.reproduce.plan``).
    plan: Any = None

    def units(self) -> list[tuple[int, int]]:
        """Every (base seed, RL seed) draw of a method, bases outermost."""
        return [(b, s) for b in self.base_seeds for s in self.seeds]

    def draws(self) -> str:
        """``seeds [0] on bases [0, 1, 2]`` for titles."""
        return f"seeds {self.seeds}" + (
            f" on bases {self.base_seeds}" if self.base_seeds != [0] else ""
        )

    def keep(self, folder: Path) -> None:
        """Keep the records of finished folder ``folder`` (a run, an evaluation, a continued-SFT
        reference, a tiny base) in the results folder, when the grid asks for it
        (``Grid.records``, ``rlvr.reproduce.archive``)."""
        if self.grid.records:
            keep(Path(folder), self.out)

    def say(self, msg: str) -> None:
        self.log.append(msg)
        print(msg, flush=True)


@dataclass
class Output:
    """The files of one script: ``<out>/<name>.{png,csv,md}`` plus ``<name>.meta.json``."""

    ctx: Context
    name: str
    started: float = field(default_factory=time.perf_counter)
    runs: dict[str, str] = field(default_factory=dict)
    evals: dict[str, str] = field(default_factory=dict)
    claims: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: label -> {"key", "weights_sha256", "numbers": evaluation summary of all items}
    run_records: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: base model name -> {"build", "weights_sha256"}
    bases: dict[str, dict[str, str]] = field(default_factory=dict)
    #: setting -> the prompt settings its models were evaluated with (``EnvSpec.prompt_keys``)
    prompts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def path(self, suffix: str) -> Path:
        self.ctx.out.mkdir(parents=True, exist_ok=True)
        p = self.ctx.out / f"{self.name}{suffix}"
        if p.name not in self.files:
            self.files.append(p.name)
        return p

    def header(self) -> str:
        return (
            f"generated by `{self.ctx.command}` (grid {self.ctx.grid.name}, "
            f"{self.ctx.draws()}); provenance in {self.name}.meta.json"
        )

    def write_csv(self, rows: Sequence[dict[str, Any]], suffix: str = ".csv") -> Path:
        p = self.path(suffix)
        cols: list[str] = []
        for r in rows:
            cols += [k for k in r if k not in cols]
        with atomic_write(p, newline="") as f:  # provenance lives in <name>.meta.json
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in rows:
                w.writerow({k: _fmt(v) for k, v in r.items()})
        return p

    def write_md(self, text: str, suffix: str = ".md") -> Path:
        p = self.path(suffix)
        write_text_atomic(p, f"<!-- {self.header()} -->\n{text.rstrip()}\n")
        return p

    def save_fig(self, fig, suffix: str = ".png") -> Path:
        p = self.path(suffix)
        fig.text(
            0.995,
            0.005,
            f"rlvr reproduce {self.name} --grid {self.ctx.grid.name}",
            ha="right",
            va="bottom",
            fontsize=6,
            color="#999999",
        )
        with atomic_write(p, "wb") as f:
            fig.savefig(f, format=p.suffix.lstrip("."), dpi=130, bbox_inches="tight")
        plt.close(fig)
        return p

    def lacks(self, setting_key: str, what: str) -> bool:
        """True when the grid has no ``setting_key``, after writing the note that says so in
        place of ``what`` (a grid may leave a task out: the smol grid has no search QA)."""
        if setting_key in self.ctx.grid.settings:
            return False
        self.write_md(
            f"No {what} in the {self.ctx.grid.name} grid: it has no `{setting_key}` setting."
        )
        return True

    def claim(self, claim: str, setting: str, verdict: str, evidence: str, **numbers) -> None:
        self.claims.append(
            {
                "claim": claim,
                "setting": setting,
                "verdict": verdict,
                "evidence": evidence,
                **numbers,
            }
        )

    def finish(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        from rlvr.repro import machine_info

        meta = {
            "name": self.name,
            "command": self.ctx.command,
            "grid": self.ctx.grid.name,
            "seeds": self.ctx.seeds,
            "base_seeds": self.ctx.base_seeds,
            "smoke": self.ctx.smoke,
            "files": self.files,
            "train_runs": self.runs,
            "evaluations": self.evals,
            "bases": self.bases,
            "run_records": self.run_records,
            "key_schema": KEY_SCHEMA,
            "prompt_formats": self.prompts,
            "claims": self.claims,
            "notes": self.notes,
            **(
                self.ctx.run_source.provenance()
                if self.ctx.run_source is not None
                else {"engine": "native"}
            ),
            "wall_seconds": round(time.perf_counter() - self.started, 1),
            "versions": versions(),
            "machine": machine_info(),
            **(extra or {}),
        }
        write_json_atomic(self.path(".meta.json"), meta, indent=2, default=str)
        return meta


def _fmt(v: Any) -> Any:
    return f"{v:.4f}" if isinstance(v, float) else v


def command_line(argv: Iterable[str] | None = None) -> str:
    return "rlvr " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt_ci(ci, scale: float = 1.0, digits: int = 3) -> str:
    """``0.512 [0.43, 0.60]``; a single seed shows the mean alone."""
    if ci is None:
        return "n/a"
    if ci.n <= 1:
        return f"{ci.mean * scale:.{digits}f}"
    return (
        f"{ci.mean * scale:.{digits}f} [{ci.low * scale:.{digits}f}, {ci.high * scale:.{digits}f}]"
    )


__all__ = [
    "Context",
    "METHOD_COLORS",
    "METHOD_LABELS",
    "Output",
    "command_line",
    "fmt_ci",
    "markdown_table",
    "plt",
    "versions",
]
