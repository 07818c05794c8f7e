"""rlvr's verl trainer and entry point against the real verl 0.9.1 (its own venv, run by
``scripts/test_integrations.sh``; not collected by the main suite).

- every algorithm's loss as it runs on verl (``RlvrActorLoss`` or verl's ``ppo_loss`` with our
  policy loss, from the configuration ``apply_rlvr`` writes) equals the native trainer's
  ``Updater.micro_batch_loss`` on the same model, in value and gradient;
- ``RlvrPPOTrainer._update_actor`` (verl's real ``_update_actor`` underneath) sends the flags and
  the Lopti stages to a recording stand-in for the Ray worker group (GPU infrastructure);
- ``verl_main`` composes verl's real Hydra config with an ``rlvr`` section and validates it, and
  its task runner builds ``RlvrPPOTrainer`` from verl's own datasets and tokenizer.

No GPU here: verl's FSDP engine registers for CUDA and NPU only, so nothing trains end to end.
"""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import verl  # noqa: F401  (loads the verl.plugins entry points, ours included)
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict
from torch.utils.data import SequentialSampler
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, Role
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.torch_functional import entropy_from_logits
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding

from rlvr.agents.algorithms import WeightConfig, get_algorithm
from rlvr.agents.algorithms.entropy_top import n_kept
from rlvr.agents.metrics import ToolFailureError
from rlvr.agents.policy import TokenStats, head_token_stats
from rlvr.agents.rollout.base import RolloutBatch
from rlvr.integrations.verl import main as verl_main
from rlvr.integrations.verl import trainer as verl_trainer
from rlvr.integrations.verl.actor import LOPTI_STAGE_KEY, SAMPLED_LOGIT_KEY, RlvrActorLoss
from rlvr.integrations.verl.trainer import (
    RlvrConfigError,
    RlvrPPOTrainer,
    apply_rlvr,
    read_rlvr,
)
from rlvr.training.train_config import LossConfig, TrainConfig
from rlvr.training.update import MicroBatch, Normalisers, Precision, Updater

VOCAB, HIDDEN, PROMPT, RESPONSE = 13, 8, 3, 6
TEMPERATURE = 0.7
KL_COEF = 0.05
CLIP = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0}
AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
SCALE = 16.0  # loss_scale_factor of seq-mean-token-sum-norm, the same on both sides
#: (algo, rlvr.params, Lopti stage): every method of the paper, both shaping inputs, both stages.
CASES = [
    ("grpo", {}, None),
    ("grpo_sg", {"shaping_input": "prob", "alpha": 1.3, "tau": 0.4}, None),
    ("grpo_sg", {"shaping_input": "logit", "alpha": 2.0, "tau": 1.5, "mu": 0.3}, None),
    ("reverse", {"shaping_input": "prob"}, None),
    ("reverse", {"shaping_input": "logit", "tau": 1.5}, None),
    ("ar", {"ar_alpha": 0.3}, None),
    ("entropy_top", {"fraction": 0.3}, None),
    ("lopti", {"eta": 0.5}, "low"),
    ("lopti", {"eta": 0.5}, "high"),
]
CASE_IDS = [
    "-".join(x for x in (algo, params.get("shaping_input"), stage) if x)
    for algo, params, stage in CASES
]


