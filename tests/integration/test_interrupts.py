"""Ctrl-C, as a terminal sends it (SIGINT to the whole foreground process group), any
number of times: the run ends with one line and exit 130, no traceback, and no MLflow
run is left RUNNING. Then the population's wall-time budget, counted across its
sessions: a resume under a budget the first session used most of ends on that budget
(exit 0, the runs FINISHED, the end-of-run evaluation logged), and a resume with a larger
one runs the trials the budget ended again, here to a return target, which the resumed
population reports as its stop (it once said "Interrupted" and exited 130)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from tests.support.experiments import small_pbt, write_experiment
from tests.support.results import count_results
from workbench.names import (
    BUDGET_FILE,
    EVAL_RETURN_METRIC,
    RESOLVED_FILE,
    ROLE_TAG,
    STOPPED_BY_TAG,
)

WORKBENCH = str(Path(sys.executable).parent / "workbench")
TARGET = 100.0


def _workbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WORKBENCH, *args], capture_output=True, text=True, timeout=600, check=False
    )


def _results_logged(client: MlflowClient, runs: list) -> dict[str, int]:
    """Trial run name -> how many results it logged."""
    return {
        r.info.run_name: len(client.get_metric_history(r.info.run_id, "training_iteration"))
        for r in runs
    }


def _seconds(clock: str) -> int:
    minutes, seconds = clock.split(":")[-2:]
    return int(minutes) * 60 + int(seconds)


def test_ctrl_c_three_times_then_resumes_on_its_budget_and_past_it(tmp_path: Path) -> None:
    data = small_pbt(
        tmp_path,
        population=2,
        # lr where this small PPO learns CartPole in tens of iterations: the return
        # target that stops the resumed run below is not this test's subject.
        search_space={"params": {"lr": {"loguniform": [1e-3, 4e-3]}}},
        stop={"iterations": 500, "wall_time_s": 3600},
        evaluation={"at_end": "best", "every": 0, "episodes": 5, "confirm": 1},
    )
    path = write_experiment(tmp_path, data)
    store = tmp_path / "results" / "mlflow.db"
    started = time.monotonic()
    driver = subprocess.Popen(
        [WORKBENCH, "run", str(path), "--name", "pop"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: Ctrl-C reaches the group, as in a shell
    )
    try:
        deadline = time.monotonic() + 180
        # Both trials have opened their MLflow runs (the resume must reuse each), and results.
        while len(counts := count_results(store)) < 2 or sum(counts.values()) < 4:
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
    assert {r.info.run_name: r.info.status for r in runs}["pop"] == "KILLED"
    assert "workbench resume" in out + err
    run_ids = {r.info.run_name: r.info.run_id for r in runs}
    # The population can go on: the folder is whole enough to resume.
    results_dir = tmp_path / "results" / "pop"
    assert (results_dir / "tuner.pkl").is_file()
    first_session = time.monotonic() - started  # more than its budget counted

    # Only stop rules change on a resume; refused before Ray starts.
    refused = _workbench("resume", str(results_dir), "--set", "training.lr=0.1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "training.lr" in refused.stderr and "stop rules" in refused.stderr

    # A budget the first session used most of: this session ends on it.
    budget = round(first_session)  # what the first session counted, and its startup's worth
    resumed = _workbench("resume", str(results_dir), "--set", f"stop.wall_time_s={budget}")
    out = resumed.stdout
    assert resumed.returncode == 0, out[-3000:] + resumed.stderr[-3000:]
    ran = re.search(r"Ran (\S+) \(wall clock; (\S+) with earlier sessions\)", out)
    assert ran, out[-3000:]
    assert _seconds(ran[1]) < _seconds(ran[2]), ran[0]
    assert "wall-time budget" in out and "ran out" in out, out[-3000:]
    assert "interrupted" not in out.lower(), out[-3000:]
    experiment = client.get_experiment_by_name("pop")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert {r.info.status for r in runs} == {"FINISHED"}, [
        (r.info.run_name, r.info.status) for r in runs
    ]
    # The same runs, each trial's results stepped 1..n without a gap or a repeat.
    assert {r.info.run_name: r.info.run_id for r in runs} == run_ids, "new runs opened"
    trials = [r for r in runs if r.data.tags.get(ROLE_TAG) == "trial"]
    for trial in trials:
        steps = sorted(
            m.step for m in client.get_metric_history(trial.info.run_id, "training_iteration")
        )
        assert steps == list(range(1, len(steps) + 1)), trial.info.run_name
    assert any(EVAL_RETURN_METRIC in r.data.metrics for r in trials)
    iterations = {r.info.run_name: r.data.metrics["training_iteration"] for r in trials}
    results = _results_logged(client, trials)
    assert (results_dir / BUDGET_FILE).is_file()

    # Without --set the population has finished, and says how to go on.
    finished = _workbench("resume", str(results_dir))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "--set stop.wall_time_s=" in finished.stdout, finished.stdout
    short = _workbench("resume", str(results_dir), "--set", "stop.wall_time_s=5")
    assert short.returncode == 2 and "does not extend" in short.stderr, short.stderr

    # Without the budget, the trials it ended run again, into the same MLflow runs, to a
    # return target (its evaluation confirms it; the iterations bound a slow learner):
    # the resumed driver asks the stopper Tune restored, which is the live one.
    extended = _workbench(
        "resume",
        str(results_dir),
        *("--set", "stop.wall_time_s=null", "--set", f"stop.return_mean={TARGET}"),
        *("--set", f"stop.iterations={int(max(iterations.values())) + 40}"),
    )
    out = extended.stdout
    assert extended.returncode == 0, out[-3000:] + extended.stderr[-3000:]
    assert f"reached the return target {TARGET:g}" in out, out[-3000:]
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == len(trials) + 1
    assert {r.info.status for r in runs} == {"FINISHED"}
    # More results in the same runs (a trial goes on from its newest checkpoint, which
    # may be an iteration behind the last result it logged).
    later = _results_logged(client, [r for r in runs if r.data.tags.get(ROLE_TAG) == "trial"])
    assert later.keys() == results.keys()
    assert sum(later.values()) > sum(results.values()), (results, later)
    stopped_by = {r.data.tags.get(STOPPED_BY_TAG) for r in runs}
    assert any(s and "return target" in s for s in stopped_by), stopped_by
    saved = yaml.safe_load((results_dir / RESOLVED_FILE).read_text())
    assert saved["stop"]["wall_time_s"] is None and saved["stop"]["return_mean"] == TARGET
    assert not (results_dir / BUDGET_FILE).exists()
