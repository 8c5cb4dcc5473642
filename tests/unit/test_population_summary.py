"""The population's summary metrics on its parent run sort populations in MLflow, a resume
adds its wall time, and every run carries where it came from (MLflow's source and git
tags), with or without a git repository."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from tests.support.stores import new_store
from workbench.names import (
    GIT_DIRTY_TAG,
    POPULATION_BEST_EVAL_METRIC,
    POPULATION_ENV_STEPS_METRIC,
    POPULATION_WALL_TIME_METRIC,
)
from workbench.tracking.population_summary import PopulationSummary, log_population_summary
from workbench.tracking.run_context import source_tags


def test_summary_metrics_sort_populations(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    evaluated = {"low": 120.0, "high": 480.0, "middle": 300.0}
    for name, value in evaluated.items():
        run_id = store.population(name)
        summary = PopulationSummary(
            trials=4, errors=0, env_steps=1000, wall_time_s=60.0, best_eval_return=value
        )
        log_population_summary(store.client, run_id, summary)
    experiment = store.experiment("exp")
    ranked = store.client.search_runs(
        [experiment], order_by=[f"metrics.`{POPULATION_BEST_EVAL_METRIC}` DESC"]
    )
    assert [r.info.run_name for r in ranked] == ["high", "middle", "low"]
    good = store.client.search_runs(
        [experiment], filter_string=f"metrics.`{POPULATION_BEST_EVAL_METRIC}` > 200"
    )
    assert {r.info.run_name for r in good} == {"high", "middle"}


def test_a_resume_adds_its_wall_time_and_keeps_what_it_does_not_know(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    run_id = store.population("pop")
    first = PopulationSummary(
        trials=2, errors=0, env_steps=500, wall_time_s=40.0, best_eval_return=200.0
    )
    log_population_summary(store.client, run_id, first)
    # The resume was interrupted: no evaluation, more steps, another 25 s.
    resumed = PopulationSummary(trials=2, errors=1, env_steps=900, wall_time_s=25.0)
    written = log_population_summary(store.client, run_id, resumed)
    assert POPULATION_BEST_EVAL_METRIC not in written
    metrics = store.client.get_run(run_id).data.metrics
    assert metrics[POPULATION_WALL_TIME_METRIC] == pytest.approx(65.0)
    assert metrics[POPULATION_ENV_STEPS_METRIC] == 900
    assert metrics[POPULATION_BEST_EVAL_METRIC] == 200.0
    assert metrics["population/errors"] == 1 and metrics["population/trials"] == 2
    assert all(math.isfinite(v) for v in metrics.values())


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_source_tags_name_the_commit_and_whether_the_tree_was_dirty(tmp_path: Path) -> None:
    repo = tmp_path / "project"
    (repo / "experiments").mkdir(parents=True)
    file = repo / "experiments" / "a.yaml"
    file.write_text("name: a\n")
    _git(repo, "init", "-q", "-b", "trunk")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    commit = _git(repo, "rev-parse", "HEAD")
    tags = source_tags(file)
    assert tags["mlflow.source.name"] == str(file.resolve())
    assert tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.git.commit"] == commit
    assert tags["mlflow.source.git.branch"] == "trunk"
    assert tags[GIT_DIRTY_TAG] == "false"
    file.write_text("name: b\n")
    assert source_tags(file)[GIT_DIRTY_TAG] == "true"


def test_outside_a_repository_only_the_source_is_tagged(tmp_path: Path) -> None:
    file = tmp_path / "a.yaml"
    file.write_text("name: a\n")
    assert source_tags(file) == {
        "mlflow.source.name": str(file.resolve()),
        "mlflow.source.type": "LOCAL",
    }
