"""Every launch folder of ``rlvr reproduce all --grid paper --engine verl`` against verl 0.9.1.

Run in verl's own venv by ``scripts/test_integrations.sh verl``. For each generated run:

- ``run.sh`` parses (``bash -n``) and runs under bash with ``PYTHON`` pointing at a recorder that
  stands in for the interpreter: it fakes the data steps (no hub access here) and records the
  Hydra overrides run.sh hands to ``rlvr.integrations.verl.main``;
- ``config.yaml`` composes with verl's packaged ``ppo_trainer`` (Hydra compose API) under exactly
  those overrides, and passes what ``verl.trainer.main_ppo.main`` runs before training
  (``validate_config``), plus the typed configs verl's workers build (``omega_conf_to_dataclass``
  of actor, reference, rollout, algorithm, checkpoint engine), the reward function verl loads,
  and full interpolation; and, where ``rlvr.integrations.verl.main`` imports, its ``prepare``
  (the ``rlvr`` section, the policy-loss keys it implies, verl's validation);
- every key the file sets exists in verl's own composed config (Hydra would silently add a
  misspelled key to a section that verl never turns into a dataclass), except the ``rlvr``
  section, the fields of rlvr's policy-loss config and the free-form mappings verl hands on
  (``FREE_FORM``);
- what reaches the engines: a numeric ``max_model_len`` (the prompt + response budget) in verl's
  typed rollout config, the ``hf_overrides`` verl serialises for ``vllm serve``, and the actor's
  attention in verl's typed model config, with which the actor loads on a machine without
  flash-attn (and with which verl's packed micro-batches stay separate sequences).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import verl  # noqa: F401  (loads the verl.plugins entry points, ours included)
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.utils.import_utils import load_extern_object

from rlvr.agents.algorithms import WeightConfig, algorithm_names
from rlvr.integrations.verl.config import PLUGIN_LOSS_CONFIG
from rlvr.integrations.verl.plugin import RlvrPolicyLossConfig
from rlvr.reproduce.grid import get_grid
from rlvr.reproduce.verl.launch import write

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")
#: Mappings verl passes on as they are: ``vllm serve`` arguments (``vllm_async_server.py``
#: ~287-346) and Hugging Face config overrides (``workers/config/model.py`` ~185).
FREE_FORM = (
    "actor_rollout_ref.rollout.engine_kwargs.vllm",
    "actor_rollout_ref.model.override_config",
)

RECORDER = """#!/usr/bin/env bash
# Stands in for python in run.sh: fakes rlvr's data steps, records verl_main's arguments.
set -euo pipefail
module="$2"; shift 2
case "$module" in
  rlvr.reproduce.verl.run_tools) echo 64 ;;
  rlvr.cli)
    if [[ "$1" == prepare-verl ]]; then
      while [[ $# -gt 0 ]]; do [[ "$1" == --out ]] && touch "$2"; shift; done
    fi ;;
  rlvr.integrations.verl.main) printf '%s\\n' "$@" > "$RECORD" ;;
  rlvr.integrations.verl.cluster) exec "$REAL_PYTHON" -m "$module" "$@" ;;  # real Ray
  *) echo "unexpected module $module" >&2; exit 3 ;;
esac
"""


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl-launch")
    rows = write(get_grid("paper"), ["all"], [0, 1, 2], out, "rlvr reproduce all (check)")
    return out, rows


@pytest.fixture(scope="module")
def base():
    """verl's own ``ppo_trainer`` as main_ppo composes it (nothing of ours)."""
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer")


def recorded_overrides(run_dir: Path, tmp: Path) -> list[str]:
    """Run run.sh with the recorder as ``PYTHON``; return the Hydra overrides it passes."""
    recorder = tmp / "python"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    record = tmp / "argv.txt"
    env = {
        **os.environ,
        "PYTHON": str(recorder),
        "RECORD": str(record),
        "RLVR_RETRIEVAL_URL": "http://10.0.0.7:8000",
        "REAL_PYTHON": sys.executable,
    }
    subprocess.run(["bash", str(run_dir / "run.sh")], env=env, check=True, timeout=60)
    argv = record.read_text().splitlines()
    assert argv[:4] == ["--config-path", str(run_dir), "--config-name", "config"], argv[:4]
    return argv[4:]


