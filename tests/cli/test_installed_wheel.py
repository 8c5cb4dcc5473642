"""The built wheel, installed apart from the clone into a fresh virtualenv as a user's
`pip install` would (its dependencies resolved from the package index, the CPU torch
first as the Makefile does), works from an empty folder: it validates and runs an
experiment that names a shipped search space, with MLflow tracking on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _ok(
    args: list[str | Path],
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
    return done.stdout


# Installing the dependencies takes minutes (three times that on a slow day).
@pytest.mark.timeout(2400)
def test_the_built_wheel_works_installed_apart_from_the_clone(tmp_path: Path) -> None:
    # The wheel pip builds (the C++ build is the one `make setup` left in build/).
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    _ok([*pip_wheel, "-q", "-w", wheels, ROOT], timeout=600)
    (wheel,) = wheels.glob("pbt_workbench-*.whl")

    # A fresh virtualenv: torch at this environment's version (the CPU build), then the
    # wheel with every dependency it declares and nothing else: no extras, no clone.
    venv = tmp_path / "venv"
    _ok([sys.executable, "-m", "venv", venv], timeout=300)
    bin_dir = venv / "bin"
    torch_version = torch.__version__.split("+")[0]
    # (--no-compile: Python compiles what it imports; byte-compiling all of Ray, MLflow
    # and pandas up front was a third of the install.)
    install = [bin_dir / "pip", "install", "-q", "--no-compile"]
    _ok([*install, f"torch=={torch_version}"], timeout=900)
    _ok([*install, wheel], timeout=1200)

    mine = tmp_path / "elsewhere" / "mine.yaml"
    mine.parent.mkdir()
    mine.write_text(
        "name: mine\nalgorithm: PPO\nenv: {id: sim_ext/CartPole-v1}\n"
        "search_space: {file: ppo.yaml}\nscheduler: {type: pbt, quantile_fraction: 0.5}\n"
        "population: 2\n"
        "stop: {iterations: 1}\nevaluation: {at_end: none}\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "PYTHONPATH": ""}
    env.pop("VIRTUAL_ENV", None)
    # A user's Python writes bytecode as it imports; without it (as where this variable is
    # set) every Ray worker compiles Ray, torch and MLflow from source again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    probe = (
        "import gymnasium as gym, sim_ext, workbench\n"
        "print(workbench.__file__); print(sim_ext.__file__)\n"
        "env = gym.make('sim_ext/CartPole-v1'); env.reset(seed=0); env.step(0)\n"
    )
    site = str(venv)
    files = _ok([bin_dir / "python", "-c", probe], timeout=120, cwd=empty, env=env).splitlines()
    assert files[0].startswith(site) and files[1].startswith(site), files

    checked = _ok([bin_dir / "workbench", "validate", mine], timeout=120, cwd=empty, env=env)
    assert "mine.yaml: ok (PPO on sim_ext/CartPole-v1, pbt over" in checked
    # One iteration: Ray's workers import the installed package, MLflow logs to the
    # default store beside the results, where the user stood.
    _ok([bin_dir / "workbench", "run", mine], timeout=600, cwd=empty, env=env)
    (population,) = (empty / "results").glob("mine_*")
    assert (population / "tuner.pkl").is_file()
    assert (empty / "results" / "mlflow.db").is_file()
