"""Bridges from rlvr's environments and losses to other training libraries.

Nothing here is imported by ``import rlvr``; each module imports its library lazily or only
where that library is installed:

- ``verl/``: everything verl, in one folder. ``plugin``: our policy losses of log-probs in
  verl's ``POLICY_LOSS_REGISTRY`` (loaded by verl 0.9.1's ``verl.plugins`` entry-point group at
  ``import verl``); ``actor``: a whole actor loss for verl's ``set_loss_fn`` (logit-shaped
  GRPO-SG, 80/20, Lopti); ``trainer``, ``main``: verl's PPO trainer and ``main_ppo`` with the
  method chosen by the config's ``rlvr:`` section (``python -m rlvr.integrations.verl.main``);
  ``agent_loop``: one agent loop per multi-turn environment (``EnvSpec.verl``: search QA's
  ``rlvr_searchqa``) in verl's rollout workers; ``reward``: ``compute_score(data_source,
  solution_str, ground_truth, extra_info)`` for verl's ``reward.custom_reward_function``,
  dispatching to the registered environments; ``data``: our tasks as verl-ready parquet
  (``rlvr prepare-verl``; needs only pyarrow); ``config``: one ``TrainConfig`` as verl's
  overrides; ``checkpoints``: what a checkpoint verl saved stands for. The reproduction's verl
  engine that writes launch folders and reads them back is ``rlvr.reproduce.verl``.
- ``trl_rewards``: reward functions in TRL ``GRPOTrainer``'s signature, a dataset export in its
  prompt format, and the search environment for its ``environment_factory``.
- ``episodes``: one text episode of any registered env, the layer the adapters below share.
- ``trl_env``: every registered env as a TRL ``environment_factory`` class (tools from the env
  registry) and ``episode_reward``.
- ``verifiers_env``: every registered env as a verifiers 0.4 taskset and env (plugin id
  ``rlvr_verifiers``), ``load_environment(env=...)``.
- ``openenv_server``: every registered env served the OpenEnv way, and its typed client.

See ``docs/integrations.md``, ``docs/integrations_verl.md`` and ``docs/integrations_trl.md``.
"""
