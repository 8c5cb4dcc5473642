"""Bottleneck diagnosis of real populations: the split and the verdicts `workbench diagnose`
reads from a trained population, and the timeline of a running one (the arithmetic is
tests/unit/test_diagnosis.py's)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.experiments import tiny_ppo, write_experiment
from workbench.cli import main
from workbench.trial import time_split

WORKBENCH = str(Path(sys.executable).parent / "workbench")


def _tiny(tmp_path: Path, **fields: Any) -> Path:
    """One trial of 1000 env steps an iteration, sampled in the main process."""
    trial = {
        "name": "diag",
        "training": {"train_batch_size_per_learner": 1000, "minibatch_size": 1000},
        "search_space": {"params": {"lr": {"loguniform": [1e-4, 1e-3]}}},
        "scheduler": {"type": "fifo"},
        "population": 1,
        "stop": {"iterations": 4},
        "checkpoint": {"frequency": 100, "at_end": False},
        "evaluation": {"at_end": "none"},
        "resources": {
            "cpus_main": 1,
            "cpus_per_learner": 1,
            "env_runners": {"count": 0, "envs_per_runner": 16},
        },
    }
    data = tiny_ppo(tmp_path, **{**trial, **fields})
    return write_experiment(tmp_path / "diag.yaml", data, sort_keys=True)


def test_heavy_physics_is_sampling_bound_and_many_epochs_learner_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two trials of one population: a 100,000-substep CartPole (about 0.1 s of physics
    per 1000 env steps) learned in one pass, and the same learned in 30 epochs."""
    from workbench.analysis.populations import find_population
    from workbench.experiment.resolve import load_and_resolve
    from workbench.run.launch import run
    from workbench.tracking.store import client_for

    experiment = _tiny(
        tmp_path,
        env={"id": "sim_ext/CartPole-v1", "config": {"substeps": 100_000}},
        search_space={"params": {"num_epochs": {"grid": [1, 30]}}},
        search={"type": "grid"},
        # RLlib's 256x256 networks: 30 epochs over them outweigh the physics for certain;
        # the small-env 64x64 ones made the 30-epoch trial a near tie (51% sampling).
        defaults="rllib",
    )
    summary = run(load_and_resolve(experiment), progress_interval_s=1e9)
    assert summary.errors == 0 and len(summary.trials) == 2
    capsys.readouterr()

    client = client_for(summary.tracking_uri or "")
    pop = find_population(client, "diag", summary.tracking_uri or "")
    for trial in pop.trials:
        for name in ("sampling_fraction", "learner_fraction", "sync_fraction", "verdict"):
            assert f"workbench/{name}" in trial.metrics, (trial.name, sorted(trial.metrics))

    assert main(["diagnose", str(summary.results_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    verdicts = {}
    for trial in data["trials"]:
        f = trial["figures"]
        shares = (f["sampling_fraction"], f["learner_fraction"], f.get("sync_fraction", 0))
        assert sum(shares) <= 1.0 + 1e-6
        expected = (
            "sampling-bound"
            if shares[0] >= time_split.BOUND
            else "learner-bound"
            if shares[1] >= time_split.BOUND
            else trial["verdict"]
        )
        assert trial["verdict"] == expected, trial  # consistent with its own numbers
        assert f["runners_needed"] == pytest.approx(
            f["env_steps_trained_per_s"] / f["env_steps_sampled_per_s_per_runner"]
        )
        verdicts[trial["label"]] = (trial["verdict"], shares)
    # PPO_00000 is num_epochs 1, PPO_00001 num_epochs 30 (the grid's order).
    assert verdicts["Trial PPO_00000"][0] == "sampling-bound", verdicts
    assert verdicts["Trial PPO_00001"][0] == "learner-bound", verdicts
    text_run = subprocess.run(
        [WORKBENCH, "diagnose", str(summary.results_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "Trial PPO_00000: sampling-bound" in text_run.stdout
    assert "-> add env runners" in text_run.stdout


def test_timeline_of_a_running_population(tmp_path: Path) -> None:
    experiment = _tiny(
        tmp_path, stop={"iterations": 1000, "wall_time_s": 90}, name="live", population=1
    )
    folder = tmp_path / "results" / "live"
    log = tmp_path / "driver.log"
    with log.open("w") as out:
        driver = subprocess.Popen(
            [WORKBENCH, "run", str(experiment), "--name", "live"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        # Wait until the trial has reported (its run has a result in MLflow).
        while time.monotonic() < deadline:
            if (
                list(folder.glob("PPO_00000/result.json"))
                and (folder / "PPO_00000" / "result.json").stat().st_size
            ):
                break
            assert driver.poll() is None, log.read_text()[-3000:]
            time.sleep(1)
        trace = tmp_path / "timeline.json"
        done = subprocess.run(
            [
                WORKBENCH,
                "diagnose",
                str(folder),
                *("--timeline", str(trace)),
                "--timeline-seconds",
                "3",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"written to {trace}" in done.stdout
        events = json.loads(trace.read_text())
        names = {e.get("name", "") for e in events if e.get("ph") != "M"}
        assert any("train" in name for name in names), sorted(names)[:20]
    finally:
        if driver.poll() is None:
            os.kill(driver.pid, signal.SIGINT)  # as Ctrl-C: Tune saves, Ray shuts down
            try:
                driver.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(30)
    # The driver is gone: the same command now says so.
    after = subprocess.run(
        [WORKBENCH, "diagnose", str(folder), "--timeline", str(tmp_path / "late.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert after.returncode == 2 and "nothing is running" in after.stderr
