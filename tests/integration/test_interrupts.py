"""Ctrl-C, as a terminal sends it (SIGINT to the whole foreground process group), any
number of times: the run ends with one line and exit 130, no traceback, and no MLflow
run is left RUNNING."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.support.experiments import small_pbt, write_experiment
from tests.support.results import count_results

WORKBENCH = str(Path(sys.executable).parent / "workbench")


def test_ctrl_c_three_times_leaves_no_traceback_and_no_running_run(tmp_path: Path) -> None:
    data = small_pbt(
        tmp_path,
        population=2,
        search_space={"params": {"lr": {"loguniform": [1e-4, 3e-3]}}},
        stop={"iterations": 500},
    )
    path = write_experiment(tmp_path, data)
    store = tmp_path / "results" / "mlflow.db"
    driver = subprocess.Popen(
        [WORKBENCH, "run", str(path), "--name", "pop"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: Ctrl-C reaches the group, as in a shell
    )
    try:
        deadline = time.monotonic() + 180
        while sum(count_results(store).values()) < 4:
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "the population never got going"
            time.sleep(0.2)
        for pause in (0.7, 0.3, 0.0):
            os.killpg(driver.pid, signal.SIGINT)
            time.sleep(pause)
        out, err = driver.communicate(timeout=120)
    except BaseException:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.communicate()
        raise
    assert driver.returncode == 130, out[-2000:] + err[-2000:]
    assert "Traceback" not in out + err, err[-3000:]
    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("pop")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert runs and not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
    # The population can go on: the folder is whole enough to resume.
    assert (tmp_path / "results" / "pop" / "tuner.pkl").is_file()
