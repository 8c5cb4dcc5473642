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

from tests.support.configs import config_of_file
from tests.support.env_runners import runner_config
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.trial.fast_runner import FastEnvRunner
from workbench.trial.observation_filter import (
    BatchFilter,
    Normalize,
    ObservationStats,
    mean_std_filter,
    runner_stats,
)


def _experiment(tmp_path: Path, **fields: Any) -> Path:
    env = {"id": "sim_ext/MountainCarContinuous-v0", "normalize_observations": True}
    return write_experiment(tmp_path, tiny_ppo(tmp_path, env=env, **fields))


def test_a_normalising_trial_samples_with_the_fast_runner_behind_rllibs_filter(
    tmp_path: Path,
) -> None:
    config = config_of_file(_experiment(tmp_path))
    assert config._env_to_module_connector is mean_std_filter
    assert config.env_runner_cls is FastEnvRunner
    config = config_of_file(_experiment(tmp_path, env_runner="rllib"))
    assert config._env_to_module_connector is mean_std_filter
    assert config.env_runner_cls in (None, SingleAgentEnvRunner)
    plain = tiny_ppo(tmp_path, env={"id": "sim_ext/MountainCarContinuous-v0"})
    config = config_of_file(write_experiment(tmp_path, plain))
    assert config._env_to_module_connector is None and config.env_runner_cls is FastEnvRunner


def test_the_batch_filter_is_rllibs_filter_row_by_row() -> None:
    """BatchFilter's vector step is the connector's N calls: the same outputs and the same
    state (statistics and the sync buffer), from a fresh filter and across a sync."""
    space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    rllib, ours = mean_std_filter(), mean_std_filter()
    for connector in (rllib, ours):
        connector.input_observation_space = space
        connector.input_action_space = gym.spaces.Discrete(2)
    batch = BatchFilter(ours)
    rllib.get_state()
    reference = next(iter(rllib._filters.values()))
    rng = np.random.default_rng(0)
    scale = np.array([0.5, 0.02, 40.0])
    for step in range(30):
        rows = (rng.normal(size=(7, 3)) * scale + [-0.5, 0.0, 3.0]).astype(np.float32)
        if step == 0:
            rows[1:] = rows[0]  # a zero variance at the start: std 0, clipped
        expected = np.stack([reference(row) for row in rows])
        got = batch(rows)
        assert got.dtype == expected.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        if step == 10:  # RLlib merging remote runners' deltas clears the buffers
            for f in (reference, batch._filter):
                f.buffer = type(f.buffer)(f.buffer.shape)
                f.running_stats.num_pushes_delta = 0
                f.running_stats.mean_delta_array[...] = 0
                f.running_stats.sum_sq_diff_delta_array[...] = 0
    for name in ("running_stats", "buffer"):
        a, b = getattr(reference, name), getattr(batch._filter, name)
        assert (a.num_pushes, a.num_pushes_delta) == (b.num_pushes, b.num_pushes_delta)
        for field in ("mean_array", "mean_delta_array", "sum_sq_diff_array"):
            np.testing.assert_allclose(getattr(b, field), getattr(a, field), rtol=1e-9)
        np.testing.assert_allclose(b.sum_sq_diff_delta_array, a.sum_sq_diff_delta_array, rtol=1e-9)


def test_the_fast_runner_samples_what_rllibs_runner_does_behind_the_filter() -> None:
    """Normalised observations in the episodes, the same actions, and the same statistics
    in the runner's state as RLlib's runner with its connector (to rounding)."""
    config = runner_config("sim_ext/MountainCarContinuous-v0", 8).env_runners(
        env_to_module_connector=mean_std_filter
    )
    rllib = SingleAgentEnvRunner(config=config)
    fast = FastEnvRunner(config=config)
    assert fast.fast, fast.fallback_reason
    fast.module.set_state(rllib.module.get_state())
    for call in range(3):
        torch.manual_seed(call)
        expected = rllib.sample(num_timesteps=400, explore=True)
        torch.manual_seed(call)
        got = fast.sample(num_timesteps=400, explore=True)
        assert len(got) == len(expected)
        for a, b in zip(expected, got, strict=True):
            assert (a.t_started, a.t, len(a)) == (b.t_started, b.t, len(b))
            np.testing.assert_allclose(
                b.observations.data, a.observations.data, rtol=1e-4, atol=1e-4
            )
            np.testing.assert_allclose(b.actions.data, a.actions.data, rtol=1e-4, atol=1e-4)
            assert np.abs(b.observations.data).max() <= 10.0
    assert runner_stats(fast).count == runner_stats(rllib).count == 3 * 400 + 8
    np.testing.assert_allclose(runner_stats(fast).mean, runner_stats(rllib).mean, rtol=1e-6)
    np.testing.assert_allclose(runner_stats(fast).std, runner_stats(rllib).std, rtol=1e-5)


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