# --- verl's real Hydra config ---------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """rlvr's micro model saved as a Hugging Face folder (verl's validation loads its config)."""
    from rlvr.models.micro import build_micro

    path = tmp_path_factory.mktemp("micro")
    model, tokenizer = build_micro()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def run_folder(tmp_path, rlvr_section: dict, model: str) -> str:
    """A run folder as the launch-script generator writes it: ``config.yaml`` composing verl's
    ``ppo_trainer`` with the run's values and the ``rlvr`` section."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    config = {
        "defaults": ["ppo_trainer", "_self_"],
        "rlvr": rlvr_section,
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 4},
        "actor_rollout_ref": {
            "model": {"path": model},
            "actor": {
                "ppo_mini_batch_size": 2,
                "ppo_micro_batch_size_per_gpu": 2,
                "use_kl_loss": True,
                "kl_loss_coef": KL_COEF,
                "kl_loss_type": "low_var_kl",
                **CLIP,
            },
            "rollout": {"n": 2, "temperature": TEMPERATURE, "log_prob_micro_batch_size_per_gpu": 2},
            "ref": {"log_prob_micro_batch_size_per_gpu": 2},
        },
        "trainer": {"n_gpus_per_node": 1, "nnodes": 1},
    }
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
    return str(run)


def compose_run(run: str, overrides=()):
    with initialize_config_dir(config_dir=run, version_base=None):
        return compose(
            config_name="config",
            overrides=[f"hydra.searchpath=[{verl_main.VERL_CONFIG}]", *overrides],
        )


@pytest.fixture(scope="module")
def base_config(tmp_path_factory, model_dir):
    return compose_run(run_folder(tmp_path_factory.mktemp("cfg"), {"algo": "grpo"}, model_dir))


def with_rlvr(base, algo, params=None, agg="token-mean", **rlvr_keys):
    """A deep copy of the composed config with ``rlvr`` = the given section."""
    cfg = copy.deepcopy(base)
    with open_dict(cfg):
        cfg.rlvr = {"algo": algo, "params": dict(params or {}), **rlvr_keys}
        cfg.actor_rollout_ref.actor.loss_agg_mode = agg
        cfg.actor_rollout_ref.actor.loss_scale_factor = SCALE
    return cfg


# --- (a) the loss on verl's data layout equals the native trainer's ---------------------------
class BigramPolicy:
    """The smallest causal LM: the hidden state of token t is ``E[t]``, the head ``W``. The native
    side reads it through rlvr's own ``head_token_stats`` (``Policy.token_stats``'s head), the verl
    side forms the same logits at verl's packed positions."""

    def __init__(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.randn(VOCAB, HIDDEN, generator=g) * 2.0
        self.head = (torch.randn(VOCAB, HIDDEN, generator=g) * 1.5).requires_grad_(True)

    @contextmanager
    def training(self):
        yield

    def token_stats(self, input_ids, attention_mask, n_response) -> TokenStats:
        total = input_ids.shape[1]
        hidden = self.embed[input_ids[:, total - n_response - 1 : total - 1]]
        targets = input_ids[:, total - n_response :]
        return TokenStats(*head_token_stats(hidden, targets, self.head, None, TEMPERATURE))

    def packed_logits(self, packed_ids):
        """verl's ``logits_rmpad`` divided by the temperature (``_scale_logits_by_temperature``)."""
        return torch.nn.functional.linear(self.embed[packed_ids], self.head) / TEMPERATURE


def rollout(seed=0, b=6):
    """Left-padded prompts, right-padded responses (each at least one token), one advantage per
    response; and the generator, for what is drawn next."""
    g = torch.Generator().manual_seed(seed)
    prompt_len = torch.randint(1, PROMPT + 1, (b,), generator=g)
    resp_len = torch.randint(1, RESPONSE + 1, (b,), generator=g)
    resp_len[0] = RESPONSE
    input_ids = torch.randint(4, VOCAB, (b, PROMPT + RESPONSE), generator=g)
    attn = torch.zeros(b, PROMPT + RESPONSE, dtype=torch.long)
    for i in range(b):
        attn[i, PROMPT - prompt_len[i] : PROMPT + resp_len[i]] = 1
    response_mask = attn[:, PROMPT:].clone()
    adv = torch.randn(b, generator=g)
    return input_ids, attn, response_mask, adv, g


def native_loss(algo, params, stage, agg, policy, rows, batch, position="surrogate"):
    """``Updater.micro_batch_loss`` of the native trainer on micro-batch ``rows`` of ``batch``
    (its normalisers from the whole batch, the mini-batch)."""
    input_ids, attn, response_mask, adv, old, ref = batch
    cfg = TrainConfig(algo=algo)
    cfg.weights = WeightConfig(**params)
    cfg.loss = LossConfig(
        clip_low=CLIP["clip_ratio_low"],
        clip_high=CLIP["clip_ratio_high"],
        dual_clip=CLIP["clip_ratio_c"],
        kl_coef=KL_COEF,
        agg=agg,
        loss_scale_factor=SCALE,
        weight_position=position,
    )
    algorithm = get_algorithm(algo)
    cpu = torch.device("cpu")
    updater = Updater(cfg, policy, None, None, algorithm, cpu, Precision("float32", cpu))
    mask = response_mask.bool()
    stage_tokens = None
    if stage is not None:
        stages = {s.name: s.tokens for s in algorithm.stages(old, mask, updater.params)}
        stage_tokens = stages[stage][rows]
    mb = MicroBatch(
        data=RolloutBatch(input_ids[rows], attn[rows], response_mask[rows], old[rows], PROMPT),
        loss_mask=mask[rows],
        advantages=adv[rows],
        old_logprobs=old[rows],
        ref_logprobs=ref[rows],
        stage_tokens=stage_tokens,
    )
    selected = float(mask.sum())
    if algorithm.select_tokens is not None:
        selected = float(n_kept(updater.params["fraction"], int(mask.sum())))
    norm = Normalisers(tokens=float(mask.sum()), selected=selected, sequences=float(len(mask)))
    loss, _, _ = updater.micro_batch_loss(mb, norm)
    return loss


def verl_loss(loss_fn, algo, stage, policy, rows, batch):
    """The loss verl's actor computes on micro-batch ``rows``: the engine's packed layout
    (``left_right_2_no_padding``), log-probs and entropy from the temperature-scaled logits, the
    logits hook called as ``FSDPEngineWithLMHead.prepare_model_outputs`` calls it, and the
    mini-batch's global token and sequence counts."""
    input_ids, attn, response_mask, adv, old, ref = batch
    with_entropy = get_algorithm(algo).select_tokens is not None  # calculate_entropy
    td = tu.get_tensordict(
        {
            "input_ids": input_ids[rows],
            "attention_mask": attn[rows],
            "response_mask": response_mask[rows],
            "position_ids": (attn[rows].cumsum(-1) - 1).clamp(min=0),
            "prompts": input_ids[rows, :PROMPT],
            "responses": input_ids[rows, PROMPT:],
            "old_log_probs": old[rows],
            "advantages": adv[rows].unsqueeze(-1).expand(-1, RESPONSE).contiguous(),
            "ref_log_prob": ref[rows],
        }
    )
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(
        td,
        dp_size=1,
        batch_num_tokens=int(response_mask.sum()),
        global_batch_size=len(response_mask),
        temperature=TEMPERATURE,
    )
    if stage is not None:
        tu.assign_non_tensor(td, **{LOPTI_STAGE_KEY: stage})
    packed = td["input_ids"].values()
    scaled = policy.packed_logits(packed)
    labels = torch.roll(packed, shifts=-1, dims=0)
    log_probs = torch.log_softmax(scaled, -1).gather(-1, labels[:, None])[:, 0]
    offsets = td["input_ids"].offsets()

    def nested(values):
        return torch.nested.nested_tensor_from_jagged(values, offsets=offsets)

    model_output = {"log_probs": nested(log_probs)}
    if with_entropy:
        model_output["entropy"] = nested(entropy_from_logits(scaled.detach()))
    if isinstance(loss_fn, RlvrActorLoss) and loss_fn.params.get("shaping_input") == "logit":
        hooked = loss_fn(student_logits=scaled.detach().unsqueeze(0), data=td)
        assert set(hooked) == {SAMPLED_LOGIT_KEY}
        model_output.update({k: nested(v.squeeze(0)) for k, v in hooked.items()})
    loss, metrics = loss_fn(model_output, td)
    return loss, metrics


def native_batch(policy, input_ids, attn, response_mask, adv, g):
    """Old and reference log-probs: the current ones (no grad) moved a little, so ratios clip."""
    with torch.no_grad():
        now = policy.token_stats(input_ids, attn, RESPONSE).logprobs
    old = (now + 0.3 * torch.randn(now.shape, generator=g)).clamp(max=-1e-4)
    ref = (now + 0.2 * torch.randn(now.shape, generator=g)).clamp(max=-1e-4)
    mask = response_mask.bool()
    return input_ids, attn, response_mask, adv, old * mask, ref * mask


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("algo,params,stage", CASES, ids=CASE_IDS)
def test_loss_on_verl_equals_native(base_config, algo, params, stage, agg):
    check_loss_equals_native(base_config, algo, params, stage, agg)


@pytest.mark.parametrize(
    "algo,params", [("grpo_sg", {"shaping_input": "logit", "tau": 1.5}), ("ar", {"ar_alpha": 0.5})]
)
def test_weight_on_the_ratio_equals_native(base_config, algo, params):
    check_loss_equals_native(base_config, algo, params, None, "token-mean", "ratio")


def check_loss_equals_native(base_config, algo, params, stage, agg, position="surrogate"):
    cfg = with_rlvr(base_config, algo, params, agg, weight_position=position)
    setup = apply_rlvr(cfg)
    policy = BigramPolicy(seed=1)
    batch = native_batch(policy, *rollout(seed=2))
    # 80/20 selects within each forward: compare a micro-batch that is the whole mini-batch
    rows = slice(None) if algo == "entropy_top" else slice(0, 4)
    if setup.path == "actor_loss":
        loss_fn = setup.actor_loss(cfg)
    else:  # verl's own ppo_loss, running the policy loss apply_rlvr configured
        actor_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
        assert actor_config.policy_loss.loss_mode == ("vanilla" if algo == "grpo" else algo)

        def loss_fn(model_output, data):
            return ppo_loss(actor_config, model_output, data)

    got, metrics = verl_loss(loss_fn, algo, stage, policy, rows, batch)
    (got_grad,) = torch.autograd.grad(got, policy.head)
    want = native_loss(algo, params, stage, agg, policy, rows, batch, position)
    (want_grad,) = torch.autograd.grad(want, policy.head)
    torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-6)
    torch.testing.assert_close(got_grad, want_grad, rtol=2e-5, atol=1e-6)
    assert float(want_grad.abs().sum()) > 0
    assert any("kl_loss" in k for k in metrics)