def ref_config(cfg: DictConfig):
    """The reference's typed config as verl's workers build it (``verl/workers/engine_workers.py``
    ``init_model``: the log-prob keys renamed to the actor's, then ``omega_conf_to_dataclass``)."""
    ref = OmegaConf.to_container(cfg.actor_rollout_ref.ref)
    ref["ppo_mini_batch_size"] = cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    ref["ppo_micro_batch_size"] = ref.pop("log_prob_micro_batch_size", None)
    ref["ppo_micro_batch_size_per_gpu"] = ref.pop("log_prob_micro_batch_size_per_gpu", None)
    ref["use_dynamic_bsz"] = ref.pop("log_prob_use_dynamic_bsz", False)
    ref["ppo_max_token_len_per_gpu"] = ref.pop("log_prob_max_token_len_per_gpu", None)
    return omega_conf_to_dataclass(OmegaConf.create(ref))


def set_keys(doc: dict, prefix: str = ""):
    """Dotted keys a config document sets (a mapping under a key verl leaves null is a leaf)."""
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield path, True
            yield from set_keys(value, path + ".")
        else:
            yield path, False


def check_keys_exist(doc: dict, base: DictConfig) -> None:
    ours = {k: v for k, v in doc.items() if k not in ("hydra", "defaults", "rlvr")}
    plugin_fields = {f.name for f in dataclasses.fields(RlvrPolicyLossConfig)} | {"_target_"}
    loss = ours["actor_rollout_ref"]["actor"]["policy_loss"]
    for path, is_mapping in set_keys(ours):
        parent, _, leaf = path.rpartition(".")
        if any(parent == f or parent.startswith(f + ".") for f in FREE_FORM):
            continue
        if parent == "actor_rollout_ref.actor.policy_loss" and (
            loss.get("_target_") == PLUGIN_LOSS_CONFIG
        ):
            assert leaf in plugin_fields, f"{path}: not a field of RlvrPolicyLossConfig"
            continue
        node = OmegaConf.select(base, parent) if parent else base
        if node is None and is_mapping is False:
            continue  # inside a mapping verl leaves null (override_optimizer_config)
        assert isinstance(node, DictConfig) and leaf in list(node.keys()), (
            f"{path}: not a key of verl's config"
        )


@pytest.fixture(scope="module")
def composed(launch, tmp_path_factory):
    """``(run folder, composed config, rlvr_run.json)`` of every run, composed under the
    overrides its run.sh passes (after ``bash -n`` of the script)."""
    out, rows = launch
    tmp = tmp_path_factory.mktemp("recorder")
    runs = []
    for row in rows:
        run_dir = out / "runs" / row["run_key"]
        subprocess.run(["bash", "-n", str(run_dir / "run.sh")], check=True)
        overrides = recorded_overrides(run_dir, tmp)
        with initialize_config_dir(config_dir=str(run_dir), version_base=None):
            cfg = compose(config_name="config", overrides=overrides)
        runs.append((run_dir, cfg, json.loads((run_dir / "rlvr_run.json").read_text())))
    return runs


