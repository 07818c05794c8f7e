"""Crafted checkpoint manifests are refused before any file they name is opened: names that
leave the checkpoint folder, special files (devices, FIFOs, links), size mismatches and
malformed manifests. A file the manifest names is read only once it is a regular file inside
the folder with the recorded size, so nothing can hash ``/dev/zero`` forever or block on a FIFO."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import torch

from rlvr.agents.checkpoint import (
    MANIFEST,
    CheckpointError,
    find_resume_checkpoint,
    load_payload,
    manifest_problem,
    save_checkpoint,
)
from rlvr.cli import main as rlvr_main


def _checkpoint(root: Path, step: int = 1) -> Path:
    return save_checkpoint(root, step, {"model": {"w": torch.arange(4.0)}}, {"step": step})


def _edit_manifest(ckpt: Path, edit) -> None:
    manifest = json.loads((ckpt / MANIFEST).read_text())
    edit(manifest)
    (ckpt / MANIFEST).write_text(json.dumps(manifest))


def _within(seconds: float, fn):
    """``fn()``'s result (or its exception), failing the test if it does not return within
    ``seconds``."""
    out: list = []

    def run():
        try:
            out.append((fn(), None))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            out.append((None, e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked: a special file was opened"
    result, error = out[0]
    if error is not None:
        raise error
    return result


def _rename_entry(new_name: str, size: int | None = None):
    def edit(m):
        info = m["files"].pop("model.pt")
        m["files"][new_name] = {**info, **({} if size is None else {"bytes": size})}

    return edit


def _crafted(ckpt: Path, how: str) -> None:
    model = ckpt / "model.pt"
    if how == "parent path":
        _edit_manifest(ckpt, _rename_entry("../../../../../../../../dev/zero", 0))
    elif how == "absolute path":
        _edit_manifest(ckpt, _rename_entry("/dev/zero", 0))
    elif how == "link to a device":
        model.unlink()
        model.symlink_to("/dev/zero")
        _edit_manifest(ckpt, lambda m: m["files"]["model.pt"].update(bytes=0))
    elif how == "fifo":
        model.unlink()
        os.mkfifo(model)
        _edit_manifest(ckpt, lambda m: m["files"]["model.pt"].update(bytes=0))
    elif how == "manifest is a fifo":
        (ckpt / MANIFEST).unlink()
        os.mkfifo(ckpt / MANIFEST)
    elif how == "size mismatch":
        _edit_manifest(ckpt, lambda m: m["files"]["model.pt"].update(bytes=1))
    elif how == "bytes not a number":
        _edit_manifest(ckpt, lambda m: m["files"]["model.pt"].update(bytes="1"))
    elif how == "files a list":
        _edit_manifest(ckpt, lambda m: m.update(files=["model.pt"]))
    elif how == "nested manifest":
        (ckpt / MANIFEST).write_text("[" * 100_000)


CASES = {
    "parent path": "not a file of the checkpoint",
    "absolute path": "not a file of the checkpoint",
    "link to a device": "not a regular file",
    "fifo": "not a regular file",
    "manifest is a fifo": "not a regular file",
    "size mismatch": "the manifest says 1",
    "bytes not a number": "'bytes' count",
    "files a list": "'files'",
    "nested manifest": "not valid JSON",
}


@pytest.mark.parametrize("how", sorted(CASES))
def test_a_crafted_manifest_is_refused_unread(tmp_path, how):
    ckpt = _checkpoint(tmp_path / "checkpoints")
    manifest = json.loads((ckpt / MANIFEST).read_text())
    _crafted(ckpt, how)
    found, why = _within(5, lambda: manifest_problem(ckpt))
    assert found is None and CASES[how] in why and "\n" not in why, why
    with pytest.warns(RuntimeWarning, match=CASES[how].replace("(", r"\(")):
        with pytest.raises(CheckpointError, match="every checkpoint"):
            _within(5, lambda: find_resume_checkpoint(tmp_path / "checkpoints"))
    if how not in ("manifest is a fifo", "nested manifest", "files a list"):
        # a caller handing load_payload a manifest it read itself is refused the same way
        _crafted_manifest = json.loads((ckpt / MANIFEST).read_text())
        with pytest.raises(CheckpointError, match=CASES[how].split(" (")[0]):
            _within(5, lambda: load_payload(ckpt, _crafted_manifest))
    assert manifest["files"]["model.pt"]["bytes"] > 0


def test_a_crafted_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    root = tmp_path / "checkpoints"
    _checkpoint(root, 1)
    newest = _checkpoint(root, 2)
    _crafted(newest, "parent path")
    with pytest.warns(RuntimeWarning, match="step_00000002"):
        path, _ = _within(5, lambda: find_resume_checkpoint(root))
    assert path.name == "step_00000001"


def test_resume_from_a_crafted_manifest_is_one_line_exit_2(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "env=kk", "algo=grpo", "profile=micro", "progress=false", "num_threads=1"]
    args += ["group_size=2", "prompts_per_step=2", f"out={out}"]
    assert rlvr_main([*args, "steps=1", "save_every=1"]) == 0
    (ckpt,) = (out / "checkpoints").iterdir()
    _crafted(ckpt, "parent path")
    metrics = (out / "metrics.jsonl").read_text()
    capsys.readouterr()
    with pytest.warns(RuntimeWarning):
        code = _within(60, lambda: rlvr_main([*args, "steps=2", "--resume"]))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "corrupt" in err, err
    assert (out / "metrics.jsonl").read_text() == metrics


def _rehash(ckpt: Path, name: str) -> None:
    """Record ``name``'s current size and SHA-256 in the manifest, as an attacker would."""
    import hashlib

    data = (ckpt / name).read_bytes()
    _edit_manifest(
        ckpt,
        lambda m: m["files"][name].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest()),
    )


