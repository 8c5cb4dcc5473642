"""Two `workbench run`s of one name started together: one writes, the other is refused
before it writes anything, and the folder holds one whole population."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.support.experiments import small_pbt, write_experiment
from tests.support.results import result_rows
from workbench.names import ROLE_TAG

WORKBENCH = str(Path(sys.executable).parent / "workbench")


def test_two_runs_of_one_name_started_together_one_is_refused(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path, small_pbt(tmp_path, population=2, stop={"iterations": 2}, scheduler=None)
    )
    runs = [
        subprocess.Popen(
            [WORKBENCH, "run", str(path), "--name", "pop"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300) for run in runs]
    codes = sorted(run.returncode for run in runs)
    assert codes == [0, 2], outputs
    refused = next(err for run, (_, err) in zip(runs, outputs, strict=True) if run.returncode)
    assert "another workbench is writing this results folder" in refused
    assert "Traceback" not in refused

    results_dir = tmp_path / "results" / "pop"
    assert len(list(results_dir.glob("experiment_state-*.json"))) == 1
    rows = result_rows(results_dir)  # every line parses: no row of another population
    assert len(rows) == 2
    for name, trial_rows in rows.items():
        assert [r["training_iteration"] for r in trial_rows] == [1, 2], name
    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("pop")
    assert experiment is not None
    parents = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'population'"
    )
    assert len(parents) == 1
