"""From a schema-valid experiment to one that can run: everything checked that needs
the algorithm, the environment, the search-space file or the results folder.

No Ray is started here: this is what ``workbench validate`` and ``--dry-run`` run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from pydantic import ValidationError

import sim_ext
from workbench.errors import ExperimentError, Problem, did_you_mean, one_of
from workbench.experiment import defaults as wb_defaults
from workbench.experiment import envpool_envs
from workbench.experiment.algorithms import (
    ALGORITHMS,
    FAST_RUNNER_ALGORITHMS,
    LEAN_LEARNER_ALGORITHMS,
    config_class,
    hyperparameter_hint,
    training_parameters,
    tune_key,
)
from workbench.experiment.bounds import BOUNDS, Bound, not_finite, not_int64, value_problem
from workbench.experiment.loading import load_experiment
from workbench.experiment.schema import (
    AshaSection,
    Experiment,
    Pb2Section,
    PbtSection,
    ReplaySection,
)
from workbench.experiment.search_space import (
    KINDS,
    ParamSpec,
    SearchSpace,
    parse_search_space,
    search_space_dirs,
)
from workbench.experiment.yaml_input import read_yaml

# Files Tune writes into an experiment folder; their presence means a run already used it.
_EXPERIMENT_MARKERS = ("tuner.pkl", "experiment_state-*.json", "workbench_experiment.yaml")


@dataclass
class ResolvedExperiment:
    experiment: Experiment
    file: Path
    search_space: SearchSpace
    tune_keys: dict[str, str]  # public name -> key in Tune's param_space
    results_dir: Path
    search_space_file: Path | None = None
    discrete_actions: bool = True
    defaults: wb_defaults.Defaults = field(
        default_factory=lambda: wb_defaults.Defaults("rllib", "not resolved")
    )
    notes: list[str] = field(default_factory=list)

    @property
    def tune_space(self) -> dict[str, ParamSpec]:
        """The search space keyed as Tune's param_space spells it."""
        return {self.tune_keys[name]: spec for name, spec in self.search_space.items()}


