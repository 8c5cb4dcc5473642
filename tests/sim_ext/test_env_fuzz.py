"""Property-based: whatever is thrown at an environment, it either works or
raises a Python exception that names the problem. Never a crash, never garbage.

An oracle written from the documented contract decides which inputs are valid;
the environment must agree with it exactly, and stay usable after a refusal.
"""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim_ext
from sim_ext import env_class, vector_env_class

NAMES = [env_id.removeprefix("sim_ext/") for env_id in sim_ext.env_ids()]
NUM_ENVS = 3

DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
]

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _make(name: str) -> sim_ext.SimVectorEnv:
    env = vector_env_class(name)(num_envs=NUM_ENVS)
    env.reset(seed=0)
    return env


def _valid_action(env: sim_ext.SimVectorEnv) -> np.ndarray:
    return np.ascontiguousarray(env.action_space.sample())


def _expected_shape(env: sim_ext.SimVectorEnv) -> tuple[int, ...]:
    return tuple(env.action_space.shape)


def _is_valid(env: sim_ext.SimVectorEnv, actions: Any) -> bool:
    """The documented contract of VectorEnv.step's argument."""
    if not isinstance(actions, np.ndarray):
        return False
    if actions.shape != _expected_shape(env) or not actions.flags.c_contiguous:
        return False
    discrete = env.single_action_space.__class__.__name__ == "Discrete"
    if discrete:
        if actions.dtype not in (np.int32, np.int64):
            return False
        return bool(np.all((actions >= 0) & (actions < env.single_action_space.n)))
    if actions.dtype not in (np.float32, np.float64):
        return False
    return bool(np.all(np.isfinite(actions)))


@st.composite
def action_batches(draw: st.DrawFn, shape: tuple[int, ...], discrete: bool) -> Any:
    """Batches that are valid about half the time and wrong in one or more ways otherwise."""
    kind = draw(st.sampled_from(["array"] * 8 + ["list", "scalar"]))
    if kind == "list":
        return draw(st.lists(st.integers(-3, 5), min_size=0, max_size=5))
    if kind == "scalar":
        return draw(st.one_of(st.integers(-3, 5), st.floats(), st.none(), st.text(max_size=3)))
    accepted = [np.int32, np.int64] if discrete else [np.float32, np.float64]
    if draw(st.booleans()):  # within the contract (the env's own bounds checked below)
        dtype = draw(st.sampled_from(accepted))
        values = st.integers(0, 1) if discrete else st.floats(-3, 3, width=32)
        return draw(hnp.arrays(dtype, shape, elements=values))
    dtype = draw(st.sampled_from(accepted * 2 + DTYPES))
    arr_shape = draw(
        st.sampled_from([shape] * 4)
        | hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    )
    # Mostly small, in-range-ish values so that valid batches are common too.
    if np.dtype(dtype).kind in "iu":
        elements = (
            st.integers(0, 1)
            | st.integers(max(np.iinfo(dtype).min, -2), min(np.iinfo(dtype).max, 5))
            | hnp.from_dtype(np.dtype(dtype))
        )
    elif np.dtype(dtype).kind == "f":
        elements = st.floats(-3, 3, width=np.dtype(dtype).itemsize * 8) | hnp.from_dtype(
            np.dtype(dtype)
        )
    else:
        elements = hnp.from_dtype(np.dtype(dtype))
    arr = draw(hnp.arrays(dtype, arr_shape, elements=elements))
    if arr.ndim >= 1 and draw(st.integers(0, 4)) == 0:
        arr = np.repeat(arr, 2, axis=0)[::2]  # same values, strided view
    return arr


@pytest.mark.parametrize("name", NAMES)
def test_step_accepts_exactly_the_valid_batches(name: str) -> None:
    env = _make(name)
    good = _valid_action(env)

    discrete = env.single_action_space.__class__.__name__ == "Discrete"

    @FUZZ
    @given(actions=action_batches(_expected_shape(env), discrete))
    def check(actions: Any) -> None:
        if _is_valid(env, actions):
            obs, reward, *_ = env.step(actions)
            assert obs in env.observation_space
            assert np.all(np.isfinite(reward))
        else:
            with pytest.raises((TypeError, ValueError)) as info:
                env.step(actions)
            assert name in str(info.value)
            env.step(good)  # still usable

    check()