def test_a_compressed_archive_member_is_refused_before_torch_load_inflates_it(tmp_path):
    """torch.load inflates a deflated member: 16 MiB of zeros stored in ~16 KiB loaded as a
    16 MiB tensor (the issue's 1 MiB file inflated to 1 GiB). torch.save stores members
    uncompressed, so a compressed one is refused from the central directory."""
    import zipfile

    ckpt = save_checkpoint(tmp_path / "ckpts", 1, {"model": {"w": torch.zeros(4 * 2**20)}}, {})
    model = ckpt / "model.pt"
    with zipfile.ZipFile(model) as src, zipfile.ZipFile(tmp_path / "bomb.pt", "w") as out:
        for info in src.infolist():  # the tensor's storage deflated, the rest as it was
            kind = zipfile.ZIP_DEFLATED if "/data/" in info.filename else zipfile.ZIP_STORED
            out.writestr(info.filename, src.read(info), compress_type=kind)
    os.replace(tmp_path / "bomb.pt", model)
    assert model.stat().st_size < 2**20
    _rehash(ckpt, "model.pt")
    found, why = manifest_problem(ckpt)
    assert found is None and "stored compressed" in why and "inflate to 16777216" in why, why
    manifest = json.loads((ckpt / MANIFEST).read_text())
    with pytest.raises(CheckpointError, match="stored compressed"):
        load_payload(ckpt, manifest)


def test_a_huge_sparse_file_named_with_its_size_is_refused_before_it_is_hashed(tmp_path):
    """A 64 GiB sparse file with its size in the manifest: no zip directory at its end, so it
    is refused in milliseconds instead of hashed whole (175 s for 8 GiB in the issue)."""
    ckpt = _checkpoint(tmp_path / "ckpts")
    with open(ckpt / "model.pt", "r+b") as f:
        f.truncate(64 * 2**30)
    _edit_manifest(ckpt, lambda m: m["files"]["model.pt"].update(bytes=64 * 2**30))
    found, why = _within(5, lambda: manifest_problem(ckpt))
    assert found is None and "not a torch.save archive" in why, why