def test_each_shaping_changes_the_loss(base_config):
    """The cases above would pass if a weight were silently 1: each one moves the loss."""
    policy = BigramPolicy(seed=1)
    batch = native_batch(policy, *rollout(seed=2))
    grpo = native_loss("grpo", {}, None, "token-mean", policy, slice(0, 4), batch)
    for algo, params, stage in CASES[1:]:
        other = native_loss(algo, params, stage, "token-mean", policy, slice(0, 4), batch)
        assert abs(float(other) - float(grpo)) > 1e-4, (algo, params, stage)


# --- (b) the trainer's actor update ---------------------------------------------------------
class RecordingWorkerGroup:
    """Stand-in for the Ray actor worker group: records each ``update_actor`` batch's non-tensor
    flags and answers with metrics shaped as ``ActorRolloutRefWorker.update_actor`` returns."""

    KEYS = (
        "distillation_use_topk",
        "calculate_entropy",
        LOPTI_STAGE_KEY,
        "temperature",
        "global_batch_size",
        "epochs",
        "compute_loss",
    )

    def __init__(self):
        self.calls = []
        self.loss_fns = []

    def set_loss_fn(self, loss_fn):
        self.loss_fns.append(loss_fn)

    def update_actor(self, data):
        flags = {k: tu.get_non_tensor_data(data=data, key=k, default=None) for k in self.KEYS}
        adv = data["advantages"]
        flags["advantages"] = (adv.values() if adv.is_nested else adv).clone()
        self.calls.append(flags)
        n = float(len(self.calls))
        metrics = {"pg_loss": [n, n + 0.5], "grad_norm": [10 * n], "mfu": 0.1 * n}
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})


