"""Reading populations back from MLflow: leaderboards, one trial in detail, lineage, plots.

Everything here reads the MLflow store the tracker wrote (not Tune's files), so it
works the same for a local sqlite store and for a tracking server, during a run and
long after the results folder is gone. The views the inspection commands print (a
population and its trials as JSON, one trial in detail, a population's lineage, the
population a `workbench diagnose` TARGET means) are built here, not in the CLI."""

from __future__ import annotations

import csv
import io
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.analysis.lineage import (
    Schedule,
    Segment,
    ancestry,
    parse_jsonl,
    render_tree,
    stitched_schedule,
)
from workbench.errors import ExperimentError
from workbench.experiment.bounds import BOUNDS
from workbench.lineage_record import LineageRecord
from workbench.names import (
    CLONED_FROM_TAG,
    ERROR_TAG,
    EVAL_EPISODES_METRIC,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    LINEAGE_FILE,
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
    RETURN_METRIC,
    ROLE_TAG,
    RUN_NAME_TAG,
    SCORE_METRIC,
    STEP_METRIC,
    STEPS_METRIC,
    TRIAL_ID_TAG,
)
from workbench.tracking.location import artifact_names, download_artifact, results_dir_of
from workbench.tracking.sqlite_reader import RunNotFound
from workbench.tracking.store import open_store
from workbench.trial.candidates import PopulationResult


def _finite_or_none(value: float) -> float | None:
    return None if math.isnan(value) else value


# Metrics that count (iterations, steps, episodes): MLflow keeps every metric as a float.
_COUNT_NAMES = frozenset({STEP_METRIC, "iterations_since_restore", "episodes"})


def hp_value(name: str, value: Any) -> Any:
    """A hyperparameter's value as its kind has it: an integer one (minibatch_size, whose
    hp/ metric MLflow keeps as 256.0) as an int."""
    bound = BOUNDS.get(name)
    if bound is not None and bound.integer and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def metric_value(key: str, value: float) -> float | int:
    """A metric's value, a count (training_iteration, num_*, *_lifetime, episodes) as an
    int; an hp/ metric as `hp_value` has it."""
    if key.startswith("hp/"):
        return hp_value(key[3:], value)  # type: ignore[no-any-return]
    last = key.rsplit("/", 1)[-1]
    counts = last in _COUNT_NAMES or last.startswith("num_") or last.endswith("_lifetime")
    if counts and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return value


