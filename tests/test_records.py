"""Records are written whole or not at all, read back only when sane, and a torn one is rebuilt,
never trusted (``rlvr.files``; issue 51, item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.files import (
    RecordError,
    atomic_write,
    complete_record,
    read_json,
    read_json_object,
    remove_dead_temporaries,
    write_json_atomic,
)
from rlvr.reproduce import grid, runs

REPO = Path(__file__).resolve().parents[1]


def test_an_atomic_write_that_fails_or_is_killed_leaves_the_old_record(tmp_path):
    record = tmp_path / "run.json"
    write_json_atomic(record, {"key": "old"})
    with pytest.raises(OSError):
        with atomic_write(record) as f:
            f.write('{"key": "ne')
            raise OSError("No space left on device")
    assert json.loads(record.read_text()) == {"key": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # the temporary file is gone
    code = (
        "import sys, time\nfrom rlvr.files import atomic_write\n"
        f"with atomic_write({str(record)!r}) as f:\n"
        "    f.write('{\"key\": \"ne'); f.flush(); print('writing', flush=True); time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"
    proc.kill()
    proc.wait()
    assert json.loads(record.read_text()) == {"key": "old"}  # a SIGKILL mid-write: still whole


def _hostile(tmp_path: Path) -> dict[str, Path]:
    """One file of each kind a reader of records must refuse."""
    made = {}

    def make(name: str, content: bytes | None = None) -> Path:
        p = tmp_path / name
        if content is not None:
            p.write_bytes(content)
        made[name] = p
        return p

    os.mkfifo(make("fifo.json"))
    make("zero.json").symlink_to("/dev/zero")
    make("folder.json").mkdir()
    make("big.json", b" " * 2048)
    make("bad-utf8.json", b'{"a": "\xff"}')
    make("bad-json.json", b"{bad")
    make("deep.json", b"[" * 100_000)
    make("huge-int.json", b'{"seed": ' + b"9" * 5000 + b"}")
    make("empty.json", b"")
    make("list.json", b"[1, 2]")
    return made


def test_readers_refuse_what_is_not_a_record_in_one_line_without_blocking(tmp_path):
    for name, path in _hostile(tmp_path).items():
        start = time.monotonic()
        with pytest.raises(RecordError) as info:
            read_json_object(path, limit=1024)
        assert time.monotonic() - start < 2, name  # the FIFO is not waited on, /dev/zero not read
        message = str(info.value)
        assert "\n" not in message and str(path) in message, (name, message)
        assert isinstance(info.value, UserError)
    assert read_json(tmp_path / "list.json") == [1, 2]
    assert complete_record(tmp_path / "list.json", key=str) is None
    (tmp_path / "ok.json").write_text('{"key": "k", "steps": 2, "flag": true}')
    assert complete_record(tmp_path / "ok.json", key=str, steps=int) is not None
    assert complete_record(tmp_path / "ok.json", flag=int) is None  # a bool is not a count


def test_leftovers_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f".m-1.tmp-{dead.pid}").mkdir()
    (tmp_path / f".m-1.tmp-{dead.pid}" / "model.safetensors").write_bytes(b"x" * 10)
    (tmp_path / f".m-1.tmp-{os.getppid()}").mkdir()  # alive: the test runner's parent
    (tmp_path / f".m-2.tmp-{dead.pid}").mkdir()  # another key: not this caller's to remove
    removed = remove_dead_temporaries(tmp_path, ".m-1.tmp-")
    assert [p.name for p in removed] == [f".m-1.tmp-{dead.pid}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f".m-1.tmp-{os.getppid()}", f".m-2.tmp-{dead.pid}"]
    )


@pytest.mark.parametrize("torn", ["", '{"key": "', "[]", '{"steps": 2}'])
def test_a_torn_run_record_is_rebuilt_by_resuming_not_trusted(tmp_path, torn):
    setting = grid.tiny_grid(smoke=True).settings["kk"]
    cfg = runs.train_config(setting, "grpo", 0)
    first = runs.ensure_run(cfg, tmp_path, say=lambda m: None, progress=False)
    recorded = first.info
    (first.path / runs.DONE).write_text(torn)  # what a full disk left
    said: list[str] = []
    again = runs.ensure_run(cfg, tmp_path, say=said.append, progress=False)
    assert any("torn or incomplete" in s for s in said), said
    assert again.info["weights_sha256"] == recorded["weights_sha256"]
    assert again.info["steps"] == recorded["steps"] == 2
    assert read_json_object(first.path / runs.DONE)["key"] == first.key
