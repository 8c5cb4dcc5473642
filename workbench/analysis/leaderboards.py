"""A population and its trials as the MLflow store records them, and their leaderboards:
the rows `workbench runs` prints as a table, as JSON or as CSV."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any

from workbench.experiment.bounds import BOUNDS
from workbench.names import (
    CLONED_FROM_TAG,
    ERROR_TAG,
    EVAL_EPISODES_METRIC,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    PARENT_RUN_TAG,
    RETURN_METRIC,
    SCORE_METRIC,
    STEP_METRIC,
    STEPS_METRIC,
)
from workbench.trial.candidates import PopulationResult


def finite_or_none(value: float) -> float | None:
    """The value, or None for NaN (a score not yet logged): JSON has no NaN."""
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
            "best_return": finite_or_none(self.best_return),
            "last_score": finite_or_none(self.last_score),
            "last_return": finite_or_none(self.last_return),
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
