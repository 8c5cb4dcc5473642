"""From a schema-valid experiment to one that can run: everything checked that needs
the algorithm, the environment, the search-space file or the results folder.

This module runs the checks in order (the env's, the search space's and the rules across
sections live in env_checks, search_checks and combination_checks), checks the training
section and the results folder itself, and builds the ResolvedExperiment. No Ray is started
here: this is what ``workbench validate`` and ``--dry-run`` run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import ExperimentError, Problem
from workbench.experiment import defaults as wb_defaults
from workbench.experiment.algorithms import hyperparameter_hint, training_parameters, tune_key
from workbench.experiment.bounds import value_problem
from workbench.experiment.combination_checks import (
    check_combinations,
    check_model,
    minibatch_problems,
)
from workbench.experiment.env_checks import check_action_space, check_env
from workbench.experiment.loading import load_experiment
from workbench.experiment.schema import Experiment
from workbench.experiment.search_checks import (
    check_replay,
    check_search,
    check_searched,
    grid_points,
    read_search_space,
)
from workbench.experiment.search_space import ParamSpec, SearchSpace
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

    discrete, observation_space = check_env(experiment, where, problems)
    check_action_space(experiment, discrete, where, problems)
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

    space, space_file = read_search_space(experiment, file, problems)
    check_searched(experiment, space, space_file, valid_params, where, problems)
    check_search(experiment, space, where, problems)
    replayed = check_replay(experiment, space, valid_params, where, problems)
    check_combinations(experiment, where, problems)
    check_model(experiment, where, problems)

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
        problems += minibatch_problems(experiment, space, where)
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
