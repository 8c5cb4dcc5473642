"""sim_ext MountainCar-v0 and MountainCarContinuous-v0 against Gymnasium's."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.envs.classic_control.continuous_mountain_car import Continuous_MountainCarEnv
from gymnasium.envs.classic_control.mountain_car import MountainCarEnv

from sim_ext import MountainCarContinuousVectorEnv, MountainCarVectorEnv
from tests.support.alignment import align

# Gymnasium's continuous car mixes float32 and Python floats; the C++ follows NumPy 2's
# promotion rules (NEP 50). Under NumPy 1's rules the reference computes some steps in
# float64, and the two then agree within float32 rounding instead of bit for bit.
NEP50 = np.lib.NumpyVersion(np.__version__) >= "2.0.0"
CONTINUOUS_OBS_ATOL = 0.0 if NEP50 else 1e-6
# Rewards are float32 in sim_ext, float64 in Gymnasium: |reward| <= 100.4, where half a
# float32 ulp is 3.8e-6 (measured worst case 3.7e-6).
CONTINUOUS_REWARD_ATOL = 4e-6


def _set_state(ref: MountainCarEnv | Continuous_MountainCarEnv, state: np.ndarray) -> None:
    # A float64 array, as Gymnasium's reset leaves it (the continuous car's next step then
    # computes in float64, and so does the C++ after a reset or set_state).
    ref.state = np.asarray(state, dtype=np.float64).copy()


def _discrete_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Even envs push along their velocity (70% of the time: they reach the flag in about
    100-150 steps); odd envs act at random (they never do, and run into the 200-step limit)."""
    pump = np.where(obs[:, 1] > 0, 2, 0)
    noisy = np.where(rng.random(len(obs)) < 0.3, rng.integers(0, 3, len(obs)), pump)
    random = rng.integers(0, 3, len(obs))
    return np.where(np.arange(len(obs)) % 2 == 0, noisy, random).astype(np.int64)


