"""The Gymnasium contract, checked on every compiled environment.

Parametrised over `sim_ext.env_ids()`, so an environment added with one header
and one registration line is held to all of it without a new test.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import sim_ext
from sim_ext import env_class, vector_env_class

ENV_IDS = sim_ext.env_ids()
NAMES = [env_id.removeprefix("sim_ext/") for env_id in ENV_IDS]


def _actions(env: gym.vector.VectorEnv, seed: int, steps: int) -> list[np.ndarray]:
    space = env.action_space
    space.seed(seed)
    return [np.ascontiguousarray(space.sample()) for _ in range(steps)]


def _rollout(name: str, num_envs: int, seed: int, steps: int, **config: object) -> dict:
    env = vector_env_class(name)(num_envs=num_envs, **config)
    obs, _ = env.reset(seed=seed)
    out = {"obs": [obs], "reward": [], "terminated": [], "truncated": []}
    for a in _actions(env, 1234, steps):
        obs, reward, terminated, truncated, _ = env.step(a)
        out["obs"].append(obs)
        out["reward"].append(reward)
        out["terminated"].append(terminated)
        out["truncated"].append(truncated)
    env.close()
    return {k: np.stack(v) for k, v in out.items()}


def test_all_six_environments_are_registered() -> None:
    expected = {
        "CartPole-v1",
        "Acrobot-v1",
        "Pendulum-v1",
        "GridMaze-v0",
        "MountainCar-v0",
        "MountainCarContinuous-v0",
    }
    missing = expected - set(NAMES)
    assert not missing, f"not compiled into sim_ext._core: {sorted(missing)}"


@pytest.mark.parametrize("env_id", ENV_IDS)
# Pendulum's torque space is [-2, 2] as in Gymnasium, which the checker advises against.
@pytest.mark.filterwarnings("ignore:.*symmetric and normalized space:UserWarning")
# CartPole's velocity bounds are +-inf as in Gymnasium, which the checker calls too wide.
@pytest.mark.filterwarnings("ignore:.*space (minimum|maximum) value is -?infinity:UserWarning")
def test_single_env_passes_gymnasium_env_checker(env_id: str) -> None:
    # The render check makes the env again with each declared render mode and checks the frame.
    env = gym.make(env_id)
    check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_vec_with_vector_entry_point_gives_a_next_step_vector_env(env_id: str) -> None:
    env = gym.make_vec(env_id, num_envs=5, vectorization_mode="vector_entry_point")
    assert isinstance(env, sim_ext.SimVectorEnv)
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert env.num_envs == 5
    single = gym.make(env_id)
    assert env.single_observation_space == single.observation_space
    assert env.single_action_space == single.action_space
    obs, info = env.reset(seed=0)
    assert obs.shape == (5, *single.observation_space.shape)
    assert obs.dtype == np.float32
    assert info == {}
    obs, reward, terminated, truncated, info = env.step(_actions(env, 0, 1)[0])
    assert obs in env.observation_space
    assert info == {}
    assert reward.shape == terminated.shape == truncated.shape == (5,)
    assert terminated.dtype == truncated.dtype == np.bool_
    env.close()
    single.close()


# An open GridMaze has no randomness (start and goal are fixed): walls make the seed matter.
SEED_DEPENDENT_CONFIG = {"GridMaze-v0": {"wall_density": 0.3}}


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_trajectory_other_seed_other(name: str) -> None:
    config = SEED_DEPENDENT_CONFIG.get(name, {})
    a = _rollout(name, 8, seed=7, steps=300, **config)
    b = _rollout(name, 8, seed=7, steps=300, **config)
    c = _rollout(name, 8, seed=8, steps=300, **config)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert not np.array_equal(a["obs"], c["obs"])


@pytest.mark.parametrize("name", NAMES)
def test_env_i_does_not_depend_on_batch_size(name: str) -> None:
    # Streams come from (seed, index): env 2 of a batch of 3 is env 2 of a batch of 6.
    small = vector_env_class(name)(num_envs=3)
    large = vector_env_class(name)(num_envs=6)
    o_small, _ = small.reset(seed=11)
    o_large, _ = large.reset(seed=11)
    np.testing.assert_array_equal(o_small, o_large[:3])
    for a in _actions(large, 3, 200):
        o_small, *_ = small.step(np.ascontiguousarray(a[:3]))
        o_large, *_ = large.step(a)
        np.testing.assert_array_equal(o_small, o_large[:3])


@pytest.mark.parametrize("name", NAMES)
def test_observations_stay_inside_the_declared_space(name: str) -> None:
    env = vector_env_class(name)(num_envs=32)
    obs, _ = env.reset(seed=2)
    for a in _actions(env, 2, 400):
        assert obs in env.observation_space
        obs, reward, *_ = env.step(a)
        assert np.all(np.isfinite(reward))


@pytest.mark.parametrize("name", NAMES)
def test_next_step_autoreset(name: str) -> None:
    env = vector_env_class(name)(num_envs=16, max_episode_steps=7)
    env.reset(seed=3)
    actions = _actions(env, 3, 60)
    ended = np.zeros(16, dtype=bool)
    seen_end = 0
    for a in actions:
        _, reward, terminated, truncated, _ = env.step(a)
        # Envs that ended last step restart now: reward 0, not done, counter 0.
        assert np.all(reward[ended] == 0.0)
        assert not np.any(terminated[ended] | truncated[ended])
        assert np.all(env.elapsed_steps[ended] == 0)
        assert np.all(env.elapsed_steps <= 7)
        assert not np.any(terminated & truncated)
        np.testing.assert_array_equal(truncated, ~terminated & (env.elapsed_steps == 7))
        ended = terminated | truncated
        seen_end += int(ended.sum())
    assert seen_end >= 16


@pytest.mark.parametrize("name", NAMES)
def test_unseeded_envs_draw_fresh_entropy_and_none_continues_the_stream(name: str) -> None:
    o1, _ = vector_env_class(name)(num_envs=4).reset()
    o2, _ = vector_env_class(name)(num_envs=4).reset()
    if name != "GridMaze-v0":  # GridMaze always starts top-left
        assert not np.array_equal(o1, o2)
    env = vector_env_class(name)(num_envs=4)
    first = env.reset(seed=5)[0]
    second = env.reset()[0]
    again = vector_env_class(name)(num_envs=4).reset(seed=5)[0]
    np.testing.assert_array_equal(first, again)
    if name != "GridMaze-v0":
        assert not np.array_equal(first, second)


@pytest.mark.parametrize("name", NAMES)
def test_per_env_seed_list_and_reset_mask(name: str) -> None:
    env = vector_env_class(name)(num_envs=3)
    env.reset(seed=[10, 20, 30])
    state = env.get_state()
    other = vector_env_class(name)(num_envs=1)
    other.reset(seed=[20])
    np.testing.assert_array_equal(state[1], other.get_state()[0])
    for a in _actions(env, 4, 3):
        env.step(a)
    before = env.get_state()
    env.reset(options={"reset_mask": np.array([False, True, False])})
    after = env.get_state()
    np.testing.assert_array_equal(before[[0, 2]], after[[0, 2]])
    assert env.elapsed_steps[1] == 0 and env.elapsed_steps[0] == 3
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.array([True, False])})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"mask": np.array([True, False, True])})
    with pytest.raises(ValueError, match="3 seeds for"):
        vector_env_class(name)(num_envs=2).reset(seed=[1, 2, 3])


@pytest.mark.parametrize("name", NAMES)
def test_copy_true_returns_fresh_arrays_copy_false_returns_read_only_views(name: str) -> None:
    fresh = vector_env_class(name)(num_envs=4)
    o1, _ = fresh.reset(seed=0)
    a = _actions(fresh, 0, 1)[0]
    o2, *_ = fresh.step(a)
    assert not np.shares_memory(o1, o2)
    o2[...] = 0.0  # the caller owns a copy
    views = vector_env_class(name)(num_envs=4, copy=False)
    v1, _ = views.reset(seed=0)
    v2, *_ = views.step(a)
    assert v1 is v2  # the same buffer, refreshed in place
    assert not v2.flags.writeable
    with pytest.raises(ValueError):
        v2[0, 0] = 1.0


@pytest.mark.parametrize("name", NAMES)
def test_closed_env_refuses_to_step_or_reset(name: str) -> None:
    env = vector_env_class(name)(num_envs=2)
    env.reset(seed=0)
    a = _actions(env, 0, 1)[0]
    env.close()
    assert env.closed
    with pytest.raises(RuntimeError, match="closed"):
        env.step(a)
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()
    single = env_class(name)()
    single.reset(seed=0)
    single.close()
    with pytest.raises(RuntimeError, match="closed"):
        single.step(single.action_space.sample())


@pytest.mark.parametrize("name", NAMES)
def test_step_before_reset_is_an_error(name: str) -> None:
    env = vector_env_class(name)(num_envs=2)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(_actions(env, 0, 1)[0])
    single = env_class(name)()
    with pytest.raises(RuntimeError, match="reset"):
        single.step(single.action_space.sample())


@pytest.mark.parametrize("name", NAMES)
def test_single_env_ends_its_episode_and_asks_for_reset(name: str) -> None:
    env = env_class(name)(max_episode_steps=5)
    env.reset(seed=0)
    env.action_space.seed(0)
    steps = 0
    for steps in range(1, 6):  # noqa: B007 (the count is the point)
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert obs in env.observation_space
        assert isinstance(reward, float) and isinstance(terminated, bool)
        if terminated:
            break
    assert terminated or (truncated and steps == 5)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(env.action_space.sample())
    env.reset()
    env.step(env.action_space.sample())


@pytest.mark.parametrize("name", NAMES)
def test_bad_env_config_names_the_key_and_what_is_valid(name: str) -> None:
    unknown = r"unknown env_config key 'colour' \(= 'red' \(str\)\); valid keys:.*max_episode_steps"
    with pytest.raises(ValueError, match=unknown):
        vector_env_class(name)(num_envs=2, colour="red")
    # Every unknown key at once, not the first of them.
    both = r"unknown env_config keys 'colour' \(= 'red' \(str\)\), 'size_' \(= 3\); valid keys:"
    with pytest.raises(ValueError, match=both):
        vector_env_class(name)(num_envs=2, colour="red", size_=3)
    with pytest.raises(ValueError, match=r"'max_episode_steps': got -1, expected an integer"):
        vector_env_class(name)(num_envs=2, max_episode_steps=-1)
    with pytest.raises(ValueError, match=r"'max_episode_steps': got 'long' \(str\)"):
        vector_env_class(name)(num_envs=2, max_episode_steps="long")
    with pytest.raises(TypeError, match=r"env_config 'max_episode_steps'.*list"):
        vector_env_class(name)(num_envs=2, max_episode_steps=[5])
    with pytest.raises(ValueError, match=r"num_envs = 0; expected an integer in \[1, "):
        vector_env_class(name)(num_envs=0)
    with pytest.raises(TypeError, match="num_envs must be an int"):
        vector_env_class(name)(num_envs=2.5)
    # numpy scalars are as good as Python numbers; None means the default.
    env = vector_env_class(name)(num_envs=np.int64(2), max_episode_steps=np.int32(9), substeps=None)
    assert env.max_episode_steps == 9


@pytest.mark.parametrize("name", NAMES)
def test_bad_actions_name_the_problem_and_the_expected_form(name: str) -> None:
    env = vector_env_class(name)(num_envs=4)
    env.reset(seed=0)
    good = _actions(env, 0, 1)[0]
    with pytest.raises(ValueError, match=r"shape \(4,"):
        env.step(good[:3])
    with pytest.raises(TypeError, match="numpy array"):
        env.step(good.tolist())
    wide = np.repeat(good, 2, axis=0)
    with pytest.raises(ValueError, match="C-contiguous"):
        env.step(wide[::2])
    if env.single_action_space.__class__.__name__ == "Discrete":
        with pytest.raises(TypeError, match="dtype float64"):
            env.step(good.astype(np.float64))
        bad = good.copy()
        bad[2] = env.single_action_space.n
        with pytest.raises(
            ValueError, match=r"action\[2\] = .* out of range; expected integers in \[0, "
        ):
            env.step(bad)
        bad[2] = -1
        with pytest.raises(ValueError, match="out of range"):
            env.step(bad)
    else:
        with pytest.raises(TypeError, match="dtype int64"):
            env.step(good.astype(np.int64))
        for poison in (np.nan, np.inf, -np.inf):
            bad = good.copy()
            bad[1, 0] = poison
            with pytest.raises(ValueError, match=r"action\[1\] contains .*expected finite floats"):
                env.step(bad)
    # A rejected batch leaves the env usable.
    env.step(good)


@pytest.mark.parametrize("name", NAMES)
def test_set_state_checks_shape_and_finiteness_and_changes_nothing_on_refusal(name: str) -> None:
    env = vector_env_class(name)(num_envs=3)
    env.reset(seed=0)
    before = env.get_state()
    obs_before = env.reset(options={"reset_mask": np.zeros(3, dtype=bool)})[0]
    with pytest.raises(ValueError, match=r"state must have shape \(3, "):
        env.set_state(before[:2])
    bad = before.copy()
    bad[2, 0] = np.nan
    with pytest.raises(ValueError, match=r"state\[2\] contains nan; expected finite numbers"):
        env.set_state(bad)
    np.testing.assert_array_equal(env.get_state(), before)
    env.set_state(before)
    obs_after = env.reset(options={"reset_mask": np.zeros(3, dtype=bool)})[0]
    np.testing.assert_array_equal(obs_after, obs_before)
