"""Populations and their trials found in the MLflow store (every one, one by name or run id,
a trial by name or run id), and the population a `workbench diagnose` TARGET means.

Everything here reads the MLflow store the tracker wrote (not Tune's files), so it
works the same for a local sqlite store and for a tracking server, during a run and
long after the results folder is gone."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.analysis.leaderboards import Population, TrialRun
from workbench.errors import ExperimentError
from workbench.names import (
    PARENT_RUN_TAG,
    RESOLVED_FILE,
    RESULT_CHECKPOINT_TAG,
    RESULT_EPISODES_METRIC,
    RESULT_EVAL_ENV_STEPS_METRIC,
    RESULT_EVAL_TIME_METRIC,
    RESULT_ITERATION_TAG,
    RESULT_RETURN_METRIC,
    RESULT_STD_METRIC,
    RESULT_TRIAL_ID_TAG,
    RESULT_TRIAL_TAG,
    RESULTS_DIR_TAG,
    ROLE_TAG,
    RUN_NAME_TAG,
    TRIAL_ID_TAG,
)
from workbench.tracking.location import results_dir_of
from workbench.tracking.sqlite_reader import RunNotFound
from workbench.tracking.store import open_store
from workbench.trial.candidates import PopulationResult


def result_of(tags: dict[str, str], metrics: dict[str, float]) -> PopulationResult | None:
    """The population's result as its run records it (None: no result recorded)."""
    trial_id = tags.get(RESULT_TRIAL_ID_TAG)
    mean = metrics.get(RESULT_RETURN_METRIC)
    if not trial_id or mean is None:
        return None
    try:
        iteration = int(tags.get(RESULT_ITERATION_TAG, "0"))
    except ValueError:
        iteration = 0
    return PopulationResult(
        trial_id=trial_id,
        trial_name=tags.get(RESULT_TRIAL_TAG, trial_id),
        iteration=iteration,
        checkpoint=tags.get(RESULT_CHECKPOINT_TAG, ""),
        return_mean=float(mean),
        return_std=float(metrics.get(RESULT_STD_METRIC, math.nan)),
        episodes=int(metrics.get(RESULT_EPISODES_METRIC, 0)),
        short_return_mean=math.nan,
        eval_env_steps=int(metrics.get(RESULT_EVAL_ENV_STEPS_METRIC, 0)),
        eval_time_s=float(metrics.get(RESULT_EVAL_TIME_METRIC, 0.0)),
    )


def _population(client: Any, run: Any, experiment_names: dict[str, str]) -> Population:
    info, tags = run.info, run.data.tags
    return Population(
        result=result_of(tags, run.data.metrics),
        scheduler=str(run.data.params.get("scheduler.type", "")),
        run_id=info.run_id,
        name=tags.get(RUN_NAME_TAG, info.run_name),
        experiment=experiment_names.get(info.experiment_id, info.experiment_id),
        experiment_id=info.experiment_id,
        status=info.status,
        start_ms=info.start_time,
        end_ms=info.end_time,
        # Where the folder lies now: a store beside its populations records them by name.
        results_dir=results_dir_of(
            tags.get(RESULTS_DIR_TAG, ""), getattr(client, "tracking_uri", None)
        ),
    )


def populations(
    client: Any, experiment: str | None = None, *, with_trials: bool = False
) -> list[Population]:
    """Every population in the store (newest first), or those of one MLflow experiment;
    `with_trials` reads each one's trials too (`workbench runs`)."""
    experiments = client.search_experiments()
    names = {e.experiment_id: e.name for e in experiments}
    ids = [e.experiment_id for e in experiments if experiment is None or e.name == experiment]
    if not ids:
        return []
    runs = client.search_runs(
        ids, filter_string=f"tags.`{ROLE_TAG}` = 'population'", order_by=["start_time DESC"]
    )
    found = [_population(client, r, names) for r in runs]
    if with_trials:
        for population in found:
            population.trials = trial_runs(client, population)
    return found


def find_population(client: Any, ref: str | None, uri: str) -> Population:
    """A population by parent run id, population name or MLflow experiment (its newest)."""
    every = populations(client)
    if not every:
        raise ExperimentError.single(
            uri, "", "the MLflow store holds no workbench population yet (run `workbench run`)"
        )
    if ref is None:
        chosen = every[0]
    else:
        matches = [p for p in every if ref in (p.run_id, p.name, p.experiment)]
        if not matches:
            names = sorted({p.name for p in every} | {p.experiment for p in every})
            raise ExperimentError.single(
                uri,
                "",
                f"no population or experiment named {ref!r} in the store; it has: "
                + ", ".join(repr(n) for n in names),
            )
        chosen = matches[0]  # newest first
    chosen.trials = trial_runs(client, chosen)
    return chosen


