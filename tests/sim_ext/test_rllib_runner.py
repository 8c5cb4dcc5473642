"""RLlib's SingleAgentEnvRunner samples sim_ext's vector env as a native VectorEnv."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

import sim_ext

TAU = np.float32(0.02)


def _runner(num_envs: int, **env_config: object) -> SingleAgentEnvRunner:
    config = (
        PPOConfig()
        .environment("sim_ext/CartPole-v1", env_config=env_config)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=num_envs,
            gym_env_vectorize_mode="vector_entry_point",
        )
        .debugging(seed=0)
    )
    return SingleAgentEnvRunner(config=config)


def _kinematics_error(obs: np.ndarray) -> float:
    """CartPole's Euler step moves x by tau * x_dot and theta by tau * theta_dot,
    computed in float32 by sim_ext, so consecutive observations of a correctly
    recorded episode satisfy it exactly."""
    x_next = obs[:-1, 0] + TAU * obs[:-1, 1]
    theta_next = obs[:-1, 2] + TAU * obs[:-1, 3]
    return float(max(np.abs(obs[1:, 0] - x_next).max(), np.abs(obs[1:, 2] - theta_next).max()))


def test_runner_samples_complete_correct_episodes_from_the_native_vector_env() -> None:
    runner = _runner(8)
    assert isinstance(runner.env.unwrapped, sim_ext.SimVectorEnv)
    episodes = runner.sample(num_episodes=24, random_actions=False)
    assert len(episodes) >= 24
    for episode in episodes:
        assert episode.is_done
        obs = episode.get_observations()
        rewards = episode.get_rewards()
        assert len(obs) == len(episode) + 1
        assert obs in runner.env.unwrapped.single_observation_space or episode.is_terminated
        # Every step earns 1 in CartPole, and the episode ends exactly when it should.
        np.testing.assert_array_equal(rewards, np.ones(len(episode), dtype=np.float32))
        assert _kinematics_error(obs) == 0.0
        last = obs[-1]
        out_of_bounds = abs(last[0]) > 2.4 or abs(last[2]) > 12 * 2 * np.pi / 360
        assert episode.is_terminated == out_of_bounds
        assert episode.is_truncated == (not out_of_bounds and len(episode) == 500)
    runner.stop()


def test_episodes_continue_across_sample_calls() -> None:
    runner = _runner(4)
    first = runner.sample(num_timesteps=40, random_actions=True)
    second = runner.sample(num_timesteps=40, random_actions=True)
    assert sum(len(e) for e in first) >= 40 and sum(len(e) for e in second) >= 40
    for episode in first + second:
        assert _kinematics_error(episode.get_observations()) == 0.0
    runner.stop()


def test_views_without_copy_would_corrupt_rllib_episodes() -> None:
    # Why SimVectorEnv copies by default: RLlib keeps each env's row of the
    # observation batch inside its episode objects across steps. Handing it the
    # zero-copy views would make every stored observation the latest one.
    runner = _runner(4, copy=False)
    episodes = runner.sample(num_episodes=4, random_actions=True)
    errors = [_kinematics_error(e.get_observations()) for e in episodes if len(e) > 2]
    assert errors and max(errors) > 1e-3
    runner.stop()


@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_workbench_envs_are_truncated_once_at_the_spec_limit_in_either_mode(mode: str) -> None:
    # The workbench's env creator (registered with Tune) under RLlib's runner: in "sync" mode
    # each env is gym.make's (TimeLimit from the spec), in "vector_entry_point" mode the C++
    # engine gets the spec's limit. Random pushes never get the car up the hill, so every
    # episode must be cut at exactly MountainCar-v0's 200 steps, and be truncated, once.
    from workbench.trial.config import register_env

    config = (
        PPOConfig()
        .environment(register_env("sim_ext/MountainCar-v0"))
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2, gym_env_vectorize_mode=mode)
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=config)
    vector = isinstance(runner.env.unwrapped, sim_ext.SimVectorEnv)
    assert vector == (mode == "vector_entry_point")
    episodes = [e for e in runner.sample(num_episodes=4, random_actions=True) if e.is_done]
    assert len(episodes) >= 4
    for episode in episodes:
        assert episode.is_truncated and not episode.is_terminated
        assert len(episode) == 200
    runner.stop()