def resolve(
    experiment: Experiment, file: Path, *, check_results: bool = True
) -> ResolvedExperiment:
    problems: list[Problem] = []
    where = str(file)
    algo = experiment.algorithm
    valid_params = training_parameters(algo)

    discrete, observation_space = _check_env(experiment, where, problems)
    info = ALGORITHMS[algo]
    for kind, wanted, able in (
        ("discrete", True, info.discrete_actions),
        ("continuous", False, info.continuous_actions),
    ):
        if discrete is wanted and not able:
            capable = one_of(
                a
                for a, i in ALGORITHMS.items()
                if (i.discrete_actions if wanted else i.continuous_actions)
            )
            problems.append(
                Problem(
                    where,
                    "algorithm",
                    f"{algo} cannot act in a {kind} action space ({experiment.env.id}); "
                    f"use {capable}",
                )
            )

    for name, value in experiment.training.items():
        if name not in valid_params:
            problems.append(
                Problem(
                    where,
                    f"training.{name}",
                    f"{algo} has no hyperparameter {name!r}"
                    f"{hyperparameter_hint(name, valid_params)}",
                )
            )
        elif (why := value_problem(name, value)) is not None:
            problems.append(Problem(where, f"training.{name}", why))

    space, space_file = _search_space(experiment, file, problems)
    for name in space:
        if name not in valid_params:
            origin = (
                f"search_space.params.{name}"
                if name in experiment.search_space.params
                else (f"search_space.file ({space_file}): {name}")
            )
            problems.append(
                Problem(
                    where,
                    origin,
                    f"{algo} has no hyperparameter {name!r} to search"
                    f"{hyperparameter_hint(name, valid_params)}",
                )
            )
        elif name in experiment.training:
            problems.append(
                Problem(
                    where,
                    f"training.{name}",
                    "is both fixed here and searched in search_space; keep one",
                )
            )
        else:
            origin = (
                f"search_space.params.{name}"
                if name in experiment.search_space.params
                else f"search_space.file ({space_file}): {name}"
            )
            problems += [Problem(where, origin, why) for why in block_problems(name, space[name])]
    _check_search(experiment, space, where, problems)
    replayed = _check_replay(experiment, space, valid_params, where, problems)
    _check_combinations(experiment, where, problems)
    _check_model(experiment, where, problems)

    points = grid_points(space)
    if experiment.population * points > experiment.max_trials:
        grid = f" x {points:,} grid points" if points > 1 else ""
        problems.append(
            Problem(
                where,
                "population" if points == 1 else "search_space",
                f"would start {experiment.population * points:,} trials (population "
                f"{experiment.population:,}{grid}), more than max_trials "
                f"{experiment.max_trials:,}; shrink the search, or raise max_trials to confirm it",
            )
        )
    storage = Path(experiment.storage).expanduser()
    if storage.exists() and not storage.is_dir():
        problems.append(Problem(where, "storage", f"{storage} is a file; storage must be a folder"))
    results_dir = storage.resolve() / experiment.name
    if check_results:
        check_results_dir(results_dir, experiment, where, problems)
    if not problems:
        problems += _minibatch_problems(experiment, space, where)
    if problems:
        raise ExperimentError(problems)
    keys = {name: tune_key(algo, name) for name in [*space, *replayed]}
    chosen = wb_defaults.choose(
        wanted=experiment.defaults,
        algorithm=algo,
        observation_space=observation_space,
        discrete_actions=discrete,
        model=experiment.model,
        fixed=experiment.training,
        searched=set(space) | set(replayed),
    )
    return ResolvedExperiment(
        experiment=experiment,
        file=file,
        search_space=space,
        tune_keys=keys,
        results_dir=results_dir,
        search_space_file=space_file,
        discrete_actions=bool(discrete),
        defaults=chosen,
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
        config = config_class(experiment.algorithm)()
        value = config.train_batch_size_per_learner or config.train_batch_size
    return (float(value), float(value)) if isinstance(value, int | float) else None


def _minibatch_problems(experiment: Experiment, space: SearchSpace, where: str) -> list[Problem]:
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


def load_and_resolve(
    path: str | Path, overrides: list[str] | None = None, *, check_results: bool = True
) -> ResolvedExperiment:
    file = Path(path)
    return resolve(load_experiment(file, overrides), file, check_results=check_results)


def saved_defaults(data: Any) -> Any:
    """A saved experiment (a results folder's, or its MLflow copy) from before the
    ``defaults`` field trained with RLlib's defaults: read it so, whatever 'auto' picks now,
    or its checkpoints would not fit the networks built for them."""
    if isinstance(data, dict) and "defaults" not in data:
        return {**data, "defaults": "rllib"}
    return data


def load_saved(path: Path, overrides: Sequence[str] = ()) -> ResolvedExperiment:
    """A results folder's saved experiment, resolved for resuming it (saved_defaults'
    reading of files from before the ``defaults`` field, as an override), with a
    resume's ``--set`` ``overrides`` (the CLI admits only stop rules).

    The population is the folder that holds the file, wherever it lies now: a copied or
    moved folder goes on where it lies, never in the folder it was copied from. Files
    written before saved the absolute ``storage`` they were trained in; it is not read."""
    path = Path(path)
    folder = path.parent.resolve()
    raw = read_yaml(path)
    pinned = saved_defaults(raw)
    pins = [] if pinned is raw else [f"defaults={pinned['defaults']}"]
    experiment = load_experiment(path, pins + list(overrides))
    experiment = experiment.model_copy(update={"storage": str(folder.parent)})
    resolved = resolve(experiment, path, check_results=False)
    resolved.results_dir = folder  # its own name, should it have been renamed
    return resolved


def _check_env(
    experiment: Experiment, where: str, problems: list[Problem]
) -> tuple[bool | None, gym.Space[Any] | None]:
    """Builds the env once (its constructor checks env_config): whether its actions are
    discrete (None: unsupported or not built), and its observation space."""
    env_id = experiment.env.id
    if env_id.startswith(envpool_envs.PREFIX) and not envpool_envs.register():
        problems.append(
            Problem(
                where,
                "env.id",
                f"{env_id!r} is one of EnvPool's environments, and EnvPool is not installed "
                f"here: {envpool_envs.INSTALL_HINT}",
            )
        )
        return None, None
    known = set(gym.registry)
    if env_id not in known:
        problems.append(
            Problem(
                where,
                "env.id",
                f"unknown environment {env_id!r}"
                f"{did_you_mean(env_id, known)}; sim_ext ids: {one_of(sim_ext.env_ids())}",
            )
        )
        return None, None
    config = experiment.env.config
    bad = [
        Problem(where, f"env.config.{key}", why)
        for key, value in config.items()
        if (why := _env_value_problem(key, value)) is not None
    ]
    if bad:
        problems += bad
        return None, None
    try:
        env = gym.make(env_id, **config)
    except gym.error.DependencyNotInstalled as err:
        # A third-party env's package (LunarLander's Box2D: the project's box2d extra).
        hint = " (pip install -e '.[box2d]')" if "box2d" in str(err).lower() else ""
        problems.append(Problem(where, "env.id", f"{env_id} cannot be built here: {err}{hint}"))
        return None, None
    except (TypeError, ValueError, AssertionError, OverflowError) as err:
        # The env's own checks (sim_ext names the valid keys), or Gymnasium's asserts.
        problems.append(Problem(where, "env.config", str(err) or type(err).__name__))
        return None, None
    except RuntimeError as err:  # pybind11's casts, a third-party env's own refusal
        why = str(err).split(" (#define")[0] or type(err).__name__
        problems.append(Problem(where, "env.config", f"{env_id} refused it: {why}"))
        return None, None
    try:
        space = env.action_space
        if isinstance(space, gym.spaces.Discrete):
            return True, env.observation_space
        if isinstance(space, gym.spaces.Box):
            return False, env.observation_space
        problems.append(Problem(where, "env.id", f"action space {space} is not supported"))
        return None, env.observation_space
    finally:
        env.close()  # type: ignore[no-untyped-call]


# Keywords gym.make itself takes (not the env's): their values are Gymnasium's to check,
# and it asserts instead of raising a ValueError.
_GYM_MAKE_INTS = {"max_episode_steps": Bound(integer=True, low=1, high=10**9)}


def _env_value_problem(key: str, value: Any) -> str | None:
    bound = _GYM_MAKE_INTS.get(key)
    return bound.problem(value) if bound is not None else not_finite(value) or not_int64(value)


def _check_model(experiment: Experiment, where: str, problems: list[Problem]) -> None:
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


def _search_space(
    experiment: Experiment, file: Path, problems: list[Problem]
) -> tuple[SearchSpace, Path | None]:
    section = experiment.search_space
    space: SearchSpace = {}
    found: Path | None = None
    if section.file is not None:
        candidates = (
            [Path(section.file)]
            if Path(section.file).is_absolute()
            else [d / section.file for d in search_space_dirs(file)]
        )
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            problems.append(
                Problem(
                    str(file),
                    "search_space.file",
                    f"{section.file!r} not found; looked in "
                    + ", ".join(str(c.parent) for c in candidates),
                )
            )
        else:
            try:
                raw = read_yaml(found)
            except ExperimentError as err:
                problems.extend(err.problems)
                raw = None
            if raw is not None and not isinstance(raw, dict):
                problems.append(Problem(str(found), "", "must map hyperparameter names to blocks"))
            elif raw:
                try:
                    space = parse_search_space(raw)
                except ValidationError as err:
                    for e in err.errors():
                        loc = ".".join(str(p) for p in e["loc"])
                        if e["type"] == "extra_forbidden":
                            key = str(e["loc"][-1])
                            problems.append(
                                Problem(
                                    str(found),
                                    loc,
                                    f"unknown key {key!r}"
                                    f"{did_you_mean(key, KINDS)}; valid: {one_of(KINDS)}",
                                )
                            )
                            continue
                        text = e["msg"].removeprefix("Value error, ")
                        shown = "" if isinstance(e.get("input"), dict) else f"{e.get('input')!r}: "
                        problems.append(Problem(str(found), loc, f"{shown}{text}"))
    space.update(section.params)
    return space, found


def _check_search(
    experiment: Experiment, space: SearchSpace, where: str, problems: list[Problem]
) -> None:
    scheduler = experiment.scheduler
    grids = [n for n, s in space.items() if s.kind == "grid"]
    # ASHA and Optuna compare or model the members' values: with none searched, every
    # member trains the same values and only the seeds differ (a seed study is FIFO's).
    for what, uses in (
        ("ASHA", scheduler.type == "asha"),
        ("Optuna's search", experiment.search.type == "optuna"),
    ):
        if uses and not space:
            problems.append(
                Problem(
                    where,
                    "search_space",
                    f"{what} needs at least one searched hyperparameter; none given, so every "
                    "member would train the same values (only the seeds differ); valid: "
                    "search_space.params or search_space.file, or scheduler.type fifo for a "
                    "study of seeds",
                )
            )
    if scheduler.type in ("pbt", "pb2"):
        if not space:
            problems.append(
                Problem(
                    where,
                    "search_space",
                    f"{scheduler.type.upper()} needs at "
                    "least one searched hyperparameter to mutate; none given",
                )
            )
        replaced = experiment.population * scheduler.quantile_fraction
        if replaced < 1:
            problems.append(
                Problem(
                    where,
                    "population",
                    f"{experiment.population} trials x "
                    f"quantile_fraction {scheduler.quantile_fraction} = {replaced:g} < 1: "
                    "no trial would ever be exploited; raise population or quantile_fraction",
                )
            )
    if scheduler.type == "pb2":
        categorical = [n for n, s in space.items() if s.categorical]
        if categorical:
            problems.append(
                Problem(
                    where,
                    "search_space",
                    f"PB2 explores numeric bounds only; "
                    f"{', '.join(categorical)} {'is' if len(categorical) == 1 else 'are'} "
                    "categorical (choice/grid): use PBT, or a numeric block",
                )
            )
    if experiment.search.type == "optuna" and grids:
        problems.append(
            Problem(
                where,
                "search.type",
                f"Optuna cannot enumerate grid blocks "
                f"({', '.join(grids)}); use choice, or search.type 'grid'",
            )
        )
    if experiment.search.type == "grid":
        not_grid = [n for n, s in space.items() if s.kind != "grid"]
        if not space or not_grid:
            problems.append(
                Problem(
                    where,
                    "search.type",
                    "'grid' tries every combination of grid blocks; "
                    + (
                        f"{', '.join(not_grid)} {'is' if len(not_grid) == 1 else 'are'} not "
                        "grid (use search.type 'random' to mix)"
                        if not_grid
                        else "none given"
                    ),
                )
            )


def _check_replay(
    experiment: Experiment,
    space: SearchSpace,
    valid_params: frozenset[str],
    where: str,
    problems: list[Problem],
) -> list[str]:
    """A replayed schedule sets training parameters nothing else sets; returns their names."""
    scheduler = experiment.scheduler
    if not isinstance(scheduler, ReplaySection):
        return []
    names = list(scheduler.schedule[0].values)
    for name in names:
        field = f"scheduler.schedule.0.values.{name}"
        if name not in valid_params:
            problems.append(
                Problem(
                    where,
                    field,
                    f"{experiment.algorithm} has no hyperparameter {name!r} to replay"
                    f"{hyperparameter_hint(name, valid_params)}",
                )
            )
        elif name in experiment.training:
            problems.append(
                Problem(where, field, "is both fixed in training and replayed; keep one")
            )
        elif name in space:
            problems.append(
                Problem(where, field, "is both searched (search_space) and replayed; keep one")
            )
    for index, step in enumerate(scheduler.schedule):
        for name, value in step.values.items():
            if (why := value_problem(name, value)) is not None:
                problems.append(Problem(where, f"scheduler.schedule.{index}.values.{name}", why))
    return names


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


def _check_combinations(experiment: Experiment, where: str, problems: list[Problem]) -> None:
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


def grid_points(space: SearchSpace) -> int:
    """How many configurations the grid blocks make together (1 without grids)."""
    points = 1
    for spec in space.values():
        if spec.kind == "grid":
            points *= len(spec.grid or [])
    return points


def block_problems(name: str, spec: ParamSpec) -> list[str]:
    """Why a search-space block can produce values hyperparameter ``name`` cannot take."""
    bound = BOUNDS.get(name)
    if spec.categorical:
        values = list(getattr(spec, spec.kind))
        return [f"{spec.kind} value {why}" for v in values if (why := value_problem(name, v))]
    low, high = spec.bounds  # type: ignore[misc]
    out = [
        f"{spec.kind} {edge} {why}"
        for edge, value in (("low", low), ("high", high))
        if (why := value_problem(name, value))
    ]
    if bound is not None and bound.integer and spec.kind in ("uniform", "loguniform"):
        out.append(
            f"{name} is an integer and {spec.kind} draws real numbers; use randint, "
            "quniform with an integer q, or choice"
        )
    return out


def check_results_dir(
    results_dir: Path, experiment: Experiment, where: str, problems: list[Problem]
) -> None:
    if results_dir.exists() and not results_dir.is_dir():
        problems.append(Problem(where, "storage", f"{results_dir} exists and is not a folder"))
        return
    if results_dir.is_dir() and any(any(results_dir.glob(m)) for m in _EXPERIMENT_MARKERS):
        problems.append(
            Problem(
                where,
                "storage",
                f"{results_dir} already holds a run of experiment "
                f"{experiment.name!r}; continue it with `workbench resume {results_dir}`, or "
                "choose another name or storage folder",
            )
        )


def describe(resolved: ResolvedExperiment) -> dict[str, Any]:
    """The resolved experiment as plain data (what --dry-run prints and runs save)."""
    data = resolved.experiment.model_dump(mode="json", by_alias=False)
    data["search_space"] = {
        "file": str(resolved.search_space_file) if resolved.search_space_file else None,
        "params": {n: s.model_dump(exclude_none=True) for n, s in resolved.search_space.items()},
    }
    data["results_dir"] = str(resolved.results_dir)
    # Concrete, so that a resume rebuilds the same networks whatever 'auto' would pick then.
    data["defaults"] = resolved.defaults.name
    data["model"] = dict(resolved.defaults.model)
    return data
