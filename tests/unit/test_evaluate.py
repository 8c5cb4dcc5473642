"""`workbench eval`: the rollout is the policy's own deterministic rollout, computed here in
a plain loop, episode by episode (the evaluation at the end of a real run:
tests/integration/test_evaluate_integration.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.support.policies import learner_group_checkpoint, plain_rollout
from workbench.cli import main
from workbench.errors import ExperimentError
from workbench.policy.checkpoint import find_checkpoint, read_checkpoint
from workbench.policy.evaluate import evaluate_checkpoint


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return learner_group_checkpoint(
        tmp_path_factory.mktemp("cartpole"), "PPO", "sim_ext/CartPole-v1"
    )


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return learner_group_checkpoint(
        tmp_path_factory.mktemp("pendulum"), "PPO", "sim_ext/Pendulum-v1"
    )


def test_evaluation_is_the_deterministic_rollout_of_the_module(cartpole: Path) -> None:
    result = evaluate_checkpoint(read_checkpoint(cartpole), episodes=7, seed=3)
    assert (result.returns, result.lengths) == plain_rollout(cartpole, 7, seed=3)
    assert len(set(result.returns)) > 1, "every episode alike: the seeds are not used"
    stats = result.stats()
    assert stats["episodes"] == 7
    assert stats["return_mean"] == pytest.approx(np.mean(result.returns))
    assert stats["return_min"] <= stats["return_mean"] <= stats["return_max"]


def test_continuous_actions_are_unsquashed_to_the_bounds_as_rllib_does(pendulum: Path) -> None:
    # Pendulum torques are in [-2, 2]; RLlib maps the Gaussian's mean from [-1, 1].
    result = evaluate_checkpoint(read_checkpoint(pendulum), episodes=2, seed=11)
    returns, lengths = plain_rollout(pendulum, 2, seed=11)
    assert result.lengths == lengths == [200, 200]
    # A batch of 2 and a batch of 1 go through different float32 matmul paths: the
    # torques differ in the last bits, the returns after 200 steps by about 1e-9.
    assert result.returns == pytest.approx(returns, rel=1e-6)


def test_stochastic_evaluation_samples_and_is_reproducible(cartpole: Path) -> None:
    info = read_checkpoint(cartpole)
    deterministic = evaluate_checkpoint(info, episodes=8, seed=0)
    first = evaluate_checkpoint(info, episodes=8, seed=0, deterministic=False)
    again = evaluate_checkpoint(info, episodes=8, seed=0, deterministic=False)
    assert first.returns == again.returns
    assert first.returns != deterministic.returns
    # The global RNG is left as it was.
    torch.manual_seed(5)
    expected = torch.rand(1)
    torch.manual_seed(5)
    evaluate_checkpoint(info, episodes=1, deterministic=False)
    assert torch.rand(1) == expected


def test_env_config_changes_the_env_but_not_its_spaces(cartpole: Path, tmp_path: Path) -> None:
    info = read_checkpoint(cartpole)
    short = evaluate_checkpoint(info, episodes=4, env_config={"max_episode_steps": 5})
    assert max(short.lengths) <= 5 and short.env_config == {"max_episode_steps": 5}

    maze = learner_group_checkpoint(tmp_path, "PPO", "sim_ext/GridMaze-v0", {"size": 4})
    with pytest.raises(ExperimentError, match=r"observation space .*\(25,\).*\(16,\)"):
        evaluate_checkpoint(read_checkpoint(maze), episodes=1, env_config={"size": 5})
    with pytest.raises(ExperimentError, match="unknown env_config key 'mass'"):
        evaluate_checkpoint(info, episodes=1, env_config={"mass": 2.0})


def test_a_trial_folder_means_its_newest_checkpoint(cartpole: Path, tmp_path: Path) -> None:
    trial = tmp_path / "PPO_00001"
    for index in (2, 10, 9):  # numbered in save order: 10 is the newest, not 9
        shutil.copytree(cartpole, trial / f"checkpoint_{index:06d}")
    assert find_checkpoint(trial) == (trial / "checkpoint_000010").resolve()


def _trial_folder_without_checkpoints(path: Path) -> Path:
    (path / "params.json").write_text("{}")
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: p, "is not a checkpoint"),
        (_trial_folder_without_checkpoints, "holds no checkpoint"),
    ],
)
def test_what_is_not_a_checkpoint_is_named(tmp_path: Path, make: Any, message: str) -> None:
    with pytest.raises(ExperimentError, match=message) as info:
        find_checkpoint(make(tmp_path))
    assert "valid: an algorithm checkpoint folder" in str(info.value)


def test_cli_eval_of_a_checkpoint_folder(
    cartpole: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(cartpole), "--episodes", "3", "--seed", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["returns"] == plain_rollout(cartpole, 3, seed=3)[0]
    assert data["episodes"] == 3 and data["deterministic"] is True and data["run_id"] is None

    assert main(["eval", str(cartpole), "--env", "sim_ext/Pendulum-v1"]) == 2
    err = capsys.readouterr().err
    assert "'sim_ext/Pendulum-v1'" in err and "trained on 'sim_ext/CartPole-v1'" in err

    assert main(["eval", str(cartpole), "--env-config", "substeps"]) == 2
    assert "'substeps' is not KEY=VALUE" in capsys.readouterr().err