def test_every_generated_run_composes_and_validates(launch, base, composed):
    out, rows = launch
    assert len(rows) == len({r["run_key"] for r in rows}) == len(composed) > 50
    for run_dir, composed_cfg, record in composed:
        cfg = copy.deepcopy(composed_cfg)
        check_keys_exist(yaml.safe_load((run_dir / "config.yaml").read_text()), base)
        # What verl.trainer.main_ppo.main runs before it starts Ray.
        validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))
        actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
        OmegaConf.resolve(cfg)
        ref = ref_config(cfg)
        rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
        omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)
        omega_conf_to_dataclass(cfg.algorithm)
        fn = cfg.reward.custom_reward_function
        assert callable(load_extern_object(fn.path, fn.name))
        # The values verl will run with are the run's, after every default and interpolation.
        assert cfg.trainer.total_training_steps == record["steps"]
        assert cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes == record["gpus"]
        assert actor.checkpoint.save_contents[-1] == "hf_model"
        assert ref.ppo_micro_batch_size_per_gpu == actor.ppo_micro_batch_size_per_gpu
        assert rollout.n == cfg.actor_rollout_ref.actor.rollout_n
        assert cfg.trainer.default_local_dir == f"{run_dir}/checkpoints"
        assert cfg.data.train_files[0].startswith(str(out / "data"))
        env_vars = cfg.ray_kwargs.ray_init.runtime_env.env_vars
        assert env_vars.VERL_FILE_LOGGER_PATH == f"{run_dir}/metrics.jsonl"
        if rollout.val_kwargs.n > 1:
            assert rollout.val_kwargs.do_sample and rollout.val_kwargs.temperature > 0
        assert cfg.rlvr.algo == record["algo"] in algorithm_names()
        fields = WeightConfig(**OmegaConf.to_container(cfg.rlvr.params))
        assert fields.params(record["algo"]) == record["params"]
        if record["task"] == "searchqa":
            assert cfg.rlvr.searchqa.retrieval_url == "http://10.0.0.7:8000"
        if isinstance(actor.policy_loss, RlvrPolicyLossConfig):
            assert actor.policy_loss.loss_mode == record["algo"]


def test_verl_main_prepares_every_run(composed):
    """rlvr's entry point (``rlvr.integrations.verl.main``) takes every run as generated: its
    ``rlvr`` section, the policy-loss keys it implies, then verl's validation."""
    verl_main = pytest.importorskip("rlvr.integrations.verl.main")
    for _, composed_cfg, record in composed:
        setup = verl_main.prepare(copy.deepcopy(composed_cfg))
        assert setup.algo == record["algo"] and setup.params == record["params"]


def test_a_misspelled_key_fails(launch, base, tmp_path):
    """The key check above catches what Hydra would accept silently."""
    out, rows = launch
    doc = yaml.safe_load((out / "runs" / rows[0]["run_key"] / "config.yaml").read_text())
    doc["trainer"]["test_frq"] = 5
    with pytest.raises(AssertionError, match="trainer.test_frq"):
        check_keys_exist(doc, base)
    doc = yaml.safe_load((out / "runs" / rows[0]["run_key"] / "config.yaml").read_text())
    doc["actor_rollout_ref"]["actor"]["clip_ratio_hgh"] = 0.3
    run_dir = tmp_path / "bad"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(doc))
    with initialize_config_dir(config_dir=str(run_dir), version_base=None):
        cfg = compose(config_name="config")
    with pytest.raises(Exception, match="clip_ratio_hgh"):
        validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))


def test_what_reaches_vllm(composed):
    """verl's typed rollout config of every run: ``max_model_len`` is the run's prompt +
    response budget (null would become the model's max_position_embeddings,
    ``vllm_async_server.py`` ~1104), and ``engine_kwargs.vllm.hf_overrides`` is a plain dict that
    verl's ``build_cli_args_from_config`` JSON-encodes for ``vllm serve --hf_overrides``
    (``vllm_rollout/utils.py`` ~515-518: a dict becomes ``json.dumps(v)``), where a non-dict
    value (``null``) is set on the model's config, which removes dual-chunk attention."""
    seen = set()
    for _, composed_cfg, record in composed:
        cfg = copy.deepcopy(composed_cfg)
        OmegaConf.resolve(cfg)
        rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
        budget = cfg.data.max_prompt_length + cfg.data.max_response_length
        assert isinstance(rollout.max_model_len, int) and rollout.max_model_len == budget
        assert rollout.max_model_len == record["memory"]["max_model_len"]
        assert rollout.gpu_memory_utilization == record["memory"]["gpu_memory_utilization"]
        vllm_args = rollout.engine_kwargs.get("vllm") or {}
        overrides = vllm_args.get("hf_overrides")
        if record["model"] == "Qwen/Qwen2.5-7B-Instruct-1M":
            assert type(overrides) is dict  # json.dumps, not str(), in build_cli_args_from_config
            assert json.dumps(overrides) == '{"dual_chunk_attention_config": null}'
            seen.add(record["setting"])
        else:
            assert overrides is None and record["hf_overrides"] == {}
    assert seen == {"kk-7b"}