def _continuous_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Pushes along the velocity with a random strength in [0.2, 1.6] (a third of them beyond
    the bound of 1), 30% random forces in [-2, 2], and every fourth env forces of exactly
    +-1 and just beyond: the clipped and unclipped paths, the cost of unclipped actions."""
    n = len(obs)
    pump = np.where(obs[:, 1] > 0, 1.0, -1.0) * rng.uniform(0.2, 1.6, n)
    a = np.where(rng.random(n) < 0.3, rng.uniform(-2.0, 2.0, n), pump).astype(np.float32)
    edge = np.array([1.0, -1.0, np.nextafter(1, 2), -np.nextafter(1, 2)], dtype=np.float32)
    a[::4] = rng.choice(edge, size=len(a[::4]))
    return a.reshape(n, 1)


def test_mountain_car_free_run_matches_gymnasium_bit_for_bit() -> None:
    # float64 state and libm's cos, as math.cos calls it: measured worst case 0.0 for
    # observations and rewards; allowed 0.0. Flags agree exactly.
    report = align(
        "MountainCar-v0",
        MountainCarEnv,
        _set_state,
        _discrete_policy,
        num_envs=16,
        steps=1500,
        obs_atol=0.0,
        obs_rtol=0.0,
        reward_atol=0.0,
        seed=1,
    )
    assert report.steps > 20_000
    assert report.terminations > 50, "the pushing half must reach the flag"
    assert report.truncations >= 40, "the random half must run into the 200-step limit"


def test_mountain_car_continuous_free_run_matches_gymnasium_bit_for_bit() -> None:
    # float32 actions: free running over whole episodes (the first step of each in float64,
    # the rest in float32, as Gymnasium's state array is). Measured worst case 0.0 for
    # observations; rewards within float32 rounding.
    report = align(
        "MountainCarContinuous-v0",
        Continuous_MountainCarEnv,
        _set_state,
        _continuous_policy,
        num_envs=16,
        steps=1500,
        obs_atol=CONTINUOUS_OBS_ATOL,
        obs_rtol=0.0,
        reward_atol=CONTINUOUS_REWARD_ATOL,
        seed=2,
    )
    assert report.steps > 20_000
    assert report.terminations > 100


def test_mountain_car_continuous_random_forces_run_into_the_time_limit() -> None:
    # Uniform forces in [-1, 1] never climb the hill: every episode is cut at step 999.
    def uniform(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, size=(len(obs), 1)).astype(np.float32)

    report = align(
        "MountainCarContinuous-v0",
        Continuous_MountainCarEnv,
        _set_state,
        uniform,
        num_envs=4,
        steps=1000,
        obs_atol=CONTINUOUS_OBS_ATOL,
        obs_rtol=0.0,
        reward_atol=CONTINUOUS_REWARD_ATOL,
        seed=3,
    )
    assert report.terminations == 0
    assert report.truncations == 4


def test_mountain_car_continuous_float64_actions_match_each_step() -> None:
    # float64 actions reach the C++ rounded to float32, Gymnasium computes with them as
    # given; and the reference restarts every step from a float64 state (its float64 path)
    # while the C++ is on its float32 path. Each step agrees within float32 rounding of the
    # state: measured worst case 1.2e-7 (two ulps of a position in [0.5, 1)); allowed 2.5e-7.
    def policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return _continuous_policy(obs, rng).astype(np.float64) + rng.normal(0, 1e-3, (len(obs), 1))

    report = align(
        "MountainCarContinuous-v0",
        Continuous_MountainCarEnv,
        _set_state,
        policy,
        num_envs=8,
        steps=800,
        obs_atol=2.5e-7,
        obs_rtol=0.0,
        reward_atol=CONTINUOUS_REWARD_ATOL,
        seed=4,
        resync=True,
    )
    assert report.terminations > 20


@pytest.mark.parametrize(
    ("vector_class", "reference_class", "action"),
    [
        (MountainCarVectorEnv, MountainCarEnv, np.int64(0)),
        (MountainCarContinuousVectorEnv, Continuous_MountainCarEnv, np.float32([-1.0])),
    ],
)
def test_the_left_wall_stops_the_car_like_gymnasium(
    vector_class: type, reference_class: type, action: np.ndarray
) -> None:
    # Driving left into x = -1.2: the position is clipped and the velocity set to 0.
    states = np.array([[-1.19, -0.05], [-1.2, -0.07], [-1.15, -0.07], [-1.1, 0.01]])
    env = vector_class(num_envs=len(states))
    env.reset(seed=0)
    env.set_state(states)
    batch = np.full((len(states), *np.shape(action)), action, dtype=np.asarray(action).dtype)
    first, *_ = env.step(batch)
    first = first.copy()
    at_wall = first[:, 0] == np.float32(-1.2)
    np.testing.assert_array_equal(at_wall, [True, True, True, False])
    assert np.all(first[at_wall, 1] == 0.0)
    for _ in range(3):  # gravity rolls it back to the right (on the continuous car's float32 path)
        obs, *_ = env.step(batch)
    for i, state in enumerate(states):
        ref = reference_class()
        ref.reset(seed=0)
        _set_state(ref, state)
        ref_first, *_ = ref.step(action)
        np.testing.assert_array_equal(first[i], ref_first)
        for _ in range(3):
            ref_obs, *_ = ref.step(action)
        np.testing.assert_array_equal(obs[i], ref_obs)


def test_the_action_cost_uses_the_unclipped_force_and_the_push_the_clipped_one() -> None:
    env = MountainCarContinuousVectorEnv(num_envs=4)
    env.reset(seed=5)
    start = env.get_state()
    _, reward, *_ = env.step(np.array([[2.0], [1.0], [-3.0], [0.5]], dtype=np.float32))
    after = env.get_state()
    np.testing.assert_array_equal(reward, np.float32([-0.4, -0.1, -0.9, -0.025]))
    ref = Continuous_MountainCarEnv()
    ref.reset(seed=5)
    for i, a in enumerate([2.0, 1.0, -3.0, 0.5]):
        _set_state(ref, start[i])
        _, ref_reward, *_ = ref.step(np.float32([a]))
        np.testing.assert_array_equal(after[i], ref.state)
        assert reward[i] == np.float32(ref_reward)


def test_a_huge_force_costs_the_lowest_finite_float32_reward() -> None:
    # Gymnasium's reward is float64 (-1e59 for a force of 1e30); a float32 holds at most
    # 3.4e38, so the cost saturates there instead of becoming -inf.
    env = MountainCarContinuousVectorEnv(num_envs=2)
    env.reset(seed=6)
    _, reward, *_ = env.step(np.float32([[1e30], [-1e19]]))
    assert reward[0] == -np.finfo(np.float32).max
    ref = Continuous_MountainCarEnv()
    for i, force in enumerate((1e30, -1e19)):
        ref.reset(seed=6)
        _, ref_reward, *_ = ref.step(np.float32([force]))
        assert ref_reward <= float(reward[i])
    assert reward[1] == np.float32(ref_reward), "a cost a float32 can hold is Gymnasium's"


@pytest.mark.parametrize(
    ("vector_class", "reference_class", "policy"),
    [
        (MountainCarVectorEnv, MountainCarEnv, _discrete_policy),
        (MountainCarContinuousVectorEnv, Continuous_MountainCarEnv, _continuous_policy),
    ],
)
def test_goal_velocity_is_configurable_like_gymnasium(
    vector_class: type, reference_class: type, policy: object
) -> None:
    name = vector_class.core_class.env_name
    report = align(
        name,
        lambda: reference_class(goal_velocity=0.02),
        _set_state,
        policy,  # type: ignore[arg-type]
        num_envs=8,
        steps=600,
        obs_atol=0.0 if NEP50 or name == "MountainCar-v0" else 1e-6,
        obs_rtol=0.0,
        reward_atol=CONTINUOUS_REWARD_ATOL,
        seed=7,
        env_config={"goal_velocity": 0.02},
    )
    assert report.terminations > 5
    with pytest.raises(ValueError, match=r"'goal_velocity': got 0.5, expected a finite number"):
        vector_class(num_envs=1, goal_velocity=0.5)


@pytest.mark.parametrize("vector_class", [MountainCarVectorEnv, MountainCarContinuousVectorEnv])
def test_reset_draws_gymnasium_initial_states(vector_class: type) -> None:
    env = vector_class(num_envs=4096)
    obs, _ = env.reset(seed=8)
    position, velocity = env.get_state().T
    # Gymnasium: position uniform in [-0.6, -0.4) (float64), velocity 0.
    assert np.all((position >= -0.6) & (position < -0.4))
    assert abs(position.mean() + 0.5) < 0.003
    assert abs(position.std() - 0.2 / np.sqrt(12)) < 0.003
    assert np.all(velocity == 0.0)
    assert not np.array_equal(position, position.astype(np.float32)), "float64, not float32"
    np.testing.assert_array_equal(obs, np.column_stack([position, velocity]).astype(np.float32))
