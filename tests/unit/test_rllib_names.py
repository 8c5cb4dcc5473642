"""What validation knows of RLlib (workbench/experiment/rllib_names.py) is what the
installed RLlib says, and checking an experiment imports neither RLlib, torch nor Tune:
that import was 3 of the 4 seconds `workbench validate` took."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from workbench.experiment import rllib_names
from workbench.experiment.algorithms import config_class, training_parameters, tune_key

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "write_rllib_names", ROOT / "tools" / "write_rllib_names.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_is_what_the_installed_rllib_says() -> None:
    tool = _tool()
    shipped = (ROOT / "workbench" / "experiment" / "rllib_names.py").read_text()
    assert tool.render() == shipped, "out of date: run .venv/bin/python tools/write_rllib_names.py"


def test_the_table_answers_as_rllib_does() -> None:
    # Spot checks against RLlib's own objects, beside the whole-file comparison above.
    ppo = config_class("PPO")()
    assert "lambda_" in training_parameters("PPO") and tune_key("PPO", "lambda_") == "lambda"
    assert tune_key("PPO", "lr") == "lr"
    key = tune_key("PPO", "train_batch_size_per_learner")
    assert key in ppo.to_dict() and key == "_train_batch_size_per_learner"
    assert "dueling" in training_parameters("DQN") and "dueling" not in training_parameters("PPO")
    dqn = config_class("DQN")()
    assert {
        **rllib_names.TRAIN_BATCH_DEFAULTS,
        "PPO": ppo.train_batch_size_per_learner,
        "DQN": dqn.train_batch_size_per_learner or dqn.train_batch_size,
    } == rllib_names.TRAIN_BATCH_DEFAULTS


def test_the_tool_says_when_the_table_is_out_of_date(tmp_path: Path) -> None:
    tool = _tool()
    stale = tmp_path / "rllib_names.py"
    stale.write_text("# an older RLlib's\n")
    tool.TARGET = stale
    assert tool.main(["--check"]) == 1
    assert tool.main([]) == 0 and tool.main(["--check"]) == 0
    assert stale.read_text() == tool.render()


def test_validate_imports_neither_rllib_torch_nor_tune(tmp_path: Path) -> None:
    # The shipped experiments, and one that leaves the train batch to RLlib's default
    # (the minibatch check reads it) and names a model field.
    unset = tmp_path / "unset_batch.yaml"
    unset.write_text(
        "name: unset_batch\nalgorithm: PPO\nenv: {id: sim_ext/CartPole-v1}\npopulation: 2\n"
        "model: {fcnet_hiddens: [32, 32]}\n"
        "search_space: {params: {minibatch_size: {choice: [64, 128]}}}\n"
        "stop: {iterations: 2}\n"
    )
    probe = (
        "import json, sys\n"
        "from workbench.cli.main import main\n"
        "code = main(['validate', sys.argv[1]])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'torch'"
        " or m.startswith(('ray.rllib', 'ray.tune')))\n"
        "print(json.dumps({'code': code, 'heavy': heavy[:5]}))\n"
    )
    shipped = [ROOT / "experiments" / f for f in ("cartpole_pbt.yaml", "cartpole_dqn.yaml")]
    for experiment in [*shipped, ROOT / "experiments" / "pendulum_pb2.yaml", unset]:
        result = subprocess.run(
            [sys.executable, "-c", probe, str(experiment)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        outcome = json.loads(result.stdout.splitlines()[-1])
        assert outcome == {"code": 0, "heavy": []}, (experiment, outcome)