def trainer_for(cfg) -> tuple[RlvrPPOTrainer, RecordingWorkerGroup]:
    """``RlvrPPOTrainer`` built by verl's own ``__init__`` (datasets of empty rows: nothing is
    generated), its actor worker group (Ray actors on GPUs, made by ``init_workers``) the
    recording stand-in."""
    trainer = RlvrPPOTrainer(
        config=cfg,
        tokenizer=None,
        role_worker_mapping={Role.ActorRollout: None},
        resource_pool_manager=None,
        train_dataset=[{}] * 8,
        val_dataset=[{}] * 2,
        collate_fn=list,
        train_sampler=SequentialSampler(range(8)),
    )
    recorder = RecordingWorkerGroup()
    trainer.actor_rollout_wg = recorder
    return trainer, recorder


def update_batch(seed=0) -> DataProto:
    input_ids, attn, response_mask, adv, g = rollout(seed)
    old = -torch.rand(response_mask.shape, generator=g) * 2.0 * response_mask
    return DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attn,
            "response_mask": response_mask,
            "position_ids": (attn.cumsum(-1) - 1).clamp(min=0),
            "prompts": input_ids[:, :PROMPT],
            "responses": input_ids[:, PROMPT:],
            "old_log_probs": old,
            "ref_log_prob": old,
            "advantages": adv.unsqueeze(-1) * response_mask,
        }
    )


