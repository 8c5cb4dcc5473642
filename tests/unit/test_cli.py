"""The `workbench` console script is installed and answers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import __version__
from workbench.cli import main


def test_envs_lists_every_sim_ext_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    for env_id in ("sim_ext/CartPole-v1", "sim_ext/Pendulum-v1", "sim_ext/GridMaze-v0"):
        assert env_id in out
    cartpole = next(line for line in out.splitlines() if line.startswith("sim_ext/CartPole-v1"))
    assert cartpole.split()[-2:] == ["Discrete(2)", "500"]  # actions, time limit
    assert max(len(line) for line in out.splitlines()) <= 100


def test_unknown_command_exits_2_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_console_script_is_on_the_path_of_the_environment() -> None:
    script = shutil.which("workbench", path=str(Path(sys.executable).parent))
    assert script, "pip install -e . must install the `workbench` console script"
    result = subprocess.run(
        [script, "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == f"workbench {__version__}"
