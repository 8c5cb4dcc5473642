"""The rules that span sections (env runner, learner, scheduler against checkpoints,
evaluation and search, stop rules, minibatch against train batch) and the model section's."""

from __future__ import annotations

from workbench.errors import Problem, did_you_mean, one_of
from workbench.experiment import defaults as wb_defaults
from workbench.experiment.algorithms import (
    FAST_RUNNER_ALGORITHMS,
    LEAN_LEARNER_ALGORITHMS,
    default_train_batch,
    training_parameters,
)
from workbench.experiment.schema import AshaSection, Experiment, Pb2Section, PbtSection
from workbench.experiment.search_space import SearchSpace


def lean_learner_applies(experiment: Experiment) -> bool:
    """Whether trials update with a lean learner (workbench.trial.lean_learner for PPO,
    workbench.trial.lean_dqn for DQN: one local CPU learner, unless the file asks for
    RLlib's)."""
    res = experiment.resources
    return (
        experiment.learner != "rllib"
        and experiment.algorithm in LEAN_LEARNER_ALGORITHMS
        and (experiment.learner == "lean" or (res.num_learners == 0 and not res.gpus_per_learner))
    )


def _check_learner(experiment: Experiment, where: str, problems: list[Problem]) -> None:
    """The learner field, and the schedules only the lean learner runs (clip_param)."""
    if experiment.learner == "lean" and experiment.algorithm not in LEAN_LEARNER_ALGORITHMS:
        problems.append(
            Problem(
                where,
                "learner",
                f"'lean' updates {', '.join(LEAN_LEARNER_ALGORITHMS)}, not "
                f"{experiment.algorithm}; valid here: 'auto' or 'rllib'",
            )
        )
    res = experiment.resources
    lean_runs = lean_learner_applies(experiment) and res.num_learners == 0
    if isinstance(experiment.training.get("clip_param"), list) and not (
        lean_runs and not res.gpus_per_learner
    ):
        problems.append(
            Problem(
                where,
                "training.clip_param",
                "a clip_param schedule needs the lean learner (learner 'auto' or 'lean', "
                "PPO, resources.num_learners 0 and no GPU); RLlib's own learner takes a "
                "number",
            )
        )


def check_combinations(experiment: Experiment, where: str, problems: list[Problem]) -> None:
    """Rules that span sections."""

    if experiment.env_runner == "fast" and experiment.algorithm not in FAST_RUNNER_ALGORITHMS:
        problems.append(
            Problem(
                where,
                "env_runner",
                f"'fast' samples for {', '.join(FAST_RUNNER_ALGORITHMS)}, not "
                f"{experiment.algorithm}; valid here: 'auto' or 'rllib'",
            )
        )
    _check_learner(experiment, where, problems)
    scheduler = experiment.scheduler
    population_based = isinstance(scheduler, PbtSection | Pb2Section)
    if (
        isinstance(scheduler, PbtSection | Pb2Section)
        and scheduler.rank_on == "evaluation"
        and experiment.evaluation.every == 0
    ):
        problems.append(
            Problem(
                where,
                "scheduler.rank_on",
                "'evaluation' ranks members on their short evaluations, which "
                "evaluation.every: 0 turns off; valid here: 'score', or evaluation.every >= 1",
            )
        )
    if population_based and experiment.search.type == "optuna":
        problems.append(
            Problem(
                where,
                "search.type",
                "'optuna' cannot drive a population-based scheduler: "
                "PBT/PB2 replace trials' configs with mutated copies that the searcher never "
                "suggested (Tune refuses the pair). Use search.type 'random' with PBT/PB2, "
                "or Optuna with scheduler 'asha' or 'fifo'",
            )
        )
    if isinstance(scheduler, PbtSection | Pb2Section):
        keep, frequency = experiment.checkpoint.keep, experiment.checkpoint.frequency
        if keep < 3:
            problems.append(
                Problem(
                    where,
                    "checkpoint.keep",
                    f"{keep} is too few under "
                    f"{scheduler.type.upper()}: a donor's checkpoint can be deleted before a "
                    "trial clones it; keep at least 3",
                )
            )
        if frequency > scheduler.perturbation_interval:
            problems.append(
                Problem(
                    where,
                    "checkpoint.frequency",
                    f"{frequency} exceeds "
                    f"scheduler.perturbation_interval = {scheduler.perturbation_interval}: "
                    "exploits would clone stale checkpoints; use a frequency <= the interval",
                )
            )
    if (
        not experiment.stop.tune_stop()
        and experiment.stop.wall_time_s is None
        and experiment.stop.population_env_steps is None
        and not isinstance(scheduler, AshaSection)
    ):
        problems.append(
            Problem(
                where,
                "stop",
                "give at least one rule (return_mean, iterations, env_steps, "
                "wall_time_s, trial_time_s, population_env_steps or metrics), or the "
                "trials never end",
            )
        )


