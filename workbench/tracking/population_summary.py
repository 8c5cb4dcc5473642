"""The population's summary metrics on its parent run, so populations sort in MLflow.

When a run or a resume ends, the parent run gets ``population/*`` metrics: the best
evaluated return (evaluation.at_end), the best training return, the env steps of all
trials, the wall time (summed over the drivers that ran it: a resume adds its own),
the trials and the errored ones. MLflow's UI sorts and filters runs by metrics, and so
does ``search_runs(order_by=["metrics.`population/best_eval_return_mean` DESC"])``."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from mlflow.entities import Metric, RunTag

from workbench.names import (
    POPULATION_BEST_EVAL_METRIC,
    POPULATION_BEST_RETURN_METRIC,
    POPULATION_ENV_STEPS_METRIC,
    POPULATION_ERRORS_METRIC,
    POPULATION_TRIALS_METRIC,
    POPULATION_WALL_TIME_METRIC,
    RESULT_CHECKPOINT_TAG,
    RESULT_EPISODES_METRIC,
    RESULT_EVAL_ENV_STEPS_METRIC,
    RESULT_EVAL_TIME_METRIC,
    RESULT_ITERATION_TAG,
    RESULT_RETURN_METRIC,
    RESULT_STD_METRIC,
    RESULT_TRIAL_ID_TAG,
    RESULT_TRIAL_TAG,
)
from workbench.trial.candidates import PopulationResult


@dataclass
class PopulationSummary:
    """What one driver knows of its population when it ends (NaN: not known)."""

    trials: int
    errors: int
    env_steps: int
    wall_time_s: float  # this driver's
    best_return: float = math.nan
    best_eval_return: float = math.nan  # the end-of-run evaluation, if there was one


def log_population_summary(
    client: Any, run_id: str, summary: PopulationSummary
) -> dict[str, float]:
    """Writes the summary as ``population/*`` metrics to the parent run (step 0; a later
    driver's values replace them as MLflow's latest) and returns what it wrote. The wall
    time adds to what earlier drivers of the population logged; values not known now (no
    evaluation after an interrupted resume) keep what was logged before."""
    before = client.get_run(run_id).data.metrics
    metrics = {
        POPULATION_TRIALS_METRIC: float(summary.trials),
        POPULATION_ERRORS_METRIC: float(summary.errors),
        POPULATION_ENV_STEPS_METRIC: float(summary.env_steps),
        POPULATION_WALL_TIME_METRIC: before.get(POPULATION_WALL_TIME_METRIC, 0.0)
        + summary.wall_time_s,
        POPULATION_BEST_RETURN_METRIC: summary.best_return,
        POPULATION_BEST_EVAL_METRIC: summary.best_eval_return,
    }
    written = {k: v for k, v in metrics.items() if math.isfinite(v)}
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in written.items()])
    return written


def log_population_result(client: Any, run_id: str, result: PopulationResult) -> None:
    """The population's result on its parent run: ``result/*`` metrics (its confirming
    evaluation and what choosing it cost) and ``workbench.result.*`` tags (whose policy,
    of which iteration, where its checkpoint lies in the results folder), which the
    inspection commands read (`workbench.analysis.populations`)."""
    now = int(time.time() * 1000)
    metrics = {
        RESULT_RETURN_METRIC: result.return_mean,
        RESULT_STD_METRIC: result.return_std,
        RESULT_EPISODES_METRIC: float(result.episodes),
        RESULT_EVAL_ENV_STEPS_METRIC: float(result.eval_env_steps),
        RESULT_EVAL_TIME_METRIC: result.eval_time_s,
        # The figure the population's summary sorts on is the result's.
        POPULATION_BEST_EVAL_METRIC: result.return_mean,
    }
    tags = {
        RESULT_TRIAL_ID_TAG: result.trial_id,
        RESULT_TRIAL_TAG: result.trial_name,
        RESULT_ITERATION_TAG: str(result.iteration),
        RESULT_CHECKPOINT_TAG: result.checkpoint,
    }
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in metrics.items() if math.isfinite(v)],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
