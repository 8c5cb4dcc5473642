"""The built wheel, installed apart from the clone into a fresh virtualenv, works as a
user's pip install would: from an empty folder it validates, plans and runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_built_wheel_works_installed_apart_from_the_clone(tmp_path: Path) -> None:
    # The wheel pip builds (the C++ build is the one `make setup` left in build/), installed
    # into a fresh virtualenv whose only other packages are the dependencies: nothing of
    # the clone on its path. From an empty folder it checks, plans and runs (one iteration,
    # Ray's workers importing the installed package) an experiment outside the clone that
    # names a shipped search space, and steps an env.
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    built = subprocess.run(
        [*pip_wheel, "-q", "-w", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("pbt_workbench-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, wheel],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    # The dependencies: this environment's packages as a plain path (its .pth files, the
    # clone's editable install among them, are not read).
    deps = Path(next(p for p in sys.path if p.endswith("site-packages")))
    (Path(site) / "dependencies.pth").write_text(f"{deps}\n")

    mine = tmp_path / "elsewhere" / "mine.yaml"
    mine.parent.mkdir()
    mine.write_text(
        "name: mine\nalgorithm: PPO\nenv: {id: sim_ext/CartPole-v1}\n"
        "search_space: {file: ppo.yaml}\nscheduler: {type: pbt}\npopulation: 4\n"
        "stop: {iterations: 1}\n"
    )
    probe = (
        "import sys, gymnasium as gym, sim_ext, workbench\n"
        "from workbench.cli import main\n"
        "print(workbench.__file__); print(sim_ext.__file__)\n"
        "env = gym.make('sim_ext/CartPole-v1'); env.reset(seed=0); env.step(0)\n"
        "codes = [main(['validate', sys.argv[1]]), main(['run', sys.argv[1], '--dry-run'])]\n"
        "codes.append(main(['run', sys.argv[1], '--set', 'tracking.enabled=false']))\n"
        "print('codes', codes)\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    ran = subprocess.run(
        [python, "-c", probe, str(mine)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=empty,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    assert lines[0].startswith(site) and lines[1].startswith(site), lines[:2]
    assert "codes [0, 0, 0]" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "mine.yaml: ok (PPO on sim_ext/CartPole-v1, pbt over" in ran.stdout
    (population,) = (empty / "results").glob("mine_*")  # the run, where the user stood
    assert (population / "tuner.pkl").is_file()
