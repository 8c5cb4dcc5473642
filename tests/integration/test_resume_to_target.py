"""A population killed before its return target, resumed, reaches it: `resume` exits 0
and says it stopped on the target (it used to say "Interrupted" and exit 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.support.experiments import small_pbt, write_experiment
from workbench.names import ROLE_TAG, STOPPED_BY_TAG

WORKBENCH = str(Path(sys.executable).parent / "workbench")
TARGET = 120.0


def test_a_killed_population_resumed_to_its_target_says_so(tmp_path: Path) -> None:
    data = small_pbt(
        tmp_path,
        population=2,
        search_space={"params": {"lr": {"loguniform": [1e-4, 3e-3]}}},
        stop={"return_mean": TARGET},
    )
    path = write_experiment(tmp_path, data)
    results_dir = tmp_path / "results" / "pop"
    driver = subprocess.Popen(
        [WORKBENCH, "run", str(path), "--name", "pop"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while len(list(results_dir.glob("PPO_*/checkpoint_*"))) < 4:
            assert driver.poll() is None, "the run ended before the kill"
            assert time.monotonic() < deadline, "no checkpoints"
            time.sleep(0.2)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    except BaseException:
        os.killpg(driver.pid, signal.SIGKILL)
        raise

    resumed = subprocess.run(
        [WORKBENCH, "resume", str(results_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = resumed.stdout
    assert resumed.returncode == 0, out[-3000:] + resumed.stderr[-3000:]
    assert "Interrupted" not in out
    assert f"return {TARGET:.1f}" in out or "Best trial" in out
    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("pop")
    assert experiment is not None
    (parent,) = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'population'"
    )
    assert parent.info.status == "FINISHED"
    trials = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'trial'"
    )
    stopped_by = {t.data.tags.get(STOPPED_BY_TAG) for t in trials}
    assert any(s and "return target" in s for s in stopped_by), stopped_by
