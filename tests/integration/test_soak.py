"""The soak drill: a PBT population killed (SIGKILL, the driver only, as a lost node or an
OOM kill would) at random points several times, resumed each time; at the end its MLflow
runs, its lineage and its results rows agree."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.support.experiments import small_pbt, write_experiment
from tests.support.results import count_results, result_rows
from workbench.analysis.lineage import check_sequence, read_jsonl
from workbench.names import LINEAGE_FILE, ROLE_TAG, STEP_METRIC
from workbench.trial.candidates import evaluations, kept, read_result
from workbench.trial.manifest import problem

WORKBENCH = str(Path(sys.executable).parent / "workbench")
ITERATIONS = 30
KILLS = 2


def _start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [WORKBENCH, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def test_killed_and_resumed_again_and_again_the_records_agree(tmp_path: Path) -> None:
    rng = random.Random(7)
    space = {"params": {"lr": {"loguniform": [1e-4, 3e-3]}}}
    data = small_pbt(
        tmp_path,
        population=2,
        search_space=space,
        stop={"iterations": ITERATIONS},
        scheduler={"type": "pbt", "perturbation_interval": 1, "quantile_fraction": 0.5},
        # Iterations of about half a second, 30 of them: with 256 env steps (0.3 s) or
        # 16 iterations (once an exploited trial kept its process) the population
        # finished between two kills.
        training={"train_batch_size_per_learner": 1000, "minibatch_size": 250, "num_epochs": 2},
        # Short evaluations and kept candidates, cut by the kills too; the result chosen
        # at the end from what survived them.
        evaluation={"every": 2, "keep": 2, "episodes": 20},
    )
    path = write_experiment(tmp_path, data)
    results_dir = tmp_path / "results" / "pop"
    store = tmp_path / "results" / "mlflow.db"
    driver = _start(["run", str(path), "--name", "pop"])
    for kill in range(KILLS):
        try:
            # Wait for more training than at the last kill, then a random moment more.
            seen = sum(count_results(store).values())
            deadline = time.monotonic() + 180
            while sum(count_results(store).values()) < seen + 2:
                assert driver.poll() is None, f"the driver ended before kill {kill}"
                assert time.monotonic() < deadline, f"no progress before kill {kill}"
                time.sleep(0.1)
            time.sleep(rng.uniform(0.0, 1.5))
            os.kill(driver.pid, signal.SIGKILL)
            driver.wait()
        except BaseException:
            os.killpg(driver.pid, signal.SIGKILL)
            raise
        driver = _start(["resume", str(results_dir)])
    assert driver.wait(timeout=600) == 0

    rows = result_rows(results_dir)
    assert len(rows) == 2
    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("pop")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
    parents = [r for r in runs if r.data.tags.get(ROLE_TAG) == "population"]
    trials = {r.info.run_name: r for r in runs if r.data.tags.get(ROLE_TAG) == "trial"}
    assert len(parents) == 1 and sorted(trials) == sorted(rows)
    for name, trial_rows in rows.items():
        # Every row parses (result_rows) and the trial reached its stop rule...
        assert trial_rows[-1]["training_iteration"] == ITERATIONS, name
        # ... and MLflow says the same of its last result.
        history = client.get_metric_history(trials[name].info.run_id, STEP_METRIC)
        assert history and max(history, key=lambda m: m.step).value == ITERATIONS, name
        assert trials[name].info.status == "FINISHED", name
    records = read_jsonl(results_dir / LINEAGE_FILE)
    assert check_sequence(records) == []
    names = {record.target_name for record in records} | {r.source_name for r in records}
    assert names <= set(rows)
    # The parent run carries the same lineage as the results folder.
    local = (results_dir / LINEAGE_FILE).read_text().splitlines()
    artifact = client.download_artifacts(parents[0].info.run_id, LINEAGE_FILE, str(tmp_path))
    assert sorted(map(json.loads, Path(artifact).read_text().splitlines()), key=str) == sorted(
        map(json.loads, local), key=str
    )
    # Each member's kept candidates are whole checkpoints, at most `keep`, each one of
    # its evaluations; the population's result is one of the policies that survived.
    for name in rows:
        candidates = kept(results_dir / name)
        assert 1 <= len(candidates) <= 2, name
        evaluated = {(e.iteration, e.return_mean) for e in evaluations(results_dir / name)}
        for folder, record in candidates:
            assert problem(folder) is None, folder
            assert (record.iteration, record.return_mean) in evaluated, folder
    result = read_result(results_dir)
    assert result is not None and result.trial_name in rows
    assert problem(result.checkpoint_path(results_dir)) is None