def test_lopti_updates_low_then_high(base_config):
    trainer, recorder = trainer_for(with_rlvr(base_config, "lopti", {"eta": 0.5}))
    out = trainer._update_actor(update_batch())
    assert [c[LOPTI_STAGE_KEY] for c in recorder.calls] == ["low", "high"]
    for call in recorder.calls:  # verl's own flags are still set by verl's _update_actor
        assert call["compute_loss"] is True and call["epochs"] == 1
        assert call["global_batch_size"] == 2 * 2  # ppo_mini_batch_size x rollout.n
        assert call["temperature"] == pytest.approx(TEMPERATURE)
        assert call["distillation_use_topk"] is False
    # the advantage is not touched on the driver: the stage is applied inside the loss
    torch.testing.assert_close(recorder.calls[0]["advantages"], recorder.calls[1]["advantages"])
    metrics = out.meta_info["metrics"]  # merged as AR-Lopti: lists joined, numbers averaged
    assert metrics["actor/pg_loss"] == [1.0, 1.5, 2.0, 2.5]
    assert metrics["actor/grad_norm"] == [10.0, 20.0]
    assert metrics["perf/mfu/actor"] == pytest.approx(0.15)
    assert trainer.actor_rollout_wg is recorder


@pytest.mark.parametrize("algo", ["grpo_sg", "reverse"])
def test_logit_shaping_sets_the_logits_flag(base_config, algo):
    cfg = with_rlvr(base_config, algo, {"shaping_input": "logit"})
    trainer, recorder = trainer_for(cfg)
    trainer._update_actor(update_batch())
    assert len(recorder.calls) == 1
    assert recorder.calls[0]["distillation_use_topk"] is True
    assert recorder.calls[0][LOPTI_STAGE_KEY] is None
    loss_fn = trainer.rlvr.actor_loss(cfg)
    assert isinstance(loss_fn, RlvrActorLoss) and loss_fn.params["shaping_input"] == "logit"


def test_entropy_top_asks_for_entropy(base_config):
    trainer, recorder = trainer_for(with_rlvr(base_config, "entropy_top", {"fraction": 0.2}))
    assert base_config.actor_rollout_ref.actor.calculate_entropy is False
    trainer._update_actor(update_batch())
    assert [c["calculate_entropy"] for c in recorder.calls] == [True]
    assert recorder.calls[0]["distillation_use_topk"] is False


@pytest.mark.parametrize("algo,params", [("grpo", {}), ("grpo_sg", {}), ("ar", {})])
def test_policy_loss_algorithms_run_verls_update_unchanged(base_config, algo, params):
    trainer, recorder = trainer_for(with_rlvr(base_config, algo, params))
    assert trainer.rlvr.path == ("vanilla" if algo == "grpo" else "policy_loss")
    out = trainer._update_actor(update_batch())
    assert len(recorder.calls) == 1
    assert recorder.calls[0]["distillation_use_topk"] is False
    assert recorder.calls[0]["calculate_entropy"] is False
    assert recorder.calls[0][LOPTI_STAGE_KEY] is None
    assert out.meta_info["metrics"]["actor/pg_loss"] == [1.0, 1.5]


@pytest.mark.parametrize(
    "algo,params,installs",
    [("grpo", {}, False), ("ar", {}, False), ("entropy_top", {}, True), ("lopti", {}, True)],
)
def test_init_workers_installs_the_actor_loss(base_config, monkeypatch, algo, params, installs):
    """After verl's ``init_workers`` (the Ray part, skipped here) the trainer installs
    ``RlvrActorLoss`` on the actor worker group when the method needs it; Ray ships it pickled."""
    trainer, recorder = trainer_for(with_rlvr(base_config, algo, params))
    monkeypatch.setattr(RayPPOTrainer, "init_workers", lambda self: None)
    trainer.init_workers()
    assert len(recorder.loss_fns) == int(installs)
    if installs:
        loss_fn = pickle.loads(pickle.dumps(recorder.loss_fns[0]))
        assert isinstance(loss_fn, RlvrActorLoss) and loss_fn.scheme == algo


