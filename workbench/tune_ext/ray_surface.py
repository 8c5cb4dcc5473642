"""Every private part of Ray (and the few of torch and Optuna) that the workbench relies on.

``tools/check_ray_internals.py`` confines such reads to ``tune_ext`` and the trial wing's
RLlib replacements; this list names each one with its owner, and for a function or
method the parameters the workbench's patch or call was written against.
tests/unit/test_ray_surface.py checks the list against the installed packages (each
owner still has the name, each signature is unchanged) and checks that every private
name those modules use is on it: an upgrade of Ray fails there, in one place, naming
what moved.
"""

from __future__ import annotations

from dataclasses import dataclass

# The Ray release the list was written against (pyproject.toml pins ray>=2.60,<2.61).
WRITTEN_AGAINST = "2.60"


@dataclass(frozen=True)
class Private:
    owner: str  # a dotted module or class
    name: str
    # A callable's parameter names in order (None: an attribute, or not called by us).
    params: tuple[str, ...] | None = None


_PBT = "ray.tune.schedulers.PopulationBasedTraining"
_CONTROLLER = "ray.tune.execution.tune_controller.TuneController"
_RUNNER = "ray.rllib.env.single_agent_env_runner.SingleAgentEnvRunner"
_EPISODE = "ray.rllib.env.single_agent_episode.SingleAgentEpisode"
_LEARNER = "ray.rllib.core.learner.learner.Learner"
_TORCH_LEARNER = "ray.rllib.core.learner.torch.torch_learner.TorchLearner"
_TRAINABLE = "ray.tune.trainable.Trainable"
_LOGGERS = "ray.tune.logger.CSVLoggerCallback"

