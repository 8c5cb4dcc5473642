"""The RLlib AlgorithmConfig of a trial, and the param_space Tune samples from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
from ray import tune
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

import sim_ext  # noqa: F401  (registers the sim_ext ids in this process)
from workbench.experiment import envpool_envs
from workbench.experiment.algorithms import FAST_RUNNER_ALGORITHMS, config_class
from workbench.experiment.combination_checks import lean_learner_applies
from workbench.experiment.defaults import Defaults
from workbench.experiment.schema import Experiment
from workbench.experiment.search_space import ParamSpec
from workbench.trial.callbacks import callbacks_class
from workbench.trial.clip_schedule import CLIP_SCHEDULE_KEY
from workbench.trial.fast_runner import FastEnvRunner
from workbench.trial.lean_dqn import LeanDQNTorchLearner
from workbench.trial.lean_learner import LeanPPOTorchLearner, install_lean_weight_sync
from workbench.trial.observation_filter import mean_std_filter

# The learner class of each algorithm in LEAN_LEARNER_ALGORITHMS.
LEAN_LEARNERS: dict[str, type] = {"PPO": LeanPPOTorchLearner, "DQN": LeanDQNTorchLearner}

# Adjusts the RLlib config beyond what experiment files say (from Python).
Configure = Callable[[AlgorithmConfig], AlgorithmConfig]

SIM_EXT_PREFIX = "sim_ext/"
SEED_KEY = "seed"


def make_env(env_id: str, env_config: dict[str, Any]) -> Any:
    """The env creator registered with Tune: runs in every env runner process.

    RLlib hands it the env_config, plus ``num_envs`` when it wants a whole vector env
    (gym_env_vectorize_mode="vector_entry_point"). sim_ext's native vector env steps
    all of them in one C++ call; other Gymnasium ids get Gymnasium's own classes.
    """

    config = dict(env_config)
    num_envs = config.pop("num_envs", None)
    if env_id.startswith(envpool_envs.PREFIX):
        envpool_envs.register()  # in each env runner's process
    if num_envs is None:
        return gym.make(env_id, **config)
    return gym.make_vec(
        env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **config
    )


def register_env(env_id: str) -> str:
    """Registers the creator under the env id (idempotent; again before a restore)."""
    tune.register_env(env_id, lambda cfg: make_env(env_id, dict(cfg)))
    return env_id


def vectorize_mode(exp: Experiment) -> str:
    """RLlib's gym_env_vectorize_mode for the experiment ('auto' resolved)."""
    mode = exp.resources.env_runners.vectorize
    if mode == "auto":
        native = exp.env.id.startswith((SIM_EXT_PREFIX, envpool_envs.PREFIX))
        return "vector_entry_point" if native else "sync"
    return mode


def algorithm_config(exp: Experiment, defaults: Defaults) -> AlgorithmConfig:
    """The RLlib config of every trial of this experiment (before Tune samples it), with
    the defaults `resolve` chose for it."""
    training = dict(exp.training)
    clip_schedule = training.get("clip_param")
    if isinstance(clip_schedule, list):  # the lean learner's (resolve refuses it elsewhere)
        training["clip_param"] = float(clip_schedule[0][1])
    config = (
        config_class(exp.algorithm)()
        .environment(env=register_env(exp.env.id), env_config=dict(exp.env.config))
        .training(**training)
        .reporting(**exp.reporting.model_dump(exclude_none=True))
        .callbacks(callbacks_class(torch_threads=defaults.torch_threads))
        .debugging(seed=exp.seed)
    )
    apply_resources(config, exp)
    apply_defaults(config, defaults)
    if exp.env.normalize_observations:
        config.env_runners(env_to_module_connector=mean_std_filter)
    if exp.env_runner == "fast" or (
        exp.env_runner == "auto" and exp.algorithm in FAST_RUNNER_ALGORITHMS
    ):
        config.env_runners(env_runner_cls=FastEnvRunner)
    if lean_learner_applies(exp):
        config.learners(learner_class=LEAN_LEARNERS[exp.algorithm])
        # Weight syncs to the trial's own env runner copy tensors (no object store).
        given = config.callbacks_on_algorithm_init
        hooks: list[Any] = (
            list(given) if isinstance(given, list | tuple) else [given] if given else []
        )
        config.callbacks(on_algorithm_init=[*hooks, install_lean_weight_sync])
        if isinstance(clip_schedule, list):
            config.learners(learner_config_dict={CLIP_SCHEDULE_KEY: clip_schedule})
    return config


def build_config(
    exp: Experiment, defaults: Defaults, configure: Configure | None = None
) -> AlgorithmConfig:
    """The config a run hands to its plan, its pre-flight and Tune: built once, with the
    caller's ``configure`` (a custom learner class or callbacks, from Python) applied once."""
    config = algorithm_config(exp, defaults)
    return configure(config) if configure is not None else config


def apply_resources(config: AlgorithmConfig, exp: Experiment) -> AlgorithmConfig:
    """The experiment's resources section as RLlib settings (in place).

    The trial's placement group is RLlib's default_resource_request of these settings
    (`workbench.plan.resources` reads it back for `plan` and the pre-flight)."""
    res = exp.resources
    return (
        config.env_runners(
            num_env_runners=res.env_runners.count,
            num_envs_per_env_runner=res.env_runners.envs_per_runner,
            num_cpus_per_env_runner=res.env_runners.cpus_each,  # type: ignore[arg-type]  # fractions ok
            gym_env_vectorize_mode=vectorize_mode(exp),
        )
        .resources(
            num_cpus_for_main_process=res.cpus_main,  # type: ignore[arg-type]
            placement_strategy=res.placement_strategy,
        )
        .learners(
            num_learners=res.num_learners,
            num_gpus_per_learner=res.gpus_per_learner,
            num_cpus_per_learner=res.cpus_per_learner,
        )
    )


def with_resources_of(config: AlgorithmConfig, exp: Experiment) -> AlgorithmConfig:
    """A copy of ``config`` with the resources of ``exp`` (a what-if of the plan, or the
    CPU fallback): everything else, a caller's learner class included, unchanged."""
    return apply_resources(config.copy(copy_frozen=False), exp)


def apply_defaults(config: AlgorithmConfig, defaults: Defaults) -> AlgorithmConfig:
    """The model and minibatch the experiment's defaults give (workbench.experiment.defaults);
    the torch threads go with the callbacks class."""
    if defaults.model:
        config.rl_module(model_config=dict(defaults.model))
    minibatch = defaults.minibatch_size(int(config.train_batch_size_per_learner))
    if minibatch is not None:
        config.training(minibatch_size=minibatch)
    return config


def param_space(tune_space: dict[str, ParamSpec], config: AlgorithmConfig) -> dict[str, Any]:
    """Tune's param_space: the config as a dict with the searched keys as domains.

    Each trial gets its own seed, drawn by the (seeded) searcher, so trials use
    different, reproducible random streams (RLlib adds the runner index to it).
    """
    space = config.to_dict()
    for key, spec in tune_space.items():
        space[key] = spec.domain()
    space[SEED_KEY] = tune.randint(0, 2**31 - 1)
    return space