# --- failed searches: counted, logged, and the run stopped past the rate ----------------------
def with_tools(batch: DataProto, failed: list[int], calls: int = 2) -> DataProto:
    """``batch`` with the agent loop's per-trajectory tool fields (``calls`` searches each, the
    first ``failed[i]`` of them failed)."""
    n = len(batch)
    batch.non_tensor_batch["tool_calls"] = np.array([{"search": calls}] * n, dtype=object)
    batch.non_tensor_batch["tool_failures"] = np.array(
        [{"search": ["RetrievalError: unreachable"] * failed[i]} for i in range(n)], dtype=object
    )
    return batch


class FakeRollouts:
    """Stands in for verl's agent-loop manager (it needs vLLM servers): hands back ``output``."""

    def __init__(self, output):
        self.output, self.seen = output, []

    def generate_sequences(self, prompts):
        self.seen.append(prompts)
        return self.output

    def wake_up(self):
        return "awake"


def test_failed_searches_are_logged_and_stop_the_run_past_the_rate(base_config, monkeypatch):
    cfg = with_rlvr(base_config, "grpo", max_tool_failure_rate=0.1)
    trainer, _ = trainer_for(cfg)
    assert trainer.rlvr.max_tool_failure_rate == 0.1
    batch = with_tools(update_batch(), [1, 0, 0, 0, 0, 0])  # 1 of 12 searches failed: 8%
    fake = FakeRollouts(batch)
    monkeypatch.setattr(
        RayPPOTrainer, "init_workers", lambda self: setattr(self, "async_rollout_manager", fake)
    )
    trainer.init_workers()
    trainer.global_steps = 3
    prompts = DataProto.from_dict(tensors={"x": torch.zeros(6, 1)}, meta_info={"validate": False})
    assert trainer.async_rollout_manager.generate_sequences(prompts) is batch
    assert trainer.async_rollout_manager.wake_up() == "awake"  # everything else passes through
    out = trainer._update_actor(batch)
    assert out.meta_info["metrics"]["search/calls"] == 12.0
    assert out.meta_info["metrics"]["search/failed"] == 1.0
    fake.output = with_tools(update_batch(), [2, 0, 0, 0, 0, 0])  # 2 of 12: 17%
    prompts.meta_info["validate"] = True
    with pytest.raises(ToolFailureError, match=r"^validation at step 3: 2 of 12 search calls"):
        trainer.async_rollout_manager.generate_sequences(prompts)
    with pytest.raises(RlvrConfigError, match=r"rlvr.max_tool_failure_rate: must be in \[0, 1\]"):
        read_rlvr(with_rlvr(base_config, "grpo", max_tool_failure_rate=1.5))
    assert read_rlvr(with_rlvr(base_config, "grpo")).max_tool_failure_rate == 0.05


def test_a_loopback_retrieval_url_on_two_nodes_is_refused(base_config, monkeypatch):
    cfg = with_rlvr(base_config, "grpo", searchqa={"retrieval_url": "http://127.0.0.1:8000"})
    trainer, _ = trainer_for(cfg)
    monkeypatch.setattr(RayPPOTrainer, "init_workers", lambda self: None)
    node = {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 8.0}}
    monkeypatch.setattr(verl_trainer.ray, "is_initialized", lambda: True)
    monkeypatch.setattr(verl_trainer.ray, "nodes", lambda: [node])
    trainer.init_workers()  # one node: loopback reaches it
    monkeypatch.setattr(verl_trainer.ray, "nodes", lambda: [node, dict(node)])
    with pytest.raises(RlvrConfigError, match="is a loopback address.*all 2 nodes"):
        trainer.init_workers()


