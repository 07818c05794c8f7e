"""``rlvr train`` under bad input: crafted checkpoints, changed configurations, corrupt
checkpoints, unwritable output, and bad values, each refused with one line."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from rlvr.agents.checkpoint import (
    CheckpointError,
    check_resume_config,
    list_checkpoints,
    load_payload,
    rng_state,
    set_rng_state,
    verify_checkpoint,
)
from rlvr.agents.metrics import preserve_metrics
from rlvr.cli import main as rlvr_main
from rlvr.training.train_config import load_train_config
from rlvr.training.trainer import Trainer, read_metrics

from _rlvr_toys import LetterEnv
from _rlvr_toys import one_line_exit_2 as _one_line_exit_2

torch.set_num_threads(1)

ARGS = [
    "env=kk",
    "algo=grpo",
    "profile=micro",
    "progress=false",
    "num_threads=1",
    "save_every=1",
    "group_size=2",
    "prompts_per_step=2",
]


def _train(out, steps, *extra):
    cfg = load_train_config([*ARGS, f"out={out}", f"steps={steps}", *extra])
    return Trainer(cfg, make_env=lambda split: LetterEnv()).train()


class _Payload:
    """Unpickling this runs ``touch <marker>``: what a crafted checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _rewrite_manifest(ckpt: Path) -> None:
    """Re-hash every file, as an attacker with write access to the folder would."""
    import hashlib

    manifest = json.loads((ckpt / "MANIFEST.json").read_text())
    for name in manifest["files"]:
        data = (ckpt / name).read_bytes()
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (ckpt / "MANIFEST.json").write_text(json.dumps(manifest))


def test_crafted_pickle_in_a_checkpoint_is_refused_and_never_runs(tmp_path):
    out = tmp_path / "run"
    _train(out, 1)
    ckpt = list_checkpoints(out / "checkpoints")[0]
    marker = tmp_path / "pwned"
    torch.save({"python": _Payload(marker)}, ckpt / "rng.pt")
    _rewrite_manifest(ckpt)
    assert verify_checkpoint(ckpt) is not None  # the checksum is no defence
    with pytest.raises(CheckpointError, match="rng.pt holds more than tensors"):
        load_payload(ckpt, json.loads((ckpt / "MANIFEST.json").read_text()))
    with open(ckpt / "rng.pt", "wb") as f:  # a plain pickle: not even torch's zip format
        pickle.dump(_Payload(marker), f)
    _rewrite_manifest(ckpt)
    assert verify_checkpoint(ckpt) is None  # refused from its (missing) zip directory
    with pytest.raises(CheckpointError, match="rng.pt is not a torch.save archive"):
        load_payload(ckpt, json.loads((ckpt / "MANIFEST.json").read_text()))
    code = rlvr_main(["train", *ARGS, f"out={out}", "steps=2", "--resume"])
    assert code == 2 and not marker.exists()


