"""`workbench run` end to end: a real (tiny) population, its exit code and its summary, and
no Ray process of its own left behind; its automatic name; the trials `--dry-run` listed
are the ones it started; a second run of the name is refused, and resume finds the
population by its experiment's name."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.experiments import tiny_ppo, write_experiment
from workbench.names import SESSION_FILE
from workbench.run.ray_session import leftover_processes

WORKBENCH = str(Path(sys.executable).parent / "workbench")


def _workbench(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [WORKBENCH, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )


def test_run_names_a_new_population_and_starts_the_trials_the_dry_run_listed(
    tmp_path: Path,
) -> None:
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
    experiment = str(write_experiment(tmp_path / "tiny.yaml", data, sort_keys=True))
    dry = _workbench("run", experiment, "--set", "stop.iterations=3", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = dict(line.split() for line in dry.stdout.splitlines() if line.startswith("PPO_0000"))
    assert sorted(planned) == ["PPO_00000", "PPO_00001"]
    assert not (tmp_path / "results").exists()  # a dry run takes no name

    done = _workbench("run", experiment, "--set", "stop.iterations=3", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder,) = (
        p for p in (tmp_path / "results").iterdir() if p.is_dir() and p.name != "mlartifacts"
    )
    assert re.fullmatch(r"tiny_\d{8}-\d{6}", folder.name), folder.name
    out = done.stdout
    assert f"Experiment {folder.name}: 2 trials, 0 errored" in out
    # The population's result (evaluation.at_end: best) names the member that holds it.
    assert "Member holding the result PPO_0000" in out
    assert "The population's result: PPO_0000" in out
    assert f"`workbench eval {folder.name}` rolls it out again" in out
    assert f"Results: {folder}" in out
    assert (folder / "workbench_experiment.yaml").is_file()
    # The command ends fast (workbench.cli.main.entry) and still stops the Ray it started.
    session = json.loads((folder / SESSION_FILE).read_text())
    assert session["processes"] and not leftover_processes(session)
    # Each trial started with the values the dry run listed (MLflow keeps the initial ones).
    store = str(tmp_path / "results")
    for name, lr in planned.items():
        shown = _workbench("show", name, "--store", store, "--json", cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        detail = json.loads(shown.stdout)
        assert detail["population"] == folder.name
        assert f"{float(detail['params']['lr']):.4g}" == lr

    again = _workbench("run", experiment, "--name", folder.name, cwd=tmp_path)
    assert again.returncode == 2
    assert "already holds a run" in again.stderr and "workbench resume" in again.stderr
    # The experiment's name means its newest population: finished, so nothing to resume.
    resumed = _workbench("resume", "tiny", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Population {folder.name} in {folder} has finished" in resumed.stdout
