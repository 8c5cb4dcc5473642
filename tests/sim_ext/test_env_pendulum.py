"""sim_ext Pendulum-v1 against Gymnasium's Pendulum-v1."""

from __future__ import annotations

import numpy as np
from gymnasium.envs.classic_control.pendulum import PendulumEnv

from sim_ext import PendulumVectorEnv
from tests.support.alignment import align

# Rewards are float32 in sim_ext and float64 in Gymnasium: |reward| <= 16.27,
# where half a float32 ulp is 9.5e-7 (measured worst case 9.5e-7).
REWARD_ATOL = 1e-6


def _set_state(ref: PendulumEnv, state: np.ndarray) -> None:
    ref.state = np.asarray(state, dtype=np.float64).copy()


def _random_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    # A sixth of the torques lie outside [-2, 2] and must be clipped.
    return rng.uniform(-3.0, 3.0, size=(len(obs), 1)).astype(np.float32)


def _random_policy_f64(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-3.0, 3.0, size=(len(obs), 1))


def _far_out_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    choices = np.array([5.0, -7.0, 2.0, -2.0, 1e6, -1e30, 0.5], dtype=np.float32)
    return rng.choice(choices, size=(len(obs), 1))


def test_pendulum_free_run_matches_gymnasium_bit_for_bit() -> None:
    # float32 actions (the action space's dtype), free running over thousands
    # of steps and full episodes. The C++ follows NumPy's evaluation of
    # PendulumEnv.step exactly (float32 torque terms, float64 state, libm
    # sin/cos/fmod/pow), so observations agree bit for bit: measured worst case
    # 0.0, allowed 0.0. Rewards: float32 rounding (REWARD_ATOL).
    report = align(
        "Pendulum-v1",
        PendulumEnv,
        _set_state,
        _random_policy,
        num_envs=16,
        steps=1000,
        obs_atol=0.0,
        obs_rtol=0.0,
        reward_atol=REWARD_ATOL,
        seed=1,
    )
    # Episodes end at steps 199, 400, 601 and 802 (one step restarts each).
    assert report.terminations == 0
    assert report.truncations == 16 * 4
    assert report.episodes == 16 * 4
    assert report.steps == 16 * (1000 - 4)


def test_pendulum_each_step_matches_gymnasium_with_float64_actions() -> None:
    # float64 actions reach the C++ rounded to float32 (the engine's action
    # buffer), while Gymnasium computes with the float64 torque: a relative
    # difference of 6e-8 per step that the unstable upright position amplifies
    # in free running (measured: 1e-2 in observations after 200 steps). So the
    # reference restarts every step from the C++ state. Measured worst case
    # 4.8e-7 (one float32 ulp of a speed near 8); allowed 1e-6.
    report = align(
        "Pendulum-v1",
        PendulumEnv,
        _set_state,
        _random_policy_f64,
        num_envs=16,
        steps=600,
        obs_atol=1e-6,
        obs_rtol=0.0,
        reward_atol=REWARD_ATOL,
        seed=2,
        resync=True,
    )
    assert report.truncations == 16 * 2
    assert report.terminations == 0


def test_actions_outside_the_bounds_are_clipped_like_gymnasium() -> None:
    # Measured worst case 0.0 for observations (bit for bit); allowed 0.0.
    report = align(
        "Pendulum-v1",
        PendulumEnv,
        _set_state,
        _far_out_policy,
        num_envs=8,
        steps=450,
        obs_atol=0.0,
        obs_rtol=0.0,
        reward_atol=REWARD_ATOL,
        seed=3,
    )
    assert report.truncations == 8 * 2

    # 5.0 is 2.0 and -7.0 is -2.0, in float32 and float64 arrays of shape (N, 1).
    states = {}
    for dtype in (np.float32, np.float64):
        for torque in (5.0, 2.0, -7.0, -2.0):
            env = PendulumVectorEnv(num_envs=4)
            env.reset(seed=4)
            env.step(np.full((4, 1), torque, dtype=dtype))
            states[dtype, torque] = env.get_state()
    for dtype in (np.float32, np.float64):
        np.testing.assert_array_equal(states[dtype, 5.0], states[dtype, 2.0])
        np.testing.assert_array_equal(states[dtype, -7.0], states[dtype, -2.0])
        np.testing.assert_array_equal(states[dtype, 5.0], states[np.float32, 5.0])
    assert not np.array_equal(states[np.float32, 2.0], states[np.float32, -2.0])


def test_gravity_is_configurable_like_gymnasium() -> None:
    # Measured worst case 0.0 for observations (bit for bit); allowed 0.0.
    report = align(
        "Pendulum-v1",
        lambda: PendulumEnv(g=9.81),
        _set_state,
        _random_policy,
        num_envs=4,
        steps=250,
        obs_atol=0.0,
        obs_rtol=0.0,
        reward_atol=REWARD_ATOL,
        seed=5,
        env_config={"g": 9.81},
    )
    assert report.truncations == 4


def test_pendulum_reset_draws_gymnasium_initial_states() -> None:
    env = PendulumVectorEnv(num_envs=4096)
    obs, _ = env.reset(seed=6)
    theta, thetadot = env.get_state().T
    # Gymnasium: theta uniform in [-pi, pi), thetadot uniform in [-1, 1).
    assert np.all(np.abs(theta) <= np.pi) and np.all(np.abs(thetadot) <= 1.0)
    assert abs(theta.mean()) < 0.1 and abs(theta.std() - 2 * np.pi / np.sqrt(12)) < 0.05
    assert abs(thetadot.mean()) < 0.03 and abs(thetadot.std() - 2 / np.sqrt(12)) < 0.02
    expected = np.column_stack([np.cos(theta), np.sin(theta), thetadot]).astype(np.float32)
    np.testing.assert_array_equal(obs, expected)


def test_substeps_one_is_gymnasium_and_more_substeps_refine_the_same_motion() -> None:
    coarse = PendulumVectorEnv(num_envs=4, substeps=1)
    fine = PendulumVectorEnv(num_envs=4, substeps=4)
    coarse.reset(seed=7)
    fine.reset(seed=7)
    np.testing.assert_array_equal(coarse.get_state(), fine.get_state())
    a = np.array([[-2.0], [-0.5], [0.5], [2.0]], dtype=np.float32)
    _, r1, *_ = coarse.step(a)
    _, r2, *_ = fine.step(a)
    # The reward is the cost of the state before the step: the same.
    np.testing.assert_array_equal(r1, r2)
    # Same physics, finer integration: close but not identical. Semi-implicit
    # Euler moves the angle with the end-of-step speed, an error of about
    # acc * dt**2 / 2 per step, of which four substeps remove three quarters:
    # |acc| <= 3 * 10 / 2 + 3 * 2 = 21, so |difference| <= 0.02 rad (measured
    # 0.019 rad in theta, 0.002 rad/s in thetadot).
    diff = np.abs(coarse.get_state() - fine.get_state())
    assert np.all(diff <= [0.021, 0.005])
    assert np.all(diff[:, 0] > 0)
