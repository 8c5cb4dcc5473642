"""Which learner a trial gets from its experiment file (``learner``), and the schedules the
file can give: RLlib's lr and entropy_coeff schedules, and the lean learner's clip_param
schedule (RL Zoo's linear decays)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

from tests.support.bad_files import problem_about, rejected
from tests.support.configs import config_of_file
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.trial.clip_schedule import CLIP_SCHEDULE_KEY
from workbench.trial.lean_dqn import LeanDQNTorchLearner
from workbench.trial.lean_learner import LeanPPOTorchLearner

DECAY = [[0, 0.2], [100_000, 0.0]]


def experiment(tmp_path: Path, **fields: Any) -> Path:
    return write_experiment(tmp_path, tiny_ppo(tmp_path, **fields))


def test_ppo_trials_get_the_lean_learner_unless_the_file_asks_for_rllibs(tmp_path: Path) -> None:
    assert config_of_file(experiment(tmp_path)).learner_class is LeanPPOTorchLearner
    rllib = config_of_file(experiment(tmp_path, learner="rllib")).learner_class
    assert rllib is PPOTorchLearner
    # Remote learners keep RLlib's by default (the lean loop is for the trial's process).
    remote = experiment(tmp_path, resources={"num_learners": 1, "cpus_per_learner": 0.5})
    assert config_of_file(remote).learner_class is PPOTorchLearner


def test_linear_schedules_reach_rllib_and_the_lean_learner(tmp_path: Path) -> None:
    lr = [[0, 1e-3], [100_000, 0.0]]
    config = config_of_file(experiment(tmp_path, training={"lr": lr, "clip_param": DECAY}))
    assert config.lr == lr  # RLlib's own lr schedule
    assert config.clip_param == pytest.approx(0.2)  # RLlib's config keeps a number
    assert config.learner_config_dict[CLIP_SCHEDULE_KEY] == DECAY
    assert config.learner_class is LeanPPOTorchLearner


def test_a_clip_schedule_without_the_lean_learner_is_refused(tmp_path: Path) -> None:
    path = experiment(tmp_path, learner="rllib", training={"clip_param": DECAY})
    problem_about(rejected(path), path, "training.clip_param", "needs the lean learner")


def test_dqn_trials_get_the_lean_dqn_learner_unless_the_file_asks_for_rllibs(
    tmp_path: Path,
) -> None:
    dqn = {"algorithm": "DQN", "env_runner": "rllib", "training": {}}
    assert config_of_file(experiment(tmp_path, **dqn)).learner_class is LeanDQNTorchLearner
    rllib = config_of_file(experiment(tmp_path, learner="rllib", **dqn)).learner_class
    assert rllib is DQNTorchLearner


def test_the_lean_learner_is_refused_for_other_algorithms(tmp_path: Path) -> None:
    path = experiment(tmp_path, algorithm="APPO", learner="lean", training={})
    problem_about(rejected(path), path, "learner", "'lean' updates PPO, DQN, not APPO")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ([[10, 0.2], [100, 0.1]], "starts at timestep 0"),
        ([[0, 0.2], [100, 0.1], [50, 0.0]], "never goes back"),
        ([[0, 0.2]], "2 points or more"),
        ([[0, 0.2], [100, -0.1]], "out of range"),
        ([[0, 0.2], [1.5, 0.1]], "timesteps must be integers"),
    ],
)
def test_bad_schedules_are_refused_with_what_is_wrong(
    tmp_path: Path, value: list[Any], says: str
) -> None:
    path = experiment(tmp_path, training={"lr": value})
    problem_about(rejected(path), path, "training.lr", says)
