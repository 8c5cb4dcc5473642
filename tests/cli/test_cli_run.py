"""`workbench run` end to end: a real (tiny) population, its exit code and its summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.experiments import tiny_ppo, write_experiment

WORKBENCH = str(Path(sys.executable).parent / "workbench")


def test_run_prints_the_summary_then_refuses_to_overwrite(tmp_path: Path) -> None:
    data = tiny_ppo(
        tmp_path,
        name="tiny",
        training={"train_batch_size_per_learner": 256, "minibatch_size": 128},
        search_space={"params": {"lr": {"loguniform": [1e-4, 1e-3]}}},
        scheduler={"type": "pbt", "perturbation_interval": 2, "quantile_fraction": 0.5},
        population=2,
        stop={"iterations": 4},
        checkpoint={"frequency": 2},
    )
    experiment = write_experiment(tmp_path / "tiny.yaml", data, sort_keys=True)
    done = subprocess.run(
        [WORKBENCH, "run", str(experiment), "--set", "stop.iterations=3"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "Experiment tiny: 2 trials, 0 errored" in out
    assert "Best trial PPO_0000" in out and "after 3 iterations" in out
    assert f"Results: {tmp_path / 'results' / 'tiny'}" in out
    # The live table: one line per trial with the searched hyperparameter.
    assert "trial" in out and "lr" in out and "TERMINATED" in out
    assert (tmp_path / "results" / "tiny" / "workbench_experiment.yaml").is_file()

    again = subprocess.run(
        [WORKBENCH, "run", str(experiment)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 2
    assert "already holds a run" in again.stderr and "workbench resume" in again.stderr