def test_rng_state_round_trips_through_weights_only_load(tmp_path):
    import random

    import numpy as np

    state = rng_state()
    torch.save(state, tmp_path / "rng.pt")
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_resume_refuses_a_changed_configuration(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["train", *ARGS, f"out={out}"]
    assert rlvr_main([*base, "steps=1"]) == 0
    config_before = (out / "config.yaml").read_text()
    capsys.readouterr()
    code = rlvr_main([*base, "steps=2", "--resume", "algo=grpo_sg", "group_size=4"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "algo" in err and "group_size" in err and "--allow-config-change" in err
    assert (out / "config.yaml").read_text() == config_before  # not overwritten
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    # keys that do not change a step's result may change; the override allows the rest
    assert rlvr_main([*base, "steps=2", "--resume", "save_every=2", "progress=false"]) == 0
    assert (
        rlvr_main(
            [*base, "steps=3", "--resume", "rollout.temperature=0.5", "--allow-config-change"]
        )
        == 0
    )
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]


def test_check_resume_config_lists_every_changed_key():
    saved = {"algo": "grpo", "steps": 5, "optim": {"lr": 1e-6}, "env_kwargs": {"n_people": 3}}
    now = {"algo": "grpo", "steps": 9, "optim": {"lr": 2e-6}, "env_kwargs": {"n_people": 4}}
    with pytest.raises(CheckpointError, match=r"env_kwargs .*optim\.lr"):
        check_resume_config(saved, now)
    assert check_resume_config(saved, now, allow=True) == ["env_kwargs", "optim.lr"]
    # a field added after the checkpoint was saved compares as its default
    assert (
        check_resume_config({"algo": "grpo"}, {"algo": "grpo", "new": 1}, defaults={"new": 1}) == []
    )
    with pytest.raises(CheckpointError, match="new"):
        check_resume_config({"algo": "grpo"}, {"algo": "grpo", "new": 2}, defaults={"new": 1})


def test_resume_with_every_checkpoint_corrupt_refuses_and_keeps_metrics(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["train", *ARGS, f"out={out}"]
    assert rlvr_main([*base, "steps=2"]) == 0
    metrics = (out / "metrics.jsonl").read_text()
    for ckpt in list_checkpoints(out / "checkpoints"):
        (ckpt / "model.pt").write_bytes(b"garbage")
    capsys.readouterr()
    with pytest.warns(RuntimeWarning):
        assert rlvr_main([*base, "steps=3", "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "corrupt" in err
    assert (out / "metrics.jsonl").read_text() == metrics


def test_metrics_are_moved_aside_never_deleted(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s}) for s in (1, 2, 3)] + ['{"step": 4, "cut']
    path.write_text("\n".join(lines) + "\n")
    side = preserve_metrics(path, keep_through_step=2)
    assert path.read_text().splitlines() == lines[:2]
    assert side.read_text().splitlines() == lines[2:]
    path.write_text(lines[0] + "\n")
    side = preserve_metrics(path, keep_through_step=None)  # a fresh start keeps the old run's
    assert path.read_text() == "" and side.read_text().splitlines() == lines[:1]
    assert preserve_metrics(tmp_path / "new.jsonl", None) is None


@pytest.mark.parametrize(
    "override, needles",
    [
        ("env_kwargs.bogus=1", ["env_kwargs.bogus", "n_people"]),
        ("env_kwargs.n_people=0", ["env_kwargs", "n_people"]),
        ("rollout.temperature=-1", ["rollout.temperature", "[0, inf)"]),
        ("rollout.top_p=0", ["rollout.top_p", "(0, 1]"]),
        ("loss.clip_low=-1", ["loss.clip_low", "[0, 1)"]),
        ("num_threads=-1", ["num_threads", "[0, inf)"]),
        ("device=tpu", ["device", "cuda"]),
        ("model=/nonexistent", ["model", "/nonexistent"]),
        ("optim.lr=nan", ["optim.lr", "(0, inf)"]),
        ("optim.lr=inf", ["optim.lr", "(0, inf)"]),
        ("optim.beta2=1", ["optim.beta2", "[0, 1)"]),
        ("weights.eta=nan", ["weights.eta", "(0, 1)"]),
        ("algo=grpo_sg weights.tau=0", ["weights.tau", "(0, inf)"]),
        ("algo=reverse weights.lower=3", ["weights.lower", "upper"]),
        pytest.param(
            "device=cuda",
            ["device", "no CUDA"],
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present"),
        ),
    ],
)
def test_bad_values_exit_2_with_one_line_naming_the_key(tmp_path, capsys, override, needles):
    _one_line_exit_2(
        capsys,
        [
            "train",
            "env=kk",
            "profile=micro",
            f"out={tmp_path / 'o'}",
            "steps=1",
            "progress=false",
            *override.split(),
        ],
        *needles,
    )


def test_unwritable_output_fails_at_start_with_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    _one_line_exit_2(capsys, ["train", *ARGS, f"out={blocker}", "steps=1"], "out:", str(blocker))
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoints").write_text("not a folder")  # only checkpoints/ is unusable
    _one_line_exit_2(capsys, ["train", *ARGS, f"out={out}", "steps=1"], "checkpoints")
    assert not (out / "metrics.jsonl").exists()


def _make_read_only(path: Path) -> bool:
    """Make ``path`` unwritable: mode 0o500, or for root (who writes through modes) the immutable
    attribute; False when neither is possible here."""
    if os.geteuid() != 0:
        os.chmod(path, 0o500)
        return True
    import subprocess

    return subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0


def _make_writable(path: Path) -> None:
    if os.geteuid() == 0:
        import subprocess

        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    os.chmod(path, 0o700)


@pytest.mark.parametrize("which", ["out", "checkpoints"])
def test_read_only_output_fails_at_start(tmp_path, capsys, which):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    target = out if which == "out" else out / "checkpoints"
    if not _make_read_only(target):
        pytest.skip("cannot make a folder read-only here")
    try:
        _one_line_exit_2(capsys, ["train", *ARGS, f"out={out}", "steps=1"], "out:", str(target))
    finally:
        _make_writable(target)
    assert not (out / "metrics.jsonl").exists()
