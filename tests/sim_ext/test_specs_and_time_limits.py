"""Every sim_ext id with a Gymnasium twin has the twin's spaces and spec, and its episodes
are truncated once, at the twin's time limit, by gym.make's TimeLimit (single env) or by the
C++ engine (vector env)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import sim_ext
from sim_ext.envs import ID_PREFIX, twin_spec

TWINS = [
    env_id.removeprefix(ID_PREFIX)
    for env_id in sim_ext.env_ids()
    if twin_spec(env_id.removeprefix(ID_PREFIX)) is not None
]


def test_every_environment_gymnasium_has_is_a_twin() -> None:
    assert set(TWINS) == {
        "CartPole-v1",
        "Acrobot-v1",
        "Pendulum-v1",
        "MountainCar-v0",
        "MountainCarContinuous-v0",
    }
    # GridMaze has no twin: its limit (4 n^2) lives in the env, and its spec has none.
    assert gym.spec("sim_ext/GridMaze-v0").max_episode_steps is None
    assert sim_ext.env_class("GridMaze-v0")(size=3).max_episode_steps == 36


def _assert_same_space(ours: gym.Space[Any], theirs: gym.Space[Any]) -> None:
    assert ours == theirs
    if isinstance(theirs, gym.spaces.Box):
        assert isinstance(ours, gym.spaces.Box) and ours.dtype == theirs.dtype
        # Box.__eq__ compares bounds with allclose; these must be the very same numbers.
        np.testing.assert_array_equal(ours.low, theirs.low)
        np.testing.assert_array_equal(ours.high, theirs.high)


@pytest.mark.parametrize("name", TWINS)
def test_spaces_and_spec_equal_gymnasiums(name: str) -> None:
    ours, theirs = gym.make(ID_PREFIX + name), gym.make(name)
    _assert_same_space(ours.observation_space, theirs.observation_space)
    _assert_same_space(ours.action_space, theirs.action_space)
    our_spec, their_spec = gym.spec(ID_PREFIX + name), gym.spec(name)
    assert our_spec.max_episode_steps == their_spec.max_episode_steps is not None
    assert our_spec.reward_threshold == their_spec.reward_threshold
    assert ours.spec is not None and ours.spec.max_episode_steps == their_spec.max_episode_steps
    vector = gym.make_vec(ID_PREFIX + name, num_envs=3, vectorization_mode="vector_entry_point")
    _assert_same_space(vector.single_observation_space, theirs.observation_space)
    _assert_same_space(vector.single_action_space, theirs.action_space)
    assert vector.max_episode_steps == their_spec.max_episode_steps
    # The vector class made directly has the same default.
    direct = sim_ext.vector_env_class(name)(num_envs=1)
    assert direct.max_episode_steps == their_spec.max_episode_steps


def test_cartpole_velocities_are_unbounded_as_in_gymnasium() -> None:
    space = gym.make("sim_ext/CartPole-v1").observation_space
    assert isinstance(space, gym.spaces.Box)
    assert np.isinf(space.high[[1, 3]]).all() and np.isneginf(space.low[[1, 3]]).all()


def _time_limits(env: gym.Env[Any, Any]) -> list[int]:
    limits = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            limits.append(env._max_episode_steps)
        env = env.env
    return limits


def _held_still(env: Any, state: np.ndarray) -> None:
    """Puts the env back in its first state, so that no episode ends by termination."""
    env.set_state(state)


@pytest.mark.parametrize("name", TWINS)
def test_gym_make_truncates_once_at_the_spec_limit(name: str) -> None:
    env = gym.make(ID_PREFIX + name)
    limit = gym.spec(name).max_episode_steps
    assert _time_limits(env) == [limit]
    assert env.unwrapped.max_episode_steps is None  # type: ignore[attr-defined]
    env.reset(seed=0)
    start = env.unwrapped.get_state()  # type: ignore[attr-defined]
    env.action_space.seed(0)
    action = env.action_space.sample()
    for t in range(1, limit + 1):
        _held_still(env.unwrapped, start)
        _, _, terminated, truncated, _ = env.step(action)
        assert not terminated
        assert truncated == (t == limit), t
    # The env itself counts nothing: it runs on past the limit.
    inner = env.unwrapped
    inner.reset(seed=0)
    for _ in range(limit + 5):
        _held_still(inner, start)
        _, _, terminated, truncated, _ = inner.step(action)
        assert not terminated and not truncated


@pytest.mark.parametrize("name", TWINS)
def test_a_limit_given_to_gym_make_or_to_the_env_is_the_only_one(name: str) -> None:
    wrapped = gym.make(ID_PREFIX + name, max_episode_steps=7)
    assert _time_limits(wrapped) == [7]
    assert wrapped.unwrapped.max_episode_steps is None  # type: ignore[attr-defined]
    # Given to the env's constructor (not through gym.make), the env counts.
    own = sim_ext.env_class(name)(max_episode_steps=7)
    assert own.max_episode_steps == 7
    for env in (wrapped, own):
        env.reset(seed=1)
        start = env.unwrapped.get_state()  # type: ignore[attr-defined]
        env.action_space.seed(1)
        flags = []
        for _ in range(7):
            _held_still(env.unwrapped, start)
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            flags.append((terminated, truncated))
        assert flags == [(False, False)] * 6 + [(False, True)]


@pytest.mark.parametrize("name", TWINS)
@pytest.mark.parametrize("given", [None, 7])
def test_make_vec_truncates_once_in_the_engine(name: str, given: int | None) -> None:
    kwargs = {} if given is None else {"max_episode_steps": given}
    env = gym.make_vec(
        ID_PREFIX + name, num_envs=3, vectorization_mode="vector_entry_point", **kwargs
    )
    limit = given or gym.spec(name).max_episode_steps
    assert env.max_episode_steps == limit
    env.reset(seed=2)
    start = env.get_state()
    env.action_space.seed(2)
    action = env.action_space.sample()
    for t in range(1, limit + 2):
        _held_still(env, start)
        _, reward, terminated, truncated, _ = env.step(action)
        assert not terminated.any()
        if t <= limit:
            assert truncated.all() == (t == limit) and truncated.any() == (t == limit), t
        else:  # NEXT_STEP autoreset: a new episode, no flags
            assert not truncated.any() and np.all(reward == 0.0)
            assert np.all(env.elapsed_steps == 0)


def test_render_modes_and_fps_are_declared_like_gymnasiums() -> None:
    for name in TWINS:
        ours = sim_ext.env_class(name).metadata
        theirs = gym.make(name).unwrapped.metadata
        assert ours["render_modes"] == ["rgb_array"]
        assert ours["render_fps"] == theirs["render_fps"]
