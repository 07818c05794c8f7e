"""``python -m rlvr.integrations.verl.main <overrides>``: verl's ``main_ppo`` with rlvr's trainer.

The same Hydra application as verl 0.9.1's ``python -m verl.trainer.main_ppo`` (wheel
``verl==0.9.1``, ``verl/trainer/main_ppo.py`` ``main``): verl's ``ppo_trainer`` config, verl's
device detection and ``validate_config``, verl's ``run_ppo`` (Ray start, one ``TaskRunner``
actor), and inside it the ``TaskRunner.run`` of ``verl/trainer/main_ppo_v0.py`` (workers,
tokenizer, datasets) building ``RlvrPPOTrainer`` instead of ``RayPPOTrainer``. Two differences:

- the ``rlvr`` section is validated first (``verl.trainer.read_rlvr``: one-line errors), and
  the policy-loss keys it implies are written into the config before verl validates it;
- verl's ``RayPPOTrainer`` loop always runs: ``trainer.use_v1`` is set to false (verl 0.9.1's
  default V1 trainer needs ``TransferQueue`` from the ``verl[verl-core]`` extra, and its loop is
  another class).

Running a generated YAML: ``--config-path DIR --config-name config`` with ``DIR/config.yaml``
whose ``defaults`` list starts with ``ppo_trainer`` (then ``_self_``). verl's packaged config
directory is put on Hydra's search path for that (``hydra.searchpath=[pkg://verl.trainer.config]``
is appended to the command line unless it sets ``hydra.searchpath`` itself, which must then list
it); a relative ``--config-path`` is taken from the working directory. ``--check`` composes and
validates the configuration, prints a one-line summary and exits without starting Ray.
With ``RLVR_VERL_CPU=1`` the CPU platform's settings are written into the config first
(``rlvr.integrations.verl.cpu.apply_config``; refused in one line where CUDA is present).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys

if importlib.util.find_spec("verl") is None:  # one line, not a traceback
    raise SystemExit(
        "error: verl is not installed; rlvr's verl entry point needs verl 0.9.1 in this "
        "environment (pip install verl==0.9.1 cachetools fastapi uvicorn; "
        "docs/integrations_verl.md)"
    )

import hydra  # noqa: E402
from omegaconf import DictConfig, open_dict  # noqa: E402
from verl.trainer.main_ppo import run_ppo  # noqa: E402
from verl.trainer.main_ppo_v0 import BaseTaskRunner  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402
from verl.utils.device import auto_set_device  # noqa: E402

from rlvr.agents.metrics import ToolFailureError  # noqa: E402
from rlvr.integrations.verl import cpu  # noqa: E402
from rlvr.integrations.verl.trainer import RlvrConfigError, RlvrSetup, apply_rlvr  # noqa: E402

#: verl's packaged Hydra config directory (``ppo_trainer.yaml`` and its groups).
VERL_CONFIG = "pkg://verl.trainer.config"
CHECK_FLAG = "--check"
logger = logging.getLogger(__name__)


def prepare(config: DictConfig) -> RlvrSetup | None:
    """What verl's ``main`` does before Ray starts, plus the ``rlvr`` section: validate it,
    write the policy-loss keys it implies, select the ``RayPPOTrainer`` loop, then run verl's
    ``auto_set_device`` and ``validate_config``. Returns the validated setup."""
    setup = apply_rlvr(config)
    cpu.apply_config(config)  # RLVR_VERL_CPU=1: the CPU platform's settings
    if config.trainer.get("use_v1", False):
        logger.info("trainer.use_v1: rlvr's trainer extends RayPPOTrainer; running that loop")
    with open_dict(config.trainer):
        config.trainer.use_v1 = False
    auto_set_device(config)
    validate_config(
        config=config,
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )
    return setup


class _RlvrTaskRunner(BaseTaskRunner):
    """verl 0.9.1's ``main_ppo_v0.TaskRunner.run`` (same steps, verl's own helpers) with
    ``RlvrPPOTrainer`` as the trainer."""

    def run(self, config):
        from pprint import pprint

        from omegaconf import OmegaConf
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.dataset.rl_dataset import collate_fn

        from rlvr.integrations.verl.trainer import RlvrPPOTrainer

        pprint(OmegaConf.to_container(config, resolve=True))
        OmegaConf.resolve(config)
        actor_rollout_cls, ray_worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        validate_config(
            config=config,
            use_reference_policy=need_reference_policy(config),
            use_critic=need_critic(config),
        )
        model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        tokenizer, processor = model_config.tokenizer, model_config.processor
        resource_pool_manager = self.init_resource_pool_mgr(config)
        datasets = [
            create_rl_dataset(
                files,
                config.data,
                tokenizer,
                processor,
                is_train=is_train,
                max_samples=config.data.get(key, -1),
            )
            for files, is_train, key in (
                (config.data.train_files, True, "train_max_samples"),
                (config.data.val_files, False, "val_max_samples"),
            )
        ]
        trainer = RlvrPPOTrainer(
            config=config,
            tokenizer=tokenizer,
            processor=processor,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=resource_pool_manager,
            ray_worker_group_cls=ray_worker_group_cls,
            train_dataset=datasets[0],
            val_dataset=datasets[1],
            collate_fn=collate_fn,
            train_sampler=create_rl_sampler(config.data, datasets[0]),
        )
        trainer.init_workers()
        trainer.fit()


def task_runner_class():
    """``_RlvrTaskRunner`` as a Ray actor class (``ray.remote`` is applied here so that importing
    this module does not need a Ray runtime)."""
    import ray

    return ray.remote(_RlvrTaskRunner)


def summary(setup: RlvrSetup | None) -> str:
    if setup is None:
        return "rlvr: no rlvr section; verl's own PPO/GRPO"
    return (
        f"rlvr: algo={setup.algo} path={setup.path} params={setup.params} "
        f"flags={setup.update_flags()} weight_position={setup.weight_position}"
    )


def _run(config: DictConfig, check_only: bool) -> None:
    setup = prepare(config)
    print(summary(setup), flush=True)
    if not check_only:
        run_ppo(config, task_runner_class=task_runner_class())


def hydra_argv(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` with verl's config directory on Hydra's search path and an absolute
    ``--config-path``; plus whether ``--check`` was given (removed from the list)."""
    check = CHECK_FLAG in argv
    out: list[str] = []
    args = iter(a for a in argv if a != CHECK_FLAG)
    for arg in args:
        for flag in ("--config-path", "-cp"):
            if arg == flag:
                arg = f"{flag}={next(args, '')}"
            if arg.startswith(f"{flag}="):
                path = arg.split("=", 1)[1]
                if "://" not in path:
                    path = os.path.abspath(path)
                arg = f"{flag}={path}"
        out.append(arg)
    if not any(a.lstrip("+").startswith("hydra.searchpath=") for a in out):
        out.append(f"hydra.searchpath=[{VERL_CONFIG}]")
    return out, check


def main(argv: list[str] | None = None) -> None:
    argv, check = hydra_argv(sys.argv[1:] if argv is None else list(argv))

    @hydra.main(config_path=VERL_CONFIG, config_name="ppo_trainer", version_base=None)
    def _main(config: DictConfig) -> None:
        try:
            _run(config, check)
        except (RlvrConfigError, ToolFailureError, cpu.CpuSwitchError) as e:  # one line
            # raised in verl's TaskRunner actor, it comes back as Ray's RayTaskError, which
            # subclasses it and holds it as ``cause``
            raise SystemExit(f"error: {getattr(e, 'cause', None) or e}") from None

    sys.argv = [sys.argv[0], *argv]
    _main()


if __name__ == "__main__":
    # through the importable module, so Ray pickles the task runner by reference
    from rlvr.integrations.verl.main import main as _importable_main

    _importable_main()