def check_model(experiment: Experiment, where: str, problems: list[Problem]) -> None:
    """The model section names DefaultModelConfig fields; small_env fits its algorithm."""
    valid = wb_defaults.model_fields()
    for name, value in experiment.model.items():
        if name not in valid:
            problems.append(
                Problem(
                    where,
                    f"model.{name}",
                    f"RLlib's DefaultModelConfig has no field {name!r}"
                    f"{did_you_mean(name, valid)}; valid: {one_of(valid)}",
                )
            )
        elif name.endswith("_hiddens") and not (
            isinstance(value, list)
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
        ):
            problems.append(
                Problem(
                    where,
                    f"model.{name}",
                    f"{value!r} is not a list of layer sizes; give positive integers, "
                    "e.g. [64, 64]",
                )
            )
    if (
        experiment.defaults == "small_env"
        and experiment.algorithm not in wb_defaults.SMALL_ENV_ALGORITHMS
    ):
        problems.append(
            Problem(
                where,
                "defaults",
                f"'small_env' sets the on-policy MLP modules of "
                f"{', '.join(wb_defaults.SMALL_ENV_ALGORITHMS)}, not {experiment.algorithm}'s; "
                "use 'auto' or 'rllib' (and the model section for the network)",
            )
        )


def _extent(name: str, experiment: Experiment, space: SearchSpace) -> tuple[float, float] | None:
    """The smallest and largest value a trial can train with: the searched block's, the
    fixed value, or RLlib's default (None: unset and no default)."""
    spec = space.get(name)
    if spec is not None:
        if spec.bounds is not None:
            return spec.bounds
        values = [v for v in getattr(spec, spec.kind) if isinstance(v, int | float)]
        return (min(values), max(values)) if values else None
    value = experiment.training.get(name)
    if value is None and name == "train_batch_size_per_learner":
        value = default_train_batch(experiment.algorithm)
    return (float(value), float(value)) if isinstance(value, int | float) else None


def minibatch_problems(experiment: Experiment, space: SearchSpace, where: str) -> list[Problem]:
    """RLlib refuses a trial whose minibatch is larger than its train batch, when the trial
    starts: refused here instead, with the values that collide."""
    if "minibatch_size" not in training_parameters(experiment.algorithm):
        return []
    minibatch = _extent("minibatch_size", experiment, space)
    batch = _extent("train_batch_size_per_learner", experiment, space)
    if minibatch is None or batch is None or minibatch[1] <= batch[0]:
        return []
    field = (
        "search_space: minibatch_size" if "minibatch_size" in space else "training.minibatch_size"
    )
    return [
        Problem(
            where,
            field,
            f"minibatch_size {'up to ' if minibatch[0] < minibatch[1] else 'of '}"
            f"{minibatch[1]:g} is larger than train_batch_size_per_learner "
            f"of {batch[0]:g} (RLlib refuses such a trial when it starts); valid: a "
            f"minibatch_size of at most {batch[0]:g}, or a larger train batch",
        )
    ]
