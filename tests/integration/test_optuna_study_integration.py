"""Where Optuna drives the search, its study is in the results folder: `optuna.load_study`
opens it after a run is interrupted and after the resume that finishes it, and the resume
went on in the same study (the searcher's save and restore: tests/unit/test_optuna_study.py)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna

from tests.support.experiments import tiny_ppo, write_experiment
from workbench.experiment.resolve import load_and_resolve

WORKBENCH = str(Path(sys.executable).parent / "workbench")


def _study(folder: Path) -> optuna.Study:
    return optuna.load_study(study_name="opt", storage=f"sqlite:///{folder / 'optuna.db'}")


def _complete(folder: Path) -> list[optuna.trial.FrozenTrial]:
    if not (folder / "optuna.db").is_file():
        return []
    try:
        trials = _study(folder).trials
    except KeyError:  # the study is not created yet
        return []
    return [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]


def _finished_while_running(folder: Path) -> int:
    """Trials the running search has completed, read without writing: `load_study` on a
    file whose schema the driver is still creating would create it too, and the second
    writer of Optuna's version row fails."""
    db = folder / "optuna.db"
    if not db.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            row = con.execute("SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'").fetchone()
    except sqlite3.OperationalError:  # no tables yet, or the driver holds the lock
        return 0
    return int(row[0])


def test_the_study_opens_after_a_run_and_after_its_resume(tmp_path: Path) -> None:
    data = tiny_ppo(
        tmp_path,
        name="opt",
        training={"train_batch_size_per_learner": 256, "minibatch_size": 128, "num_epochs": 1},
        search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}},
        search={"type": "optuna", "seed": 3},
        scheduler={"type": "fifo"},
        population=2,
        max_concurrent=1,
        # Long enough that the second trial is still running when the first one's end has
        # been seen and the interrupt sent (at 2 iterations it could finish in between).
        stop={"iterations": 6},
        checkpoint={"frequency": 1, "keep": 1},
        resources={"cpus_main": 0.5, "cpus_per_learner": 0.5, "envs_per_runner": 4},
        evaluation={"at_end": "none"},
    )
    path = write_experiment(tmp_path, data)
    folder = tmp_path / "results" / "opt"
    driver = subprocess.Popen(
        [WORKBENCH, "run", str(path), "--name", "opt"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        # The first trial has ended: stop the run (Ctrl-C), before or after the second one
        # starts (before it, the resume must still make it: tests/unit/test_resume_search_state).
        while not _finished_while_running(folder):
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "no trial finished"
            time.sleep(0.1)
        os.killpg(driver.pid, signal.SIGINT)
        out, err = driver.communicate(timeout=180)
    except BaseException:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.communicate()
        raise
    assert driver.returncode == 130, out[-2000:] + err[-2000:]
    before = _study(folder)
    done_before = {t.number: t.params for t in _complete(folder)}
    assert len(done_before) == 1 and before.direction == optuna.study.StudyDirection.MAXIMIZE

    resumed = subprocess.run(
        [WORKBENCH, "resume", str(folder)], capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    after = _complete(folder)
    # The same study went on: the trials finished before are there as they were, and the
    # population's two trials are complete, each with its final score.
    assert {t.number: t.params for t in after if t.number in done_before} == done_before
    assert len(after) == 2 and all(t.value is not None for t in after)
    lr = load_and_resolve(path, check_results=False).tune_keys["lr"]  # under Tune's key
    assert all(1e-4 <= t.params[lr] <= 1e-2 for t in after)
    assert len({t.params[lr] for t in after}) == 2  # each trial its own suggestion