@pytest.mark.parametrize("name", NAMES)
def test_single_env_step_accepts_exactly_the_valid_actions(name: str) -> None:
    env = env_class(name)()
    env.reset(seed=0)
    space = env.action_space

    @FUZZ
    @given(
        action=st.one_of(
            st.integers(-(2**70), 2**70),
            st.integers(-2, 5),
            st.floats(),
            hnp.arrays(
                st.sampled_from(DTYPES),
                hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
            ),
            st.none(),
            st.booleans(),
        )
    )
    def check(action: Any) -> None:
        if space.__class__.__name__ == "Discrete":
            valid = (
                isinstance(action, (int, np.integer))
                and not isinstance(action, (bool, np.bool_))
                and 0 <= action < space.n
            ) or (
                isinstance(action, np.ndarray)
                and action.shape == ()
                and action.dtype.kind in "iu"
                and 0 <= action < space.n
            )
        else:
            arr = np.asarray(action) if isinstance(action, np.ndarray) else None
            valid = (
                arr is not None
                and arr.dtype.kind == "f"
                and arr.shape == space.shape
                and bool(np.all(np.isfinite(arr)))
            )
        if valid:
            _, reward, terminated, truncated, _ = env.step(action)
            assert np.isfinite(reward)
            if terminated or truncated:
                env.reset()
        else:
            with pytest.raises((TypeError, ValueError)) as info:
                env.step(action)
            assert name in str(info.value)

    check()


@pytest.mark.parametrize("name", NAMES)
def test_reset_accepts_exactly_the_valid_seeds_and_masks(name: str) -> None:
    env = _make(name)

    @FUZZ
    @given(
        seed=st.one_of(
            st.none(),
            st.integers(-(2**65), 2**65),
            st.lists(st.one_of(st.none(), st.integers(-5, 2**64 + 5)), max_size=5),
            st.floats(),
        ),
        mask=st.one_of(
            st.none(),
            hnp.arrays(st.sampled_from([np.bool_, np.int64, np.float32]), st.integers(0, 5)),
        ),
    )
    def check(seed: Any, mask: Any) -> None:
        def seed_ok(s: Any) -> bool:
            return isinstance(s, int) and 0 <= s < 2**64

        if seed is None:
            valid_seed = True
        elif isinstance(seed, list):
            valid_seed = len(seed) == NUM_ENVS and all(s is None or seed_ok(s) for s in seed)
        else:
            valid_seed = seed_ok(seed)
        valid_mask = mask is None or (mask.dtype == np.bool_ and mask.shape == (NUM_ENVS,))
        options = None if mask is None else {"reset_mask": mask}
        if valid_seed and valid_mask:
            obs, _ = env.reset(seed=seed, options=options)
            assert obs in env.observation_space
        else:
            with pytest.raises((TypeError, ValueError)):
                env.reset(seed=seed, options=options)
        env.step(_valid_action(env))

    check()


CONFIG_KEYS = [
    "max_episode_steps",
    "substeps",
    "size",
    "wall_density",
    "maze_seed",
    "obs_mode",
    "g",
    "goal_velocity",
]


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(
    config=st.dictionaries(
        st.one_of(st.sampled_from(CONFIG_KEYS), st.text(max_size=6)),
        st.one_of(
            st.integers(-(2**40), 2**40),
            st.integers(-2, 12),
            st.floats(),
            st.floats(0, 1),
            st.booleans(),
            st.none(),
            st.sampled_from(["onehot", "coords", "pixels", ""]),
            st.lists(st.integers(), max_size=2),
        ),
        max_size=4,
    ),
    num_envs=st.integers(-2, 6),
)
def test_any_env_config_builds_a_working_env_or_names_the_bad_key(
    name: str, config: dict[str, Any], num_envs: int
) -> None:
    try:
        env = vector_env_class(name)(num_envs=num_envs, **config)
    except (TypeError, ValueError) as err:
        message = str(err)
        # The message quotes the culprit as Python would (printable keys).
        assert "num_envs" in message or any(
            repr(k) in message or not k.isprintable() for k in config
        ), message
        return
    assert num_envs >= 1
    obs, _ = env.reset(seed=1)
    assert obs in env.observation_space
    for _ in range(3):
        obs, reward, *_ = env.step(_valid_action(env))
        assert obs in env.observation_space
        assert np.all(np.isfinite(reward))
