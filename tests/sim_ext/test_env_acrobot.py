"""sim_ext Acrobot-v1 against Gymnasium's Acrobot-v1."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.envs.classic_control.acrobot import AcrobotEnv, rk4

from sim_ext import AcrobotVectorEnv
from tests.support.alignment import align


def _set_state(ref: AcrobotEnv, state: np.ndarray) -> None:
    ref.state = np.asarray(state, dtype=np.float64).copy()


def _random_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 3, size=len(obs)).astype(np.int64)


def _mixed_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Odd envs act at random (they never reach the goal: every episode runs
    into the 500-step limit); even envs pump energy with a torque against
    dtheta1, with 20% random actions (they swing up in ~100 steps)."""
    pump = np.where(obs[:, 4] > 0, 0, 2)
    noisy_pump = np.where(rng.random(len(obs)) < 0.2, rng.integers(0, 3, size=len(obs)), pump)
    random = rng.integers(0, 3, size=len(obs))
    return np.where(np.arange(len(obs)) % 2 == 0, noisy_pump, random).astype(np.int64)


def test_acrobot_free_run_matches_gymnasium_bit_for_bit() -> None:
    # Free running over thousands of steps and full episodes, from the same
    # initial states. The double pendulum is chaotic (a one-ulp difference
    # grows to O(1) within an episode), so nothing but exact agreement would
    # stay close: the C++ computes in float64 in Gymnasium's order of
    # operations with the libm sin/cos/pow that NumPy calls, and agrees bit for
    # bit. Measured worst case: 0.0 for observations and rewards; allowed 0.0.
    # (This relies on NumPy's float64 sin/cos/pow being the same libm as the
    # extension's, as on Linux/glibc; the per-step test below does not.)
    report = align(
        "Acrobot-v1",
        AcrobotEnv,
        _set_state,
        _mixed_policy,
        num_envs=16,
        steps=2000,
        obs_atol=0.0,
        obs_rtol=0.0,
        reward_atol=0.0,
        seed=7,
    )
    assert report.steps > 30_000
    assert report.terminations > 60, "the pumping half must reach the goal height"
    assert report.truncations >= 24, "the random half must run into the 500-step limit"
    assert report.episodes > 80


def test_acrobot_each_step_matches_gymnasium() -> None:
    # The reference restarts every step from the C++ state, so each step's
    # RK4 integration, wrap and bound are compared on their own. Tolerance: one
    # float32 rounding of the observation, what a last-bit difference of a libm
    # on another platform could cause (measured worst case here: 0.0).
    report = align(
        "Acrobot-v1",
        AcrobotEnv,
        _set_state,
        _mixed_policy,
        num_envs=8,
        steps=1000,
        obs_atol=1e-7,
        obs_rtol=2e-7,
        reward_atol=0.0,
        seed=8,
        resync=True,
    )
    assert report.steps > 7_000
    assert report.terminations > 20
    assert report.truncations >= 4


def test_acrobot_random_actions_always_reach_the_time_limit() -> None:
    # Random torques never swing the tip up: every episode truncates at 500.
    # Measured worst case 0.0 (bit for bit, as above); allowed 0.0.
    report = align(
        "Acrobot-v1",
        AcrobotEnv,
        _set_state,
        _random_policy,
        num_envs=4,
        steps=1100,
        obs_atol=0.0,
        obs_rtol=0.0,
        reward_atol=0.0,
        seed=9,
    )
    assert report.terminations == 0
    assert report.truncations == 8


