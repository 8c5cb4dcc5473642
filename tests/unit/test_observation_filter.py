"""`env.normalize_observations` in the experiment file, and the statistics a policy carries
(the in-training side: tests/integration/test_observation_filter_integration.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.filter import MeanStdFilter

from tests.support.bad_files import problem_about, rejected
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.experiment.resolve import load_and_resolve
from workbench.trial.config import algorithm_config
from workbench.trial.fast_runner import FastEnvRunner
from workbench.trial.observation_filter import (
    Normalize,
    ObservationStats,
    mean_std_filter,
    runner_stats,
)


def _experiment(tmp_path: Path, **fields: Any) -> Path:
    env = {"id": "sim_ext/MountainCarContinuous-v0", "normalize_observations": True}
    return write_experiment(tmp_path, tiny_ppo(tmp_path, env=env, **fields))


def test_a_normalising_trial_samples_behind_rllibs_filter(tmp_path: Path) -> None:
    config = algorithm_config(load_and_resolve(_experiment(tmp_path), check_results=False))
    assert config._env_to_module_connector is mean_std_filter
    assert config.env_runner_cls in (None, SingleAgentEnvRunner)  # not the fast runner
    plain = tiny_ppo(tmp_path, env={"id": "sim_ext/MountainCarContinuous-v0"})
    config = algorithm_config(
        load_and_resolve(write_experiment(tmp_path, plain), check_results=False)
    )
    assert config._env_to_module_connector is None and config.env_runner_cls is FastEnvRunner


def test_the_fast_runner_with_normalisation_is_refused(tmp_path: Path) -> None:
    path = _experiment(tmp_path, env_runner="fast")
    problem_about(rejected(path), path, "env_runner", "does not run RLlib's observation filter")


def test_the_statistics_are_rllibs_arithmetic_and_round_trip_as_json() -> None:
    rng = np.random.default_rng(0)
    rllib = MeanStdFilter((2,), clip=10.0)
    for obs in rng.normal([-0.5, 0.01], [0.3, 0.02], size=(200, 2)).astype(np.float32):
        rllib(obs)
    running = rllib.running_stats
    stats = ObservationStats(
        tuple(map(float, running.mean)), tuple(map(float, running.std)), 10.0, 200
    )
    again = ObservationStats.from_json(json.loads(json.dumps(stats.to_json())))
    assert again == stats
    batch = rng.normal([-0.5, 0.01], [3.0, 0.2], size=(50, 2)).astype(np.float32)
    expected = np.stack([rllib(o, update=False) for o in batch])
    with torch.no_grad():
        ours = Normalize(again)(torch.from_numpy(batch)).numpy()
    np.testing.assert_array_equal(ours, expected)
    assert np.abs(ours).max() <= 10.0  # clipped as RLlib clips


@pytest.mark.parametrize(
    "data",
    [
        {"type": "running_max", "mean": [0.0], "std": [1.0]},
        {"type": "mean_std", "mean": [0.0, 1.0], "std": [1.0]},
        {"type": "mean_std", "mean": [], "std": []},
        {"type": "mean_std", "mean": [float("nan")], "std": [1.0]},
        {"type": "mean_std", "mean": [0.0], "std": [-1.0]},
        [0.0, 1.0],
    ],
)
def test_a_manifest_filter_that_is_not_one_is_refused(data: Any) -> None:
    with pytest.raises(ValueError):
        ObservationStats.from_json(data)


def _holding(connector: Any) -> Any:
    return SimpleNamespace(_env_to_module=SimpleNamespace(connectors=[connector]))


def test_a_discrete_observation_is_refused_with_the_field_to_change() -> None:
    # RLlib's own filter fails on it ("Use () not None as shape arguments").
    env = SimpleNamespace(single_observation_space=gym.spaces.Discrete(5))
    with pytest.raises(ValueError, match="normalize_observations: true needs a Box"):
        mean_std_filter(env)
    connector = mean_std_filter()
    connector.input_observation_space = gym.spaces.Discrete(5)
    connector.input_action_space = gym.spaces.Discrete(2)
    assert runner_stats(_holding(connector)) is None


def test_a_box_filter_before_any_sample_has_its_first_statistics() -> None:
    connector = mean_std_filter()
    connector.input_observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    connector.input_action_space = gym.spaces.Discrete(2)
    stats = runner_stats(_holding(connector))
    assert stats == ObservationStats((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 10.0, 0)
    assert runner_stats(SimpleNamespace()) is None  # no filter at all