@dataclass
class TrialRun:
    run_id: str
    name: str
    trial_id: str
    status: str
    params: dict[str, str]
    metrics: dict[str, float]  # last values
    tags: dict[str, str]
    start_ms: int
    end_ms: int | None
    # The best of the trial's scores over its history (score_metric's values).
    best_return: float = math.nan

    @property
    def score_metric(self) -> str:
        """What the trial is ranked by: its score (the mean return of the last K
        episodes), or for a run logged before the score, the per-iteration mean return."""
        return SCORE_METRIC if SCORE_METRIC in self.metrics else RETURN_METRIC

    @property
    def last_score(self) -> float:
        return self.metrics.get(self.score_metric, math.nan)

    @property
    def last_return(self) -> float:
        """The per-iteration mean return (RLlib's, the episodes of one iteration)."""
        return self.metrics.get(RETURN_METRIC, math.nan)

    @property
    def iteration(self) -> int:
        return int(self.metrics.get(STEP_METRIC, 0))

    @property
    def env_steps(self) -> int:
        return int(self.metrics.get(STEPS_METRIC, 0))

    @property
    def parent_run_id(self) -> str:
        """The run id of the trial's population."""
        return self.tags[PARENT_RUN_TAG]

    @property
    def cloned_from(self) -> str | None:
        """The donor of the trial's last PBT exploit (None: it was never cloned)."""
        return self.tags.get(CLONED_FROM_TAG)

    @property
    def error(self) -> str | None:
        """The trial's final failure (a traceback), if it failed."""
        return self.tags.get(ERROR_TAG)

    @property
    def eval_return(self) -> float | None:
        """The mean return of the trial's last evaluation (the one that confirmed a stop,
        the end of the run's or `workbench eval`'s), if it was evaluated."""
        return self.metrics.get(EVAL_RETURN_METRIC)

    @property
    def evaluation(self) -> tuple[float, float | None, int | None] | None:
        """The last evaluation as (mean, std, episodes); None if never evaluated."""
        mean = self.metrics.get(EVAL_RETURN_METRIC)
        if mean is None:
            return None
        episodes = self.metrics.get(EVAL_EPISODES_METRIC)
        return mean, self.metrics.get(EVAL_STD_METRIC), None if episodes is None else int(episodes)

    def hyperparameters(self) -> dict[str, Any]:
        """Current values: numeric ones from hp/* metrics, categorical ones from tags."""
        out: dict[str, Any] = {k[3:]: v for k, v in self.tags.items() if k.startswith("hp/")}
        out.update(
            {k[3:]: hp_value(k[3:], v) for k, v in self.metrics.items() if k.startswith("hp/")}
        )
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        """The trial as a row of a population's leaderboard (`workbench runs --json`)."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "trial_id": self.trial_id,
            "status": self.status,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "ranked_by": self.score_metric,
            "best_return": _finite_or_none(self.best_return),
            "last_score": _finite_or_none(self.last_score),
            "last_return": _finite_or_none(self.last_return),
            "cloned_from": self.cloned_from,
            "eval_return": self.eval_return,
            "eval_return_std": self.metrics.get(EVAL_STD_METRIC),
            "eval_episodes": (self.evaluation or (None, None, None))[2],
            "hyperparameters": self.hyperparameters(),
        }


@dataclass
class Population:
    run_id: str
    name: str
    experiment: str
    experiment_id: str
    status: str
    start_ms: int
    end_ms: int | None
    results_dir: str
    trials: list[TrialRun] = field(default_factory=list)
    # The population's result (workbench.run.population_result): the member whose
    # evaluated policy the population hands over. None: none chosen (still running,
    # interrupted, evaluation.at_end: none, or a population from before results).
    result: PopulationResult | None = None
    scheduler: str = ""  # its experiment's scheduler.type ("" in a store from before)

    def best(self) -> TrialRun | None:
        """The member holding the population's result; without one, the member with the
        best training score."""
        if self.result is not None:
            for trial in self.trials:
                if trial.trial_id == self.result.trial_id:
                    return trial
        scored = [t for t in self.trials if not math.isnan(t.best_return)]
        return max(scored, key=lambda t: t.best_return) if scored else None

    def result_line(self) -> str:
        """The population's result in one line, or why there is none."""
        if self.result is None:
            return (
                "No result chosen (evaluated candidates are chosen when a population ends); "
                "best by training score: " + (b.name if (b := self.best()) else "-")
            )
        return f"The population's result: {self.result.summary()}"

    def to_json(self) -> dict[str, Any]:
        """The population and its leaderboard (`workbench runs --json`)."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "experiment": self.experiment,
            "status": self.status,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "results_dir": self.results_dir,
            "result": self.result.to_json() if self.result is not None else None,
            "trials": [t.to_json() for t in leaderboard(self)],
        }


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


def leaderboard(population: Population) -> list[TrialRun]:
    """Trials ordered by their best score (unscored last)."""
    return sorted(
        population.trials,
        key=lambda t: (math.isnan(t.best_return), -(t.best_return if t else 0), t.name),
    )


def leaderboard_csv(population: Population) -> str:
    """The leaderboard as CSV (`workbench runs POP --csv`): one row per trial, ranked as
    `runs` ranks them, the columns of `--json` with each hyperparameter as `hp/<name>`."""
    board = leaderboard(population)
    hps = sorted({k for t in board for k in t.hyperparameters()})
    columns = (
        [
            "rank",
            *(k for k in board[0].to_json() if k != "hyperparameters"),
            *(f"hp/{k}" for k in hps),
        ]
        if board
        else ["rank"]
    )
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    for rank, trial in enumerate(board, 1):
        row = trial.to_json()
        values = row.pop("hyperparameters")
        writer.writerow({"rank": rank, **row, **{f"hp/{k}": values.get(k) for k in hps}})
    return out.getvalue()


def populations_csv(found: list[Population]) -> str:
    """The populations as CSV (`workbench runs --csv`): one row each, with its result."""
    columns = [
        "name",
        "experiment",
        "status",
        "trials",
        "result",
        "result_std",
        "result_episodes",
        "result_trial",
        "start_ms",
        "end_ms",
        "run_id",
        "results_dir",
    ]
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    for pop in found:
        result = pop.result
        writer.writerow(
            {
                "name": pop.name,
                "experiment": pop.experiment,
                "status": pop.status,
                "trials": len(pop.trials),
                "result": result.return_mean if result else None,
                "result_std": result.return_std if result else None,
                "result_episodes": result.episodes if result else None,
                "result_trial": result.trial_name if result else None,
                "start_ms": pop.start_ms,
                "end_ms": pop.end_ms,
                "run_id": pop.run_id,
                "results_dir": pop.results_dir,
            }
        )
    return out.getvalue()


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


def metric_history(client: Any, run_id: str, key: str) -> list[tuple[int, float, int]]:
    """(step, value, timestamp ms), ordered by step."""
    return sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, key))


def hyperparameter_history(client: Any, trial: TrialRun) -> dict[str, list[tuple[int, Any]]]:
    """hp -> [(iteration, value)]: the value each Tune iteration was trained with.

    After an exploit a trial repeats iterations (it continues from its donor's);
    the later values win, which is the history its final policy went through.
    """
    iteration_at = {s: int(v) for s, v, _ in metric_history(client, trial.run_id, STEP_METRIC)}
    out: dict[str, list[tuple[int, Any]]] = {}
    for key in sorted(k for k in trial.metrics if k.startswith("hp/")):
        by_iteration: dict[int, float] = {}
        for step, value, _ in metric_history(client, trial.run_id, key):
            by_iteration[iteration_at.get(step, step)] = hp_value(key[3:], value)
        out[key[3:]] = sorted(by_iteration.items())
    for key, text in trial.tags.items():
        if key.startswith("hp/") and key[3:] not in out:
            out[key[3:]] = [(1, text)]
    return out


def step_schedule(client: Any, trial: TrialRun) -> list[tuple[int, int, dict[str, float]]]:
    """(step, iteration, values) at every step where a searched value changed."""
    iteration_at = {s: int(v) for s, v, _ in metric_history(client, trial.run_id, STEP_METRIC)}
    keys = sorted(k for k in trial.metrics if k.startswith("hp/"))
    values: dict[int, dict[str, float]] = {}
    for key in keys:
        for step, value, _ in metric_history(client, trial.run_id, key):
            values.setdefault(step, {})[key[3:]] = hp_value(key[3:], value)
    out: list[tuple[int, int, dict[str, float]]] = []
    last: dict[str, float] | None = None
    for step in sorted(values):
        if values[step] != last:
            out.append((step, iteration_at.get(step, step), values[step]))
            last = values[step]
    return out


def lineage_records(client: Any, population: Population) -> list[LineageRecord]:
    """The population's exploits, from the parent run's lineage.jsonl artifact."""
    if LINEAGE_FILE not in artifact_names(client, population.run_id):
        return []
    with tempfile.TemporaryDirectory() as tmp:
        path = download_artifact(client, population.run_id, LINEAGE_FILE, tmp)
        return parse_jsonl(Path(path).read_text())


def trial_ancestry(
    client: Any, population: Population, records: list[LineageRecord], trial: TrialRun
) -> tuple[list[Any], dict[str, list[tuple[int, Any]]]]:
    """The segments the trial's final policy went through, and its stitched schedule."""
    segments = ancestry(records, trial.trial_id, trial.iteration, name=trial.name)
    by_id = {t.trial_id: t for t in population.trials}
    histories = {
        seg.trial_id: hyperparameter_history(client, by_id[seg.trial_id])
        for seg in segments
        if seg.trial_id in by_id
    }
    return segments, stitched_schedule(segments, histories)


def metric_histories(client: Any, trial: TrialRun, prefix: str) -> dict[int, dict[str, float]]:
    """step -> {name without the prefix: value} for every metric of the trial's run under
    ``prefix`` (for example ``workbench/``: the per-iteration time split)."""
    out: dict[int, dict[str, float]] = {}
    for key in sorted(k for k in trial.metrics if k.startswith(prefix)):
        for step, value, _ in metric_history(client, trial.run_id, key):
            out.setdefault(step, {})[key[len(prefix) :]] = value
    return dict(sorted(out.items()))


@dataclass
class TrialDetail:
    """One trial in detail (`workbench show`): its run, its population, where its searched
    values changed and the ancestry its final policy went through."""

    trial: TrialRun
    population: Population
    schedule: list[tuple[int, int, dict[str, float]]]  # (step, iteration, values)
    segments: list[Segment]
    stitched: Schedule

    def to_json(self) -> dict[str, Any]:
        trial = self.trial
        return {
            "run_id": trial.run_id,
            "name": trial.name,
            "trial_id": trial.trial_id,
            "status": trial.status,
            "population": self.population.name,
            "params": trial.params,
            "metrics": {k: metric_value(k, v) for k, v in trial.metrics.items()},
            "best_return": _finite_or_none(trial.best_return),
            "error": trial.error,
            "schedule": [{"step": s, "iteration": i, "values": v} for s, i, v in self.schedule],
            "ancestry": [
                {
                    "trial_id": seg.trial_id,
                    "name": seg.trial_name,
                    "first_iteration": seg.first_iteration,
                    "last_iteration": seg.last_iteration,
                }
                for seg in self.segments
            ],
            "stitched_schedule": self.stitched,
        }


def trial_detail(client: Any, ref: str, population_ref: str | None, uri: str) -> TrialDetail:
    """A trial by run id, or by name / trial id within a population, in detail."""
    trial, population = find_trial_and_population(client, ref, population_ref, uri)
    records = lineage_records(client, population)
    segments, stitched = trial_ancestry(client, population, records, trial)
    return TrialDetail(trial, population, step_schedule(client, trial), segments, stitched)


# The schedulers that clone one member's weights into another (the lineage's exploits).
CLONING_SCHEDULERS = ("pbt", "pb2")


@dataclass
class PopulationLineage:
    """Who cloned whom in a population (`workbench lineage`)."""

    population: Population
    records: list[LineageRecord]

    @property
    def best_trial_id(self) -> str | None:
        best = self.population.best()
        return best.trial_id if best else None

    @property
    def trials(self) -> dict[str, tuple[str, int]]:
        """trial id -> (name, last iteration): the tree's nodes."""
        return {t.trial_id: (t.name, t.iteration) for t in self.population.trials}

    @property
    def best_iteration(self) -> int | None:
        """The iteration of the population's result (None: the best trial's final one)."""
        result = self.population.result
        return result.iteration if result is not None and result.iteration > 0 else None

    def tree(self) -> str:
        """The tree as text, the ancestry of the population's result marked."""
        scheduler = self.population.scheduler
        # A scheduler that never clones a member has no exploits to wait for.
        never = bool(scheduler) and scheduler not in CLONING_SCHEDULERS
        return render_tree(
            self.trials,
            self.records,
            self.best_trial_id,
            self.best_iteration,
            no_exploits=(
                f"no exploits: {scheduler} does not clone members, PBT and PB2 do"
                if never
                else "no exploits yet"
            ),
        )

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.records]


def population_lineage(client: Any, ref: str | None, uri: str) -> PopulationLineage:
    """The exploits of a population by parent run id, name or MLflow experiment."""
    population = find_population(client, ref, uri)
    return PopulationLineage(population, lineage_records(client, population))


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