def test_acrobot_extreme_velocities_wrap_angles_like_gymnasium() -> None:
    # Velocities beyond the bounds (only reachable through set_state) move the
    # angles by several turns in one step; Gymnasium's wrap() subtracts 2 pi
    # in a loop, and the C++ must give exactly the same angle.
    rng = np.random.default_rng(10)
    n = 64
    state = np.column_stack(
        [
            rng.uniform(-np.pi, np.pi, n),
            rng.uniform(-np.pi, np.pi, n),
            rng.uniform(-30.0, 30.0, n),
            rng.uniform(-30.0, 30.0, n),
        ]
    )
    actions = rng.integers(0, 3, size=n).astype(np.int64)
    ref = AcrobotEnv()
    ref.reset(seed=10)
    unwrapped = np.array([rk4(ref._dsdt, np.append(s, 0.0), [0, ref.dt])[:2] for s in state])
    assert np.sum(np.abs(unwrapped) > 3 * np.pi) >= 5, "some angles must need several wraps"
    env = AcrobotVectorEnv(num_envs=n)
    env.reset(seed=10)
    env.set_state(state)
    obs, reward, terminated, _, _ = env.step(actions)
    after = env.get_state()
    for i in range(n):
        _set_state(ref, state[i])
        ref_obs, ref_reward, ref_terminated, _, _ = ref.step(actions[i])
        np.testing.assert_array_equal(after[i], ref.state)
        np.testing.assert_array_equal(obs[i], ref_obs)
        assert reward[i] == ref_reward and terminated[i] == ref_terminated
    assert np.all(np.abs(after[:, :2]) <= np.pi)


def test_acrobot_absurd_states_do_not_hang_the_step() -> None:
    # Gymnasium's wrap() loops forever on an angle too large for x - 2 pi to
    # change it; the C++ reduces those with fmod first. (Non-finite states are
    # refused by set_state.)
    env = AcrobotVectorEnv(num_envs=4)
    env.reset(seed=13)
    env.set_state(
        np.array(
            [[0.0, 0.0, 1e300, 0.0], [0.0, 0.0, 0.0, -1e12], [1e20, -1e20, 0, 0], [-1e300, 0, 0, 0]]
        )
    )
    env.step(np.ones(4, dtype=np.int64))
    angles = env.get_state()[:, :2]
    # A velocity of 1e300 overflows the dynamics to NaN, as it does in Gymnasium.
    assert np.all(np.isnan(angles[0]))
    assert np.all(np.abs(angles[1:]) <= np.pi)
    with pytest.raises(ValueError, match="expected finite numbers"):
        env.set_state(np.array([[np.inf, 0, 0, 0]] * 4))


def test_acrobot_reset_draws_gymnasium_initial_states() -> None:
    env = AcrobotVectorEnv(num_envs=2048)
    obs, _ = env.reset(seed=11)
    state = env.get_state()
    # Gymnasium: uniform(-0.1, 0.1) for all four variables, stored as float32.
    assert np.all(np.abs(state) <= 0.1)
    np.testing.assert_array_equal(state, state.astype(np.float32))
    assert np.all(np.abs(state.mean(axis=0)) < 0.005)
    assert np.all(np.abs(state.std(axis=0) - 0.2 / np.sqrt(12)) < 0.005)
    # Gymnasium computes the first observation with float32 sin/cos, the C++
    # with float64 ones rounded to float32: they may differ in the last bit
    # (measured: 2 of 12288 entries, by 6e-8).
    ref = AcrobotEnv()
    ref.reset(seed=11)
    for i in range(len(state)):
        ref.state = state[i].astype(np.float32)
        np.testing.assert_allclose(obs[i], ref._get_ob(), rtol=0, atol=1.2e-7)


def test_substeps_one_is_gymnasium_and_more_substeps_refine_the_same_motion() -> None:
    coarse = AcrobotVectorEnv(num_envs=4, substeps=1)
    fine = AcrobotVectorEnv(num_envs=4, substeps=4)
    coarse.reset(seed=12)
    fine.reset(seed=12)
    np.testing.assert_array_equal(coarse.get_state(), fine.get_state())
    a = np.array([0, 1, 2, 0], dtype=np.int64)
    for _ in range(5):
        o1, *_ = coarse.step(a)
        o2, *_ = fine.step(a)
    # Same physics, finer integration: close but not identical.
    assert np.allclose(o1, o2, atol=1e-3)
    assert not np.array_equal(o1, o2)