SURFACE: tuple[Private, ...] = (
    # --- Ray's private modules, imported by name ------------------------------------
    Private("ray._private.utils", "get_num_cpus", ("override_docker_cpu_warning", "truncate")),
    Private("ray._private.utils", "get_dashboard_dependency_error", ()),
    Private("ray._private.utils", "estimate_available_memory", ()),
    Private(
        "ray._private.utils",
        "resolve_object_store_memory",
        ("available_memory_bytes", "object_store_memory"),
    ),
    Private(
        "ray._private.accelerators", "get_accelerator_manager_for_resource", ("resource_name",)
    ),
    Private(
        "ray._private.authentication.authentication_token_setup",
        "maybe_enable_token_auth_if_token_available",
        ("warn_if_disabled",),
    ),
    Private("ray._private.worker", "_global_node"),
    Private("ray._private.worker", "print_to_stdstream", ("data", "ignore_prefix")),
    Private("ray", "_private"),
    Private("ray.train._internal.session", "_TrainingResult", ("checkpoint", "metrics")),
    Private("ray.train._internal.storage", "_delete_fs_path", ("fs", "fs_path")),
    Private(
        "ray.train._internal.storage._FilesystemSyncer",
        "_sync_up_command",
        ("self", "local_path", "uri", "exclude"),
    ),
    Private(
        "ray.tune.execution.experiment_state",
        "_find_newest_experiment_checkpoint",
        ("experiment_path", "fs"),
    ),
    Private("ray.rllib.env.single_agent_episode", "_REWARDS_BOX_SPACE"),
    # --- Tune: PBT's state and the methods the workbench's mixins override ----------
    Private(_PBT, "_exploit", ("self", "tune_controller", "trial", "trial_to_clone")),
    Private(
        _PBT,
        "_checkpoint_or_exploit",
        ("self", "trial", "tune_controller", "upper_quantile", "lower_quantile"),
    ),
    Private(_PBT, "_get_new_config", ("self", "trial", "trial_to_clone")),
    Private(
        _PBT,
        "_log_config_on_step",
        ("self", "trial_state", "new_state", "trial", "trial_to_clone", "new_config"),
    ),
    Private(_PBT, "_trial_state"),
    Private(_PBT, "_perturbation_interval"),
    Private(_PBT, "_perturbation_factors"),
    Private(_PBT, "_resample_probability"),
    Private(_PBT, "_synch"),
    Private(_PBT, "_time_attr"),
    Private(_PBT, "_custom_explore_fn"),
    Private(_PBT, "_burn_in_period"),
    Private(_PBT, "_metric"),
    Private(_PBT, "_save_trial_state", ("self", "state", "time", "result", "trial")),
    Private("ray.tune.schedulers.pbt", "_PBTTrialState", ("trial",)),
    Private(
        "ray.tune.schedulers.pb2",
        "_explore",
        ("data", "bounds", "current", "base", "old", "config"),
    ),
    Private("ray.tune.schedulers.pb2.PB2", "_hyperparam_bounds_flat"),
    # --- Tune: the controller, its checkpoint managers, trials, tuner ---------------
    Private(_CONTROLLER, "save_to_dir", ("self",)),
    Private(_CONTROLLER, "_schedule_trial_save", ("self", "trial", "result")),
    Private(_CONTROLLER, "_actor_cache"),
    Private(_CONTROLLER, "_staged_trials"),
    Private(_CONTROLLER, "_trial_to_actor"),
    Private(_CONTROLLER, "_cached_trial_decisions"),
    Private(_CONTROLLER, "_queued_trial_decisions"),
    Private(_CONTROLLER, "_reuse_actors"),
    Private(_CONTROLLER, "_checkpoint_manager"),
    Private(_CONTROLLER, "_trials_to_cache"),
    Private(_CONTROLLER, "_trial_metadata"),
    Private("ray.tune.experiment.trial.Trial", "_state_json"),
    Private("ray.tune.trainable.metadata._TrainingRunMetadata", "_cached_json"),
    Private("ray.tune.utils.serialization", "_CLOUDPICKLE_FALLBACK_TYPE"),
    Private("ray.tune.execution.tune_controller.TrialRunnerWrapper", "_tune_controller"),
    Private(
        "ray.tune.execution.experiment_state._ExperimentCheckpointManager",
        "_sync_every_n_trial_checkpoints",
    ),
    Private(
        "ray.tune.execution.experiment_state._ExperimentCheckpointManager",
        "sync_up_experiment_state",
        ("self", "save_fn", "force", "wait"),
    ),
    Private(
        "ray.tune.execution.experiment_state._ExperimentCheckpointManager",
        "_should_force_sync_up",
    ),
    Private("ray.tune.execution.experiment_state._ExperimentCheckpointManager", "_last_save_time"),
    Private("ray.train._internal.checkpoint_manager._CheckpointManager", "_checkpoint_results"),
    Private(
        "ray.train._internal.checkpoint_manager._CheckpointManager", "_latest_checkpoint_result"
    ),
    Private("ray.tune.experiment.trial.Trial", "_restore_checkpoint_result"),
    Private("ray.tune.Tuner", "_local_tuner"),
    Private("ray.tune.impl.tuner_internal.TunerInternal", "_run_config"),
    Private("ray.tune.impl.tuner_internal.TunerInternal", "_tune_config"),
    Private(_LOGGERS, "_setup_trial", ("self", "trial")),
    Private(_LOGGERS, "_trial_continue"),
    Private(_LOGGERS, "_trial_csv"),
    Private(_LOGGERS, "_trial_files"),
    Private(_TRAINABLE, "_storage"),
    Private(_TRAINABLE, "_trial_info"),
    Private(_TRAINABLE, "_episodes_total"),
    Private(_TRAINABLE, "_time_total"),
    Private(_TRAINABLE, "_timesteps_total"),
    Private("ray.tune.search.optuna.OptunaSearch", "_sampler"),
    Private("ray.tune.search.optuna.OptunaSearch", "_study_name"),
    # --- RLlib: the env runner, its episodes and modules (the fast runner) ----------
    Private(
        _RUNNER,
        "_sample",
        ("self", "num_timesteps", "num_episodes", "explore", "random_actions", "force_reset"),
    ),
    Private(_RUNNER, "_try_env_reset", ("self", "seed", "options")),
    Private(_RUNNER, "_increase_sampled_metrics", ("self", "num_steps", "num_episodes_completed")),
    Private(_RUNNER, "_log_env_steps", ("self", "metric", "num_steps")),
    Private(_RUNNER, "_callbacks"),
    Private(_RUNNER, "_seed"),
    Private(_RUNNER, "_device"),
    Private(_RUNNER, "_weights_seq_no"),
    Private(_RUNNER, "_done_episodes_for_metrics"),
    Private(_RUNNER, "_ongoing_episodes_for_metrics"),
    Private(_RUNNER, "_metrics_num_env_steps_sampled"),
    Private("ray.rllib.algorithms.algorithm_config.AlgorithmConfig", "_module_to_env_connector"),
    Private("ray.rllib.algorithms.algorithm_config.AlgorithmConfig", "_env_to_module_connector"),
    Private(_EPISODE, "_observation_space"),
    Private(_EPISODE, "_action_space"),
    Private(_EPISODE, "_custom_data"),
    Private(_EPISODE, "_start_time"),
    Private(_EPISODE, "_last_step_time"),
    Private(_EPISODE, "_last_added_observation"),
    Private(_EPISODE, "_last_added_infos"),
    Private("ray.rllib.env.utils.infinite_lookback_buffer.InfiniteLookbackBuffer", "_space"),
    Private("ray.rllib.env.utils.infinite_lookback_buffer.InfiniteLookbackBuffer", "_space_struct"),
    Private("ray.rllib.core.rl_module.rl_module.RLModule", "_forward_exploration"),
    Private("ray.rllib.core.rl_module.rl_module.RLModule", "_forward_inference"),
    Private("ray.rllib.core.rl_module.rl_module.RLModule", "_forward_train"),
    Private("ray.rllib.core.rl_module.multi_rl_module.MultiRLModule", "_rl_modules"),
    Private("ray.rllib.connectors.env_to_module.mean_std_filter.MeanStdFilter", "_filters"),
    # --- RLlib: the learner (the lean learners, the lr after an exploit) ------------
    Private(_LEARNER, "_make_batch_if_necessary", ("self", "training_data")),
    Private(_LEARNER, "_set_optimizer_lr", ("optimizer", "lr")),
    Private(_LEARNER, "_get_optimizer_state", ("self",)),
    Private(_LEARNER, "_set_optimizer_state", ("self", "state")),
    Private(_LEARNER, "_check_is_built", ("self", "error")),
    Private(_LEARNER, "_named_optimizers"),
    Private(_LEARNER, "_optimizer_lr_schedules"),
    Private(_LEARNER, "_module_optimizers"),
    Private(_LEARNER, "_params"),
    Private(_LEARNER, "_device"),
    Private(_LEARNER, "_learner_connector"),
    Private(_LEARNER, "_weights_seq_no"),
    Private(_LEARNER, "_metrics_all_modules_num_env_steps_trained"),
    Private(_LEARNER, "_metrics_all_modules_num_module_steps_trained"),
    Private(_TORCH_LEARNER, "_grad_scalers"),
    Private(_TORCH_LEARNER, "_lr_scheduler_classes"),
    Private(_TORCH_LEARNER, "_torch_compile_complete_update"),
    Private(_TORCH_LEARNER, "_torch_compile_forward_train"),
    Private("ray.rllib.core.learner.learner_group.LearnerGroup", "_learner"),
    # --- torch and Optuna --------------------------------------------------------
    Private("torch", "_foreach_norm"),
    Private("torch", "_foreach_mul_"),
    Private("torch", "_C"),
    Private("torch._C", "_set_deterministic_algorithms"),
    Private("optuna.trial.FrozenTrial", "_trial_id"),
    Private("optuna.study.Study", "_storage"),
    # --- the workbench's own, shared between its modules in tune_ext ----------------
    Private("workbench.tune_ext.scheduler_state.ResumableScheduler", "_restored"),
    Private("workbench.tune_ext.pbt_state.ResumablePBT", "_GLOBAL_FIELDS"),
    Private("workbench.tune_ext.result_files", "_rows"),
)
