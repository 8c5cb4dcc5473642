"""render_mode="rgb_array": every sim_ext single env draws its current state."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import sim_ext

# Gymnasium's picture sizes (height, width) for the environments it has; GridMaze's is its own.
SIZES = {
    "CartPole-v1": (400, 600),
    "Acrobot-v1": (500, 500),
    "MountainCar-v0": (400, 600),
    "MountainCarContinuous-v0": (400, 600),
    "Pendulum-v1": (500, 500),
    "GridMaze-v0": (512, 512),
}
NAMES = [env_id.removeprefix("sim_ext/") for env_id in sim_ext.env_ids()]


def _frame_of(name: str, state: list[float], **config: Any) -> np.ndarray:
    env = gym.make(f"sim_ext/{name}", render_mode="rgb_array", **config)
    env.reset(seed=0)
    env.unwrapped.set_state(np.asarray(state, dtype=np.float64))  # type: ignore[attr-defined]
    frame = env.render()
    assert isinstance(frame, np.ndarray)
    return frame


def _centroid(mask: np.ndarray) -> tuple[float, float]:
    """(x, y) of the pixels in mask, y measured up from the bottom."""
    rows, cols = np.nonzero(mask)
    assert len(rows) > 0
    return float(cols.mean()), float(mask.shape[0] - rows.mean())


def test_every_environment_renders() -> None:
    assert set(NAMES) == set(SIZES)


@pytest.mark.parametrize("name", NAMES)
def test_frames_are_rgb_pictures_of_the_current_state(name: str) -> None:
    config = {"wall_density": 0.3} if name == "GridMaze-v0" else {}
    env = gym.make(f"sim_ext/{name}", render_mode="rgb_array", **config)
    env.reset(seed=3)
    first = env.render()
    assert isinstance(first, np.ndarray)
    assert first.dtype == np.uint8 and first.shape == (*SIZES[name], 3)
    assert len(np.unique(first.reshape(-1, 3), axis=0)) > 2, "a picture, not a blank"
    env.action_space.seed(3)
    changed = False
    for _ in range(10):
        env.step(env.action_space.sample())
        frame = env.render()
        assert isinstance(frame, np.ndarray)
        changed |= not np.array_equal(frame, first)
    assert changed, "the picture must follow the state"
    # Each call returns a fresh array: scribbling on one frame leaves the next alone.
    frame[...] = 0
    again = env.render()
    assert isinstance(again, np.ndarray) and again.any()
    assert env.metadata["render_fps"] > 0


def test_cartpole_draws_the_cart_where_it_is_and_the_pole_as_it_leans() -> None:
    def black(f: np.ndarray) -> np.ndarray:
        # The cart is black, 30 px tall; the track a black line one pixel tall.
        ink = f.sum(axis=2) == 0
        return ink & (ink.sum(axis=0) > 5)[None, :]

    pole = lambda f: np.all(f == (202, 152, 101), axis=2)  # noqa: E731
    left = _frame_of("CartPole-v1", [-1.0, 0.0, 0.0, 0.0])
    right = _frame_of("CartPole-v1", [1.0, 0.0, 0.0, 0.0])
    # 600 px for 4.8 m: the cart moves 250 px for 2 m.
    shift = _centroid(black(right))[0] - _centroid(black(left))[0]
    assert abs(shift - 250) < 2
    upright_x = _centroid(pole(_frame_of("CartPole-v1", [0.0, 0.0, 0.0, 0.0])))[0]
    leaning_x = _centroid(pole(_frame_of("CartPole-v1", [0.0, 0.0, 0.2, 0.0])))[0]
    assert abs(upright_x - 300) < 1.5
    assert leaning_x > upright_x + 50 * np.sin(0.2) * 0.9  # theta > 0 leans right, as in Gymnasium


@pytest.mark.parametrize("name", ["MountainCar-v0", "MountainCarContinuous-v0"])
def test_mountain_car_draws_the_car_on_the_hill_where_it_is(name: str) -> None:
    def wheels(f: np.ndarray) -> np.ndarray:
        # The inside of the two grey discs (3 x 3 blocks of grey: not the odd grey pixel of
        # the hill's anti-aliased line), centred on the car.
        grey = np.all(f == (128, 128, 128), axis=2)
        inside = grey[1:-1, 1:-1].copy()
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                inside &= grey[1 + dr : grey.shape[0] - 1 + dr, 1 + dc : grey.shape[1] - 1 + dc]
        return np.pad(inside, 1)

    positions = [-1.0, -0.5, 0.0, 0.3]
    xs = [_centroid(wheels(_frame_of(name, [p, 0.0])))[0] for p in positions]
    expected = [(p + 1.2) * 600 / 1.8 for p in positions]
    np.testing.assert_allclose(xs, expected, atol=1.5)


@pytest.mark.parametrize(
    ("name", "up"), [("Acrobot-v1", [np.pi, 0.0, 0, 0]), ("Pendulum-v1", [0.0, 0])]
)
def test_links_hang_down_at_rest_and_point_up_when_raised(name: str, up: list[float]) -> None:
    color = {"Acrobot-v1": (0, 204, 204), "Pendulum-v1": (204, 77, 77)}[name]
    down = [0.0, 0.0, 0, 0] if name == "Acrobot-v1" else [np.pi, 0]
    below = _centroid(np.all(_frame_of(name, down) == color, axis=2))
    above = _centroid(np.all(_frame_of(name, up) == color, axis=2))
    assert below[1] < 250 - 40 and above[1] > 250 + 40
    assert abs(below[0] - 250) < 3 and abs(above[0] - 250) < 3


def test_gridmaze_draws_the_agent_in_its_cell_and_the_walls() -> None:
    env = gym.make("sim_ext/GridMaze-v0", render_mode="rgb_array", size=4, wall_density=0.4)
    env.reset(seed=4)
    state = env.unwrapped.get_state().copy()  # type: ignore[attr-defined]
    state[:2] = (1, 2)  # row 1, column 2 (row 0 on top)
    walls = state[2:].reshape(4, 4)
    walls[1, 2] = 0
    env.unwrapped.set_state(state)  # type: ignore[attr-defined]
    frame = env.render()
    assert isinstance(frame, np.ndarray)
    agent = np.all(frame == (51, 102, 204), axis=2)
    x, y = _centroid(agent)
    assert abs(x - 2.5 * 128) < 2 and abs((512 - y) - 1.5 * 128) < 2
    centres = frame[64::128, 64::128]
    is_wall = np.all(centres == 64, axis=2)
    np.testing.assert_array_equal(is_wall, walls > 0.5)


def test_render_without_a_mode_warns_and_returns_none_and_bad_modes_are_refused() -> None:
    env = gym.make("sim_ext/CartPole-v1")
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None
    with pytest.raises(
        ValueError, match=r"render_mode='human' is not supported; valid: None, 'rgb_array'"
    ):
        sim_ext.env_class("CartPole-v1")(render_mode="human")


def test_rgb_array_list_collects_every_frame() -> None:
    # Gymnasium's RenderCollection wrapper builds on rgb_array.
    env = gym.make("sim_ext/Acrobot-v1", render_mode="rgb_array_list")
    env.reset(seed=0)
    for _ in range(4):
        env.step(env.action_space.sample())
    frames = env.render()
    assert isinstance(frames, list) and len(frames) == 5
    assert all(f.shape == (500, 500, 3) for f in frames)


TWIN_STATES = {
    "CartPole-v1": [[0.5, 0.0, 0.15, 0.0], [-1.3, 0.0, -0.2, 0.0]],
    "Acrobot-v1": [[2.0, 0.8, 0.0, 0.0], [-0.4, -1.9, 0.0, 0.0]],
    "MountainCar-v0": [[-0.9, 0.0], [0.3, 0.0]],
    "MountainCarContinuous-v0": [[0.2, 0.0], [-1.1, 0.0]],
    "Pendulum-v1": [[2.5, 0.0], [-0.7, 0.0]],
}


@pytest.mark.parametrize("name", sorted(TWIN_STATES))
def test_frames_look_like_gymnasiums(name: str) -> None:
    # Gymnasium draws with pygame (installed by the box2d extra, which CI installs).
    pytest.importorskip(
        "pygame", reason="Gymnasium's own frames need pygame (pip install -e .[box2d])"
    )
    ours = gym.make(f"sim_ext/{name}", render_mode="rgb_array")
    theirs = gym.make(name, render_mode="rgb_array")
    ours.reset(seed=0)
    theirs.reset(seed=0)
    for state in TWIN_STATES[name]:
        ours.unwrapped.set_state(np.asarray(state, dtype=np.float64))  # type: ignore[attr-defined]
        theirs.unwrapped.state = np.asarray(state, dtype=np.float64)  # type: ignore[attr-defined]
        if name == "Pendulum-v1":
            theirs.unwrapped.last_u = None  # type: ignore[attr-defined]  # no torque arrow
        a = np.asarray(ours.render(), dtype=np.int64)
        b = np.asarray(theirs.render(), dtype=np.int64)
        assert a.shape == b.shape
        # Measured: 99.3-99.9% of pixels within 40/255 of Gymnasium's in every channel (the
        # rest are the anti-aliased edges), and the drawn shapes overlapping by 86-97%.
        assert (np.abs(a - b).max(axis=2) <= 40).mean() > 0.99
        ink_a, ink_b = a.sum(axis=2) < 700, b.sum(axis=2) < 700
        assert (ink_a & ink_b).sum() / (ink_a | ink_b).sum() > 0.8