def test_run_sh_cluster_check_refuses_loopback_on_two_nodes(monkeypatch, capsys):
    """``python -m rlvr.integrations.verl.cluster`` (run.sh's check) on a simulated two-node
    ``ray.nodes()``: the one-line refusal, exit 2; on one node or none, exit 0."""
    from rlvr.integrations.verl import cluster

    node = {"NodeID": "a" * 56, "Alive": True, "Resources": {"CPU": 8.0, "GPU": 8.0}}
    monkeypatch.setattr(cluster, "cluster_nodes", lambda: [node, {**node, "NodeID": "b" * 56}])
    assert cluster.main(["--env", "searchqa", "--url", "http://127.0.0.1:8000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a loopback address" in err[0] and "all 2 nodes" in err[0]
    assert cluster.main(["--env", "searchqa", "--url", "http://10.0.0.1:8000"]) == 0
    monkeypatch.setattr(cluster, "cluster_nodes", lambda: [node])
    assert cluster.main(["--env", "searchqa", "--url", "http://127.0.0.1:8000"]) == 0


def test_verl_main_reports_a_failure_from_the_task_runner_in_one_line(monkeypatch, tmp_path):
    """Raised in verl's ``TaskRunner`` Ray actor, the failure reaches the driver as Ray's
    ``RayTaskError`` (which subclasses it): the run ends with its one line, no traceback."""
    from ray.exceptions import RayTaskError

    cause = ToolFailureError("rollout at step 4: 9 of 9 search calls failed (100% > ...)")
    wrapped = RayTaskError("TaskRunner.run", "Traceback (most recent call last): ...", cause)

    def run(config, check):
        raise wrapped.as_instanceof_cause()

    monkeypatch.setattr(verl_main, "_run", run)
    monkeypatch.chdir(tmp_path)  # Hydra writes its outputs/ folder here
    with pytest.raises(SystemExit) as e:
        verl_main.main([])
    assert str(e.value) == f"error: {cause}"


# --- (c) the configuration -------------------------------------------------------------------
@pytest.mark.parametrize("algo,params,stage", CASES, ids=CASE_IDS)
def test_verl_main_prepares_every_algorithm(base_config, algo, params, stage):
    """``verl_main.prepare`` (rlvr's checks, then verl's ``validate_config``) accepts every
    method; the plugin algorithms get verl's policy-loss keys."""
    cfg = with_rlvr(base_config, algo, params)
    setup = verl_main.prepare(cfg)
    assert setup.algo == algo and cfg.trainer.use_v1 is False
    policy_loss = cfg.actor_rollout_ref.actor.policy_loss
    if setup.path == "policy_loss":
        assert policy_loss.loss_mode == algo
        assert policy_loss._target_ == "rlvr.integrations.verl.plugin.RlvrPolicyLossConfig"
        wanted = {k: v for k, v in params.items() if k != "shaping_input"}
        assert {k: policy_loss[k] for k in wanted} == wanted
    else:
        assert policy_loss.loss_mode == "vanilla"
    expected = {
        "grpo": "vanilla",
        "ar": "policy_loss",
        "entropy_top": "actor_loss",
        "lopti": "actor_loss",
    }.get(algo, "actor_loss" if params.get("shaping_input") == "logit" else "policy_loss")
    assert setup.path == expected


BAD = [
    ({"algo": "nope"}, {}, "rlvr.algo"),
    ({"algo": "grpo", "bogus": 1}, {}, "rlvr.bogus"),
    ({"algo": "grpo_sg", "params": {"alpah": 1.0}}, {}, "rlvr.params.alpah"),
    ({"algo": "grpo_sg", "params": {"tau": -1.0}}, {}, "rlvr.params.tau"),
    ({"algo": "grpo_sg", "params": {"alpha": "big"}}, {}, "rlvr.params.alpha"),
    ({"algo": "grpo_sg", "params": {"shaping_input": "logits"}}, {}, "rlvr.params.shaping_input"),
    ({"algo": "lopti", "params": {"eta": 1.5}}, {}, "rlvr.params.eta"),
    ({"algo": "entropy_top", "params": {"fraction": 0.0}}, {}, "rlvr.params.fraction"),
    ({"algo": "grpo", "weight_position": "inside"}, {}, "rlvr.weight_position"),
    (
        {"algo": "grpo_sg", "params": {"shaping_input": "logit"}},
        {"actor_rollout_ref.model.use_remove_padding": False},
        "actor_rollout_ref.model.use_remove_padding",
    ),
    (
        {"algo": "grpo_sg", "params": {"shaping_input": "logit"}},
        {"actor_rollout_ref.actor.ulysses_sequence_parallel_size": 2},
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    ),
    (
        {"algo": "reverse", "params": {"shaping_input": "logit"}},
        {"actor_rollout_ref.model.use_fused_kernels": True},
        "actor_rollout_ref.model.use_fused_kernels",
    ),
    (
        {"algo": "ar"},
        {"actor_rollout_ref.actor.policy_loss.loss_mode": "gspo"},
        "actor_rollout_ref.actor.policy_loss.loss_mode",
    ),
]


@pytest.mark.parametrize("section,overrides,key", BAD)
def test_bad_rlvr_sections_name_the_key(base_config, section, overrides, key):
    cfg = copy.deepcopy(base_config)
    with open_dict(cfg):
        cfg.rlvr = section
    for name, value in dict(overrides).items():
        OmegaConf.update(cfg, name, value)
    with pytest.raises(RlvrConfigError) as err:
        read_rlvr(cfg)
    message = str(err.value)
    assert message.startswith(key + ":") and "\n" not in message


def test_no_rlvr_section_is_plain_verl(base_config):
    cfg = copy.deepcopy(base_config)
    with open_dict(cfg):
        del cfg["rlvr"]
    assert read_rlvr(cfg) is None


def verl_main_cli(run: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m rlvr.integrations.verl.main --config-path <relative> --config-name config``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "rlvr.integrations.verl.main", "--config-path",
         os.path.basename(run), "--config-name", "config", "--check", *args],
        cwd=os.path.dirname(run), env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_verl_main_runs_a_generated_yaml(tmp_path, model_dir):
    run = run_folder(tmp_path, {"algo": "lopti", "params": {"eta": 0.4}}, model_dir)
    ok = verl_main_cli(run)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "rlvr: algo=lopti path=actor_loss" in ok.stdout
    assert "All configuration checks passed" in ok.stdout
    bad = verl_main_cli(run, "rlvr.params.eta=2.0")
    assert bad.returncode != 0
    assert (
        bad.stderr.strip().splitlines()[-1] == "error: rlvr.params.eta: must be in (0, 1), got 2.0"
    )


def test_hydra_argv():
    argv, check = verl_main.hydra_argv(["-cp", "runs/x", "--config-name", "config", "--check"])
    assert check and argv[0] == f"-cp={os.path.abspath('runs/x')}"
    assert argv[-1] == f"hydra.searchpath=[{verl_main.VERL_CONFIG}]"
    argv, check = verl_main.hydra_argv(["hydra.searchpath=[pkg://x]", "a=1"])
    assert not check and argv == ["hydra.searchpath=[pkg://x]", "a=1"]


def test_task_runner_builds_the_rlvr_trainer(tmp_path, model_dir, monkeypatch):
    """verl_main's task runner (verl's worker mapping, tokenizer, datasets and sampler) builds
    ``RlvrPPOTrainer``; its Ray and GPU steps (``init_workers``, ``fit``) are recorded instead."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlvr.integrations.verl.data import verl_rows

    data = tmp_path / "kk.parquet"
    rows = list(verl_rows("kk", 8, split="train", env_kwargs={"n_people": 3}))
    pq.write_table(pa.Table.from_pylist(rows), data)
    run = run_folder(tmp_path, {"algo": "lopti"}, model_dir)
    cfg = compose_run(
        run,
        [f"data.train_files={data}", f"data.val_files={data}", "data.dataloader_num_workers=0"],
    )
    verl_main.prepare(cfg)
    calls = []
    monkeypatch.setattr(RlvrPPOTrainer, "init_workers", lambda self: calls.append(("init", self)))
    monkeypatch.setattr(RlvrPPOTrainer, "fit", lambda self: calls.append(("fit", self)))
    verl_main._RlvrTaskRunner().run(cfg)
    assert [name for name, _ in calls] == ["init", "fit"]
    trainer = calls[-1][1]
    assert trainer.rlvr.algo == "lopti" and trainer.rlvr.path == "actor_loss"
    assert len(trainer.train_dataloader) == 2  # 8 rows, data.train_batch_size 4


def test_steps_without_reward_variance_are_counted_and_said(base_config, capsys, monkeypatch):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer, _ = trainer_for(with_rlvr(base_config, "grpo_sg"))
    flat = update_batch()
    flat.batch["advantages"] = torch.zeros_like(flat.batch["advantages"])
    for batch in (update_batch(), flat, flat):
        trainer._update_actor(batch)
    assert (trainer.updates, trainer.flat_updates) == (3, 2)
    monkeypatch.setattr(RayPPOTrainer, "fit", lambda self: None)  # the loop that calls the above
    trainer.fit()
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "[rlvr verl] 2 of 3 steps had no reward variance in any group (every advantage 0): "
        "no policy-gradient update on them"
    )