def trial_runs(client: Any, population: Population) -> list[TrialRun]:
    runs = client.search_runs(
        [population.experiment_id],
        filter_string=f"tags.`{PARENT_RUN_TAG}` = '{population.run_id}'",
        max_results=5000,
    )
    out = []
    for run in runs:
        info, data = run.info, run.data
        trial = TrialRun(
            run_id=info.run_id,
            name=data.tags.get(RUN_NAME_TAG, info.run_name),
            trial_id=data.tags.get(TRIAL_ID_TAG, ""),
            status=info.status,
            params=dict(data.params),
            metrics=dict(data.metrics),
            tags=dict(data.tags),
            start_ms=info.start_time,
            end_ms=info.end_time,
        )
        # The score's history; a run logged before the score: the per-iteration mean's.
        key = trial.score_metric
        history = [m.value for m in client.get_metric_history(info.run_id, key)]
        finite = [v for v in history if not math.isnan(v)]
        trial.best_return = max(finite) if finite else math.nan
        out.append(trial)
    return sorted(out, key=lambda t: t.name)


def find_trial(client: Any, ref: str, population_ref: str | None, uri: str) -> TrialRun:
    """A trial by run id, or by name (PPO_00003) / trial id within a population."""
    return find_trial_and_population(client, ref, population_ref, uri)[0]


def find_trial_and_population(
    client: Any, ref: str, population_ref: str | None, uri: str
) -> tuple[TrialRun, Population]:
    """`find_trial`, and the population the trial belongs to (with its trials)."""
    try:
        run = client.get_run(ref)
    except Exception as err:  # no such run (a name, not a run id)
        if not _not_found(err):
            raise
        run = None
    if run is not None and run.data.tags.get(ROLE_TAG) == "trial":
        parent = client.get_run(run.data.tags[PARENT_RUN_TAG])
        population = find_population(client, parent.info.run_id, uri)
    else:
        population = find_population(client, population_ref, uri)
    for trial in population.trials:
        if ref in (trial.run_id, trial.name, trial.trial_id):
            return trial, population
    raise ExperimentError.single(
        uri,
        "",
        f"no trial {ref!r} in population {population.name!r}; it has: "
        + ", ".join(t.name for t in population.trials),
    )


def _not_found(err: Exception) -> bool:
    """No run with that id: the sqlite reader's RunNotFound or MLflow's exception (MLflow
    is imported only when its client is the one reading)."""
    if isinstance(err, RunNotFound):
        return True
    if type(err).__module__.startswith("mlflow"):
        from mlflow.exceptions import MlflowException

        return isinstance(err, MlflowException)
    return False


@dataclass
class Target:
    """What a `workbench diagnose` TARGET means: a population and the trials to read."""

    uri: str
    client: Any
    population: Population
    trials: list[TrialRun]


def find_target(target: str | None, *, store: str | None, population_ref: str | None) -> Target:
    """A results folder (its store, unless `store` says otherwise), an MLflow experiment /
    population name / parent run id (every trial), or one trial by run id or name
    (`population_ref`: the population of a trial name); None: the newest population."""
    folder = Path(target) if target is not None else None
    is_folder = folder is not None and (folder / RESOLVED_FILE).is_file()
    uri, client = open_store(store if store or not is_folder else str(folder))
    if folder is not None and is_folder:
        wanted = str(folder.resolve())
        found = [p for p in populations(client) if p.results_dir == wanted]
        population = found[0] if found else find_population(client, folder.name, uri)
        if found:
            population.trials = trial_runs(client, population)
        return Target(uri, client, population, list(population.trials))
    try:
        population = find_population(client, target, uri)
        return Target(uri, client, population, list(population.trials))
    except ExperimentError as not_population:
        if target is None:  # the store holds no population at all
            raise
        try:
            trial, population = find_trial_and_population(client, target, population_ref, uri)
        except ExperimentError:
            raise ExperimentError.single(
                uri,
                "",
                f"{target!r} is neither a results folder, a population, an experiment nor a "
                f"trial in the store ({not_population.problems[0].message})",
            ) from None
        return Target(uri, client, population, [trial])
