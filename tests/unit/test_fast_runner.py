"""The fast env runner returns what RLlib's runner returns, step for step.

Both runners get the same config, seed and module weights; torch's random state is
reset before each sample, so even exploration draws the same actions (the fast loop
performs the same random draws as RLlib's GetActions connector).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from tests.support.env_runners import runner_config
from workbench.trial.config import register_env
from workbench.trial.fast_runner import FastEnvRunner


def _pair(config: Any) -> tuple[SingleAgentEnvRunner, FastEnvRunner]:
    rllib = SingleAgentEnvRunner(config=config)
    fast = FastEnvRunner(config=config)
    assert fast.fast, fast.fallback_reason
    fast.module.set_state(rllib.module.get_state())
    return rllib, fast


def _assert_same(a: Any, b: Any) -> None:
    assert (a.t_started, a.t, len(a), a.is_terminated, a.is_truncated) == (
        b.t_started,
        b.t,
        len(b),
        b.is_terminated,
        b.is_truncated,
    )
    assert a.observations.lookback == b.observations.lookback
    assert a.actions.lookback == b.actions.lookback
    # Lookback included: what the learner's connectors can look back on.
    np.testing.assert_array_equal(a.observations.data, b.observations.data)
    np.testing.assert_array_equal(a.actions.data, b.actions.data)
    np.testing.assert_array_equal(a.rewards.data, b.rewards.data)
    assert a.rewards.data.dtype == b.rewards.data.dtype
    assert set(a.extra_model_outputs) == set(b.extra_model_outputs)
    for key in a.extra_model_outputs:
        np.testing.assert_allclose(
            a.extra_model_outputs[key].data, b.extra_model_outputs[key].data, rtol=1e-6
        )
    assert a.is_numpy and b.is_numpy


@pytest.mark.parametrize(
    ("env_id", "n", "explore"),
    [
        ("sim_ext/CartPole-v1", 1, False),
        ("sim_ext/CartPole-v1", 8, False),
        ("sim_ext/CartPole-v1", 8, True),
        ("sim_ext/Pendulum-v1", 4, False),  # Box actions: unsquashed for the env
        ("sim_ext/Pendulum-v1", 4, True),
        ("sim_ext/Acrobot-v1", 3, True),
    ],
)
def test_the_same_episodes_as_rllibs_runner(env_id: str, n: int, explore: bool) -> None:
    rllib, fast = _pair(runner_config(env_id, n))
    for call in range(4):  # episodes continue across calls, with their lookback
        torch.manual_seed(call)
        expected = rllib.sample(num_timesteps=250, explore=explore)
        torch.manual_seed(call)
        got = fast.sample(num_timesteps=250, explore=explore)
        assert len(got) == len(expected)
        for a, b in zip(expected, got, strict=True):
            _assert_same(a, b)
    # The same metrics, from the same episodes.
    expected_metrics, got_metrics = rllib.get_metrics(), fast.get_metrics()
    for key in ("episode_return_mean", "episode_len_mean", "num_episodes", "num_env_steps_sampled"):
        assert (key in got_metrics) == (key in expected_metrics), key
        if key in expected_metrics:
            expected_value = float(expected_metrics[key].peek())
            assert float(got_metrics[key].peek()) == pytest.approx(expected_value), key


def test_an_episode_keeps_its_id_across_calls() -> None:
    _, fast = _pair(runner_config("sim_ext/CartPole-v1", 2))
    first = {e.id_: e for e in fast.sample(num_timesteps=30, explore=True) if not e.is_done}
    second = fast.sample(num_timesteps=30, explore=True)
    continued = [e for e in second if e.id_ in first]
    assert continued, "no episode ran across the two calls"
    for chunk in continued:
        assert chunk.t_started == first[chunk.id_].t


def test_checkpointed_state_restores_into_a_fast_runner() -> None:
    _, fast = _pair(runner_config())
    torch.manual_seed(0)
    fast.sample(num_timesteps=100, explore=True)
    state = fast.get_state()
    again = FastEnvRunner(config=runner_config())
    again.set_state(state)
    observations = torch.from_numpy(np.random.default_rng(0).random((16, 4), dtype=np.float32))
    with torch.no_grad():
        before = fast.module.forward_inference({"obs": observations})["action_dist_inputs"]
        after = again.module.forward_inference({"obs": observations})["action_dist_inputs"]
    torch.testing.assert_close(before, after)
    assert again.num_env_steps_sampled_lifetime == fast.num_env_steps_sampled_lifetime


def test_same_seed_same_episodes_other_seed_other_episodes() -> None:
    def run(seed: int) -> np.ndarray:
        runner = FastEnvRunner(config=runner_config(seed=seed))
        torch.manual_seed(seed)
        episodes = runner.sample(num_timesteps=100, explore=True)
        return np.concatenate([e.get_observations() for e in episodes])

    np.testing.assert_array_equal(run(1), run(1))
    assert not np.array_equal(run(1)[:50], run(2)[:50])


def test_unsupported_setups_fall_back_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    register_env("sim_ext/CartPole-v1")
    dqn = (
        DQNConfig()
        .environment(env="sim_ext/CartPole-v1")
        .env_runners(num_env_runners=0, gym_env_vectorize_mode="vector_entry_point")
    )
    runner = FastEnvRunner(config=dqn)
    assert not runner.fast
    assert "samples for PPO, APPO, IMPALA, not DQN" in (runner.fallback_reason or "")
    assert "fast env runner off" in capsys.readouterr().out
    assert runner.sample(num_timesteps=50, random_actions=True)  # RLlib's loop samples

    from ray.rllib.connectors.env_to_module import FlattenObservations

    custom = runner_config().env_runners(
        env_to_module_connector=lambda env, spaces, device: FlattenObservations()
    )
    runner = FastEnvRunner(config=custom)
    assert runner.fallback_reason == "custom connectors are configured"
    assert runner.sample(num_timesteps=50)