def test_the_actor_loads_without_flash_attn(composed, tmp_path):
    """verl's typed model config (``HFModelConfig``, as the workers build it) of a generated run,
    pointed at a local micro model, and the actor loaded from it the way verl's FSDP engine does
    (``AutoModelForCausalLM.from_pretrained(local_path, config=hf_config)``,
    ``engine/fsdp/transformer_impl.py`` ~276): with the generated ``sdpa`` this works here,
    where flash-attn is not installed (verl's default ``flash_attention_2`` would raise)."""
    import importlib.util

    from transformers import AutoModelForCausalLM
    from verl.workers.config import HFModelConfig

    from rlvr.models import load_model

    assert importlib.util.find_spec("flash_attn") is None
    model, tok = load_model("micro", seed=0)
    model.save_pretrained(tmp_path / "micro")
    tok.save_pretrained(tmp_path / "micro")
    _, composed_cfg, _ = composed[0]
    section = OmegaConf.to_container(composed_cfg.actor_rollout_ref.model, resolve=True)
    section["path"] = str(tmp_path / "micro")
    mc = omega_conf_to_dataclass(OmegaConf.create(section), dataclass_type=HFModelConfig)
    assert mc.hf_config._attn_implementation == "sdpa"
    actor = AutoModelForCausalLM.from_pretrained(mc.local_path, config=mc.hf_config)
    assert actor.config._attn_implementation == "sdpa"
    default = {**section, "override_config": {}}
    mc = omega_conf_to_dataclass(OmegaConf.create(default), dataclass_type=HFModelConfig)
    with pytest.raises(ImportError):
        AutoModelForCausalLM.from_pretrained(mc.local_path, config=mc.hf_config)


def test_sdpa_keeps_packed_sequences_apart():
    """verl packs a micro-batch into one row without an attention mask (``use_remove_padding``,
    ``engine/fsdp/transformer_impl.py`` ~1182-1190: ``input_ids.values()`` and restarting
    ``position_ids``) and calls the model with ``use_cache=False`` (~1566); with SDPA, this
    transformers then masks each sequence off the others from the position ids
    (``masking_utils._preprocess_mask_arguments``: only without a cache and a 2D mask;
    ``find_packed_sequence_indices``): the packed logits equal those of each sequence alone.
    (With a cache, as in generation, it does not: the last assertion.)"""
    import torch

    from rlvr.models import load_model

    model, _ = load_model("micro", seed=0)
    model.config._attn_implementation = "sdpa"
    model.eval()
    a, b = torch.arange(3, 14).unsqueeze(0), torch.arange(20, 27).unsqueeze(0)
    with torch.no_grad():
        alone = torch.cat([model(input_ids=x, use_cache=False).logits[0] for x in (a, b)])
        packed_ids = torch.cat([a, b], dim=1)
        pos = torch.cat([torch.arange(a.shape[1]), torch.arange(b.shape[1])]).unsqueeze(0)
        packed = model(input_ids=packed_ids, position_ids=pos, use_cache=False).logits[0]
        cached = model(input_ids=packed_ids, position_ids=pos, use_cache=True).logits[0]
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(cached[a.shape[1] :], alone[a.shape[1] :], atol=1e-3)
