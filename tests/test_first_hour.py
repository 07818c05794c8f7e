"""What a new user meets in the first hour (issue 52): a model-name typo, an offline hub, a GPU
command on a CPU, ``rlvr eval`` mistakes, a missing dataset, plugins in the working directory, a
custom env named on the command line, ``--resume`` on a folder that is not there, ``--compare``
of a report that lacks claims, a missing extra, and a near miss of a name: each is one line at
once, before any model loads, with the closest name where there is one."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.cli import main

from _rlvr_toys import one_line_exit_2, refuse_model_loads

TRAIN = ["train", "env=kk", "algo=grpo", "profile=micro", "progress=false", "num_threads=1"]
TRAIN += ["steps=1", "group_size=2", "prompts_per_step=2"]
RLVR = Path(sys.executable).with_name("rlvr")  # the console script, as a user runs it


@pytest.fixture(scope="module", autouse=True)
def _kernel_notice_said():
    """The one notice of a process whose torch was imported before ``rlvr.cli`` (pytest's) is
    said here, not in the first test's one line."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["--version"])


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if anything loads a model."""
    refuse_model_loads(monkeypatch)


# -- model names -------------------------------------------------------------------------------
def test_a_model_name_typo_is_one_line_at_once_listing_the_local_models(capsys, tmp_path):
    start = time.perf_counter()
    one_line_exit_2(
        capsys,
        [*TRAIN, f"out={tmp_path / 'r'}", "model=tiny-kkk"],
        "did you mean 'tiny-kk'?",
        "tiny-math",
        "smollm2-135m-instruct",
    )
    assert time.perf_counter() - start < 20  # no hub retries (90 s before)


def test_a_hub_id_offline_is_one_line_before_any_download(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    err = one_line_exit_2(
        capsys, [*TRAIN, f"out={tmp_path / 'r'}", "model=Qwen/Qwen2.5-0.5B"], "HF_HUB_OFFLINE"
    )
    assert "micro, tiny-kk" in err and "Retrying" not in err
    assert time.perf_counter() - start < 20


def test_an_unreachable_hub_is_found_in_seconds(monkeypatch):
    from rlvr.config import ConfigError
    from rlvr.models.names import check_hub_model

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    with pytest.raises(ConfigError, match="127.0.0.1 cannot be reached"):
        check_hub_model("org/never-cached-model")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_the_readme_gpu_command_on_a_cpu_names_vllm_before_the_hub(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    argv = ["train", "env=math", "algo=ar", "model=Qwen/Qwen2.5-7B", f"out={tmp_path / 'r'}"]
    one_line_exit_2(capsys, [*argv, "rollout.backend=vllm", "dtype=bfloat16"], "needs vLLM")


# -- rlvr eval ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["model=runs/nope/final", "env=kk", "n_items=2"], "'runs/nope/final' is not a folder"),
        (["k=-1"], "k must be >= 0"),
        (["env=kkk"], "did you mean 'kk'?"),
        (["backend=rollouts"], "did you mean 'rollout'?"),
        (["env_kwargs.n_peple=3"], "did you mean 'env_kwargs.n_people'?"),
    ],
)
def test_eval_mistakes_are_one_line(capsys, no_model_load, argv, needle):
    one_line_exit_2(capsys, ["eval", *argv], needle)


def test_a_missing_dataset_is_said_before_the_model_loads(capsys, tmp_path, monkeypatch):
    loaded = []
    refuse_model_loads(monkeypatch, loaded)
    monkeypatch.setenv("RLVR_SHARED_DATA", str(tmp_path))  # a clone without the shared data
    smol = ["model=smollm2-135m-instruct", "env=math", "env_kwargs.dataset=gsm8k", "n_items=2"]
    one_line_exit_2(capsys, ["eval", *smol], "gsm8k")
    train = [*TRAIN, f"out={tmp_path / 'r'}", "env=math", "env_kwargs.dataset=none.jsonl"]
    one_line_exit_2(capsys, train, "none.jsonl")
    assert not loaded


# -- plugins -----------------------------------------------------------------------------------
DOCS = Path(__file__).resolve().parents[1] / "docs"


def doc_python(doc: str, after: str) -> str:
    """The first python block of ``docs/<doc>`` after the text ``after``."""
    text = (DOCS / doc).read_text()
    return text[text.index(after) :].split("```python\n", 1)[1].split("```", 1)[0]


def test_the_rlvr_command_imports_plugins_from_the_working_directory_before_names(tmp_path):
    """``docs/design.md``'s env and ``docs/algorithms.md``'s method, in ``my_lab/`` where the
    command runs: imported without PYTHONPATH, before ``env=`` and ``algo=`` are checked."""
    (tmp_path / "my_lab").mkdir()
    (tmp_path / "my_lab" / "envs.py").write_text(doc_python("design.md", "of one's own"))
    (tmp_path / "my_lab" / "algos.py").write_text(doc_python("algorithms.md", "For example"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = ["train", "env=parity", "algo=confident_only", "plugins=[my_lab.envs,my_lab.algos]"]
    done = subprocess.run(
        [str(RLVR), *argv, "out=r", "--print-config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "env: parity" in done.stdout and "algo: confident_only" in done.stdout


# -- smaller ones ------------------------------------------------------------------------------
def test_resume_of_a_folder_that_is_not_there_is_refused(capsys, tmp_path, no_model_load):
    one_line_exit_2(capsys, [*TRAIN, f"out={tmp_path / 'typo'}", "--resume"], "nothing to resume")
    assert not (tmp_path / "typo").exists()


def test_near_misses_get_the_closest_name(capsys, tmp_path):
    out = f"out={tmp_path / 'r'}"
    one_line_exit_2(capsys, [*TRAIN, out, "algo=grpo-sg"], "did you mean 'grpo_sg'?")
    one_line_exit_2(capsys, [*TRAIN, out, "optim.lrr=1e-3"], "did you mean 'optim.lr'?")
    one_line_exit_2(capsys, [*TRAIN, out, "profile=mirco"], "did you mean 'micro'?")
    one_line_exit_2(capsys, [*TRAIN, out, "loss.agg=token_mean"], "did you mean 'token-mean'?")


def test_compare_tells_absent_claims_from_changed_ones():
    from rlvr.reproduce.compare import compare_claims, summary_line

    old = [{"claim": c, "setting": "K&K", "verdict": "held"} for c in "abc"]
    new = [{"claim": "a", "setting": "K&K", "verdict": "reversed"}]
    rows = compare_claims(old, new)
    assert summary_line(rows) == (
        "1 of 1 verdicts changed; 2 claim(s) absent from the new report (not run there)"
    )
    assert summary_line(compare_claims(old, [])).startswith("0 of 0 verdicts changed; 3 claim")


@pytest.mark.skipif(importlib.util.find_spec("openenv") is not None, reason="openenv installed")
def test_the_openenv_server_without_openenv_is_one_line_naming_the_extra(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "rlvr.integrations.openenv_server", "--env", "kk"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "rlvr.integrations.openenv_server needs the openenv extra (openenv is not installed): "
        "pip install 'rlvr[openenv]'"
    ]


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="datasets installed")
def test_trl_dataset_without_datasets_names_the_extra():
    from rlvr.integrations.extras import MissingExtra
    from rlvr.integrations.trl_rewards import trl_dataset

    with pytest.raises(MissingExtra, match=r"pip install 'rlvr\[trl\]'") as caught:
        trl_dataset("kk", 2)
    assert len(str(caught.value).splitlines()) == 1
    assert isinstance(caught.value, ImportError)


def test_main_returns_for_each_case_without_touching_sys_path_twice(tmp_path, monkeypatch):
    """``rlvr.cli.main`` puts the working directory on ``sys.path`` once, at the end."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    main(["--version"])
    main(["--version"])
    assert sys.path.count(str(tmp_path)) == 1 and sys.path[-1] == str(tmp_path)
