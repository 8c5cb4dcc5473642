"""sim_ext GridMaze-v0 against a pure-Python reference written from its spec.

Spec: an n x n grid, start (0, 0), goal (n-1, n-1); actions 0 up (row-1), 1 down
(row+1), 2 left (col-1), 3 right (col+1); a move into the border or a wall leaves
the agent in place; reward -1 per move and 0 on the move that reaches the goal,
which terminates; truncation after max_episode_steps (default 4 n^2). State rows
are (row, col, n*n wall flags row-major). The layout is the C++ env's (random);
everything after it is checked against the reference step by step, exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sim_ext import env_class, vector_env_class

NAME = "GridMaze-v0"
MOVES = {0: (-1, 0), 1: (1, 0), 2: (0, -1), 3: (0, 1)}


def make(num_envs: int, **config: Any) -> Any:
    return vector_env_class(NAME)(num_envs=num_envs, **config)


class ReferenceGridMaze:
    """The spec as plain loops; layout and position come from a C++ state row."""

    def __init__(self, size: int, obs_mode: str) -> None:
        self.n = size
        self.obs_mode = obs_mode
        self.row = self.col = 0
        self.walls = [[False] * size for _ in range(size)]

    def load(self, state: np.ndarray) -> None:
        n = self.n
        assert len(state) == 2 + n * n
        self.row, self.col = int(state[0]), int(state[1])
        self.walls = [[bool(state[2 + r * n + c]) for c in range(n)] for r in range(n)]

    def obs(self) -> np.ndarray:
        if self.obs_mode == "coords":
            return np.array([self.row, self.col], dtype=np.float32)
        out = np.zeros(self.n * self.n, dtype=np.float32)
        out[self.row * self.n + self.col] = 1.0
        return out

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        dr, dc = MOVES[int(action)]
        r, c = self.row + dr, self.col + dc
        if 0 <= r < self.n and 0 <= c < self.n and not self.walls[r][c]:
            self.row, self.col = r, c
        at_goal = self.row == self.n - 1 and self.col == self.n - 1
        return self.obs(), (0.0 if at_goal else -1.0), at_goal


def layouts(env: Any) -> np.ndarray:
    """Wall flags of every env, shape (num_envs, n, n), bool."""
    state = env.get_state()
    n = round((state.shape[1] - 2) ** 0.5)
    flags = state[:, 2:]
    assert np.all((flags == 0.0) | (flags == 1.0))
    return flags.reshape(-1, n, n).astype(bool)


def bfs_distances(walls: np.ndarray) -> np.ndarray:
    """Moves from the start to every cell of each layout (-1: unreachable), by BFS
    layer by layer over the whole batch at once. walls: (batch, n, n) bool."""
    free = ~walls
    reached = np.zeros_like(walls)
    reached[:, 0, 0] = free[:, 0, 0]
    dist = np.where(reached, 0, -1)
    frontier = reached.copy()
    t = 0
    while frontier.any():
        t += 1
        nb = np.zeros_like(frontier)
        nb[:, 1:, :] |= frontier[:, :-1, :]
        nb[:, :-1, :] |= frontier[:, 1:, :]
        nb[:, :, 1:] |= frontier[:, :, :-1]
        nb[:, :, :-1] |= frontier[:, :, 1:]
        frontier = nb & free & ~reached
        reached |= frontier
        dist[frontier] = t
    return dist


def shortest_actions(dist: np.ndarray) -> list[int]:
    """Actions along a shortest path from the start to the goal, walked back from
    the goal through cells one BFS layer closer each time."""
    n = dist.shape[0]
    r, c = n - 1, n - 1
    assert dist[r, c] > 0
    actions: list[int] = []
    while (r, c) != (0, 0):
        for a, (dr, dc) in MOVES.items():
            pr, pc = r - dr, c - dc  # the cell that action a moves into (r, c)
            if 0 <= pr < n and 0 <= pc < n and dist[pr, pc] == dist[r, c] - 1:
                actions.append(a)
                r, c = pr, pc
                break
    return actions[::-1]


def assert_valid_layouts(walls: np.ndarray) -> None:
    assert not walls[:, 0, 0].any(), "a start cell is a wall"
    assert not walls[:, -1, -1].any(), "a goal cell is a wall"
    unreachable = np.flatnonzero(bfs_distances(walls)[:, -1, -1] < 0)
    assert unreachable.size == 0, f"no path from start to goal in envs {unreachable.tolist()}"


CONFIGS = [
    {"size": 2},
    {"size": 2, "wall_density": 0.6, "obs_mode": "coords"},
    {"size": 5},
    {"size": 5, "wall_density": 0.3},
    {"size": 5, "wall_density": 0.6, "obs_mode": "coords", "max_episode_steps": 30},
    {"size": 5, "wall_density": 0.3, "maze_seed": 11, "obs_mode": "coords"},
    {"size": 8, "obs_mode": "coords", "max_episode_steps": 40},
    {"size": 8, "wall_density": 0.3, "max_episode_steps": 60},
    {"size": 8, "wall_density": 0.6, "maze_seed": 3},
    {"size": 8, "wall_density": 0.6},
    {"size": 5, "wall_density": 0.0, "maze_seed": 0},
]


@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items())
)
def test_matches_reference_step_by_step_across_many_episodes(config: dict[str, Any]) -> None:
    num_envs, steps = 8, 700
    n = config["size"]
    obs_mode = config.get("obs_mode", "onehot")
    env = make(num_envs, **config)
    limit = env.max_episode_steps
    assert limit == config.get("max_episode_steps", 4 * n * n)
    refs = [ReferenceGridMaze(n, obs_mode) for _ in range(num_envs)]
    rng = np.random.default_rng(n)
    obs, _ = env.reset(seed=42)
    fixed = layouts(env)[0] if "maze_seed" in config else None
    elapsed = np.zeros(num_envs, dtype=np.int64)
    counts = {"steps": 0, "episodes": 0, "terminated": 0, "truncated": 0}

    def start_episodes(which: np.ndarray) -> None:
        state, walls = env.get_state(), layouts(env)
        assert_valid_layouts(walls[which])
        for i in np.flatnonzero(which):
            assert state[i, 0] == 0 and state[i, 1] == 0, f"env {i} does not start at (0, 0)"
            if fixed is not None:
                np.testing.assert_array_equal(
                    walls[i], fixed, err_msg=f"env {i}: not the fixed maze"
                )
            refs[i].load(state[i])
            np.testing.assert_array_equal(obs[i], refs[i].obs(), err_msg=f"env {i}: first obs")
            elapsed[i] = 0
            counts["episodes"] += 1

    start_episodes(np.ones(num_envs, dtype=bool))
    restarting = np.zeros(num_envs, dtype=bool)
    for t in range(steps):
        actions = rng.integers(0, 4, size=num_envs)
        obs, reward, terminated, truncated, _ = env.step(actions)
        state = env.get_state()
        for i in np.flatnonzero(~restarting):
            where = f"{config} env {i} step {t}"
            ref_obs, ref_reward, ref_terminated = refs[i].step(actions[i])
            elapsed[i] += 1
            ref_truncated = not ref_terminated and elapsed[i] >= limit
            np.testing.assert_array_equal(obs[i], ref_obs, err_msg=where)
            assert (reward[i], terminated[i], truncated[i]) == (
                ref_reward,
                ref_terminated,
                ref_truncated,
            ), where
            assert (state[i, 0], state[i, 1]) == (refs[i].row, refs[i].col), where
            counts["steps"] += 1
        # NEXT_STEP autoreset: envs that ended last step restart now.
        assert np.all(reward[restarting] == 0.0)
        assert not np.any(terminated[restarting] | truncated[restarting])
        start_episodes(restarting)
        counts["terminated"] += int(terminated.sum())
        counts["truncated"] += int(truncated.sum())
        restarting = terminated | truncated
    env.close()
    assert counts["steps"] > num_envs * steps * 0.8
    assert counts["episodes"] >= 2 * num_envs, counts
    assert counts["terminated"] + counts["truncated"] >= num_envs, counts
    if n == 2:
        assert counts["terminated"] > 200, counts
    if "max_episode_steps" in config:
        assert counts["truncated"] >= num_envs, counts


def test_hand_made_maze_blocks_moves_and_ends_episodes_both_ways() -> None:
    # A hand-made 3x3 maze through set_state: the border and walls block, the
    # goal move pays 0 and terminates, the truncation comes at the time limit.
    env = make(1, size=3, obs_mode="coords", max_episode_steps=6)
    env.reset(seed=0)
    walls = np.array([[0, 1, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float64)
    env.set_state(np.concatenate([[0.0, 0.0], walls.ravel()])[None])
    plan = [(0, (0, 0), -1.0), (3, (0, 0), -1.0), (1, (1, 0), -1.0), (3, (1, 0), -1.0)]
    plan += [(1, (2, 0), -1.0), (3, (2, 1), -1.0)]
    for k, (action, cell, reward) in enumerate(plan):
        obs, rew, term, trunc, _ = env.step(np.array([action]))
        assert tuple(obs[0]) == cell and rew[0] == reward and not term[0]
        assert bool(trunc[0]) == (k == 5)
    obs, rew, term, trunc, _ = env.step(np.array([3]))  # autoreset: a fresh open 3x3 grid
    assert tuple(obs[0]) == (0, 0) and rew[0] == 0.0 and not term[0] and not trunc[0]
    env.set_state(np.concatenate([[2.0, 1.0], walls.ravel()])[None])
    obs, rew, term, trunc, _ = env.step(np.array([3]))
    assert tuple(obs[0]) == (2, 2) and rew[0] == 0.0 and term[0] and not trunc[0]


@pytest.mark.parametrize("size", [2, 3, 5, 8, 16])
def test_every_generated_layout_has_a_path_and_open_start_and_goal(size: int) -> None:
    for density in (0.1, 0.3, 0.5, 0.7, 0.9):
        env = make(128, size=size, wall_density=density)
        for seed in range(3):
            env.reset(seed=seed)
            assert_valid_layouts(layouts(env))
        env.reset(seed=99)
        for _ in range(4 * size):  # autoresets draw layouts too
            env.step(np.random.default_rng(size).integers(0, 4, size=128))
            assert_valid_layouts(layouts(env))
        for maze_seed in range(20):
            fixed = make(1, size=size, wall_density=density, maze_seed=maze_seed)
            fixed.reset(seed=0)
            assert_valid_layouts(layouts(fixed))


@pytest.mark.parametrize("density", [0.0, 0.1, 0.3, 0.6, 0.9])
def test_wall_fraction_is_about_the_density_on_large_grids(density: float) -> None:
    # The protected path (under ~6% of a 64x64 grid) is never walled, so the
    # fraction is a little below the density.
    env = make(16, size=64, wall_density=density, obs_mode="coords")
    env.reset(seed=1)
    fraction = layouts(env).mean()
    assert density - 0.07 <= fraction <= density + 0.01, fraction


def test_maze_seed_fixes_one_layout_for_the_batch_across_resets_and_objects() -> None:
    config = {"size": 8, "wall_density": 0.4, "maze_seed": 1234}
    env = make(6, **config)
    env.reset(seed=0)
    first = layouts(env)
    assert first[0].any(), "density 0.4 on 8x8 gives walls"
    assert all(np.array_equal(w, first[0]) for w in first)
    env.reset(seed=5)
    np.testing.assert_array_equal(layouts(env), first)
    rng = np.random.default_rng(0)
    for _ in range(300):  # across autoresets too
        env.step(rng.integers(0, 4, size=6))
        np.testing.assert_array_equal(layouts(env), first)
    other = make(3, **config)
    other.reset(seed=77)
    np.testing.assert_array_equal(layouts(other)[0], first[0])
    different = make(1, **{**config, "maze_seed": 1235})
    different.reset(seed=0)
    assert not np.array_equal(layouts(different)[0], first[0])
    # maze_seed=None means absent: procedural mazes.
    procedural = make(6, **{**config, "maze_seed": None})
    procedural.reset(seed=0)
    assert len({layouts(procedural)[i].tobytes() for i in range(6)}) == 6


def test_without_maze_seed_layouts_differ_between_envs_and_episodes() -> None:
    env = make(32, size=8, wall_density=0.4)
    env.reset(seed=3)
    first = layouts(env)
    assert len({w.tobytes() for w in first}) == 32
    env.reset(seed=4)
    second = layouts(env)
    assert not any(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    env.reset()  # the streams continue: new layouts again
    assert not any(np.array_equal(a, b) for a, b in zip(second, layouts(env), strict=True))
    # A fixed reset seed reproduces the layouts.
    again = make(32, size=8, wall_density=0.4)
    again.reset(seed=3)
    np.testing.assert_array_equal(layouts(again), first)


@pytest.mark.parametrize(
    ("size", "density"), [(2, 0.0), (5, 0.0), (5, 0.5), (8, 0.3), (8, 0.6), (12, 0.9)]
)
def test_shortest_path_policy_earns_minus_path_length_plus_one(size: int, density: float) -> None:
    # A path of L moves pays -1 for each of the first L-1 and 0 for the last.
    num_envs = 24
    env = make(num_envs, size=size, wall_density=density)
    env.reset(seed=size)
    dist = bfs_distances(layouts(env))
    plans = [shortest_actions(d) for d in dist]
    lengths = np.array([len(p) for p in plans])
    assert np.all(lengths == dist[:, -1, -1])
    assert np.all(lengths >= 2 * (size - 1))
    returns = np.zeros(num_envs)
    for t in range(int(lengths.max())):
        actions = np.array([p[t] if t < len(p) else 0 for p in plans])
        _, reward, terminated, truncated, _ = env.step(actions)
        live = t < lengths
        returns[live] += reward[live]
        np.testing.assert_array_equal(terminated[live], t == lengths[live] - 1)
        assert not truncated[live].any()
    np.testing.assert_array_equal(returns, -(lengths - 1))
    if density >= 0.6:
        assert lengths.max() > 2 * (size - 1), "dense mazes should need detours"


def test_time_limit_one_step_before_the_goal_truncates_instead() -> None:
    env = make(4, size=5, wall_density=0.3)
    env.reset(seed=8)
    plans = [shortest_actions(d) for d in bfs_distances(layouts(env))]
    short = make(4, size=5, wall_density=0.3, max_episode_steps=min(len(p) for p in plans))
    short.reset(seed=8)
    np.testing.assert_array_equal(short.get_state(), env.get_state())
    limit = short.max_episode_steps
    for t in range(limit):
        _, _, terminated, truncated, _ = short.step(np.array([p[t] for p in plans]))
    reached = np.array([len(p) == limit for p in plans])
    np.testing.assert_array_equal(terminated, reached)
    np.testing.assert_array_equal(truncated, ~reached)


def test_spaces_and_defaults() -> None:
    env = make(2)
    assert env.single_observation_space.shape == (64,)
    assert env.single_action_space.n == 4
    assert env.max_episode_steps == 256
    assert env.get_state().shape == (2, 2 + 64)
    obs, _ = env.reset(seed=0)
    assert not layouts(env).any(), "default wall_density is 0: an open grid"
    np.testing.assert_array_equal(obs, np.eye(64, dtype=np.float32)[[0, 0]])
    onehot = make(1, size=5).single_observation_space
    np.testing.assert_array_equal(onehot.low, np.zeros(25))
    np.testing.assert_array_equal(onehot.high, np.ones(25))
    coords = make(1, size=5, obs_mode="coords").single_observation_space
    np.testing.assert_array_equal(coords.low, [0, 0])
    np.testing.assert_array_equal(coords.high, [4, 4])
    assert make(1, size=3, max_episode_steps=7).max_episode_steps == 7
    single = env_class(NAME)(size=3, wall_density=0.5, maze_seed=2)
    obs, _ = single.reset(seed=0)
    assert obs.tolist() == [1.0] + [0.0] * 8


@pytest.mark.parametrize(
    ("config", "pattern"),
    [
        ({"size": 1}, r"'size': got 1, expected an integer in \[2, 64\]"),
        ({"size": -3}, r"'size': got -3, expected an integer in \[2, 64\]"),
        ({"size": 65}, r"'size': got 65, expected an integer in \[2, 64\]"),
        ({"size": 4.5}, r"'size': got 4.5, expected an integer"),
        ({"wall_density": 1.0}, r"'wall_density': got 1, expected a finite number in \[0, 1\)"),
        ({"wall_density": -0.1}, r"'wall_density': got -0.1, expected a finite number in \[0, 1\)"),
        ({"obs_mode": "pixels"}, r"'obs_mode': got 'pixels', expected one of 'onehot' 'coords'"),
        ({"maze_seed": -1}, r"'maze_seed': got -1, expected an integer in \[0, "),
        ({"max_episode_steps": 0}, r"'max_episode_steps': got 0, expected an integer in \[1, "),
        (
            {"mazeseed": 3},
            r"unknown env_config key 'mazeseed' \(= 3\); valid keys:.*'maze_seed'.*'size'",
        ),
    ],
)
def test_bad_config_names_the_key_the_value_and_what_is_valid(
    config: dict[str, Any], pattern: str
) -> None:
    with pytest.raises(ValueError, match=pattern):
        make(2, **config)


def test_batches_past_two_to_the_31_cells_are_refused_before_allocating() -> None:
    # The kernels index walls and observations with int32.
    with pytest.raises(
        ValueError, match=r"num_envs \* size\^2 = 2147483648 grid cells; expected at most"
    ):
        make(2**19, size=64)


def test_set_state_rejects_invalid_states_and_leaves_the_row_as_it_was() -> None:
    env = make(1, size=3)
    env.reset(seed=0)
    walls = np.array([[0, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=np.float64).ravel()
    good = np.concatenate([[1.0, 0.0], walls])
    env.set_state(good[None])
    cases = [
        ([0.0, 1.0], walls, r"the agent at \(0, 1\) is on a wall"),
        ([3.0, 0.0], walls, r"row = 3; expected an integer in \[0, 2\]"),
        ([0.0, -1.0], walls, r"col = -1; expected an integer in \[0, 2\]"),
        ([0.5, 0.0], walls, r"row = 0.5; expected an integer"),
        (
            [1.0, 0.0],
            np.where(np.arange(9) == 4, 0.5, walls),
            r"wall flag of cell \(1, 1\) = 0.5; expected 0 or 1",
        ),
        (
            [1.0, 0.0],
            np.where(np.arange(9) == 8, 1.0, walls),
            r"the goal cell \(2, 2\) is a wall; it must be open",
        ),
        (
            [1.0, 0.0],
            np.where(np.arange(9) == 0, 1.0, walls),
            r"the start cell \(0, 0\) is a wall; it must be open",
        ),
    ]
    for pos, flags, pattern in cases:
        with pytest.raises(ValueError, match="GridMaze-v0: set_state row 0: " + pattern):
            env.set_state(np.concatenate([pos, flags])[None])
        np.testing.assert_array_equal(env.get_state()[0], good)
    # Non-finite numbers are refused by the engine before the physics sees them.
    with pytest.raises(ValueError, match=r"GridMaze-v0: state\[0\] contains nan"):
        env.set_state(np.concatenate([[np.nan, 0.0], walls])[None])
    obs, *_ = env.step(np.array([1]))  # down from (1, 0) onto the wall at (2, 0): stays
    np.testing.assert_array_equal(obs[0], np.eye(9, dtype=np.float32)[3])


def test_a_batch_set_state_that_fails_part_way_changes_nothing() -> None:
    # Row 1 is rejected after row 0 was accepted: the engine puts row 0 back,
    # and the observations (GridMaze's incremental one-hot) still match.
    env = make(2, size=4)
    env.reset(seed=0)
    before = env.get_state()
    state = before.copy()
    state[0, :2] = [2.0, 3.0]
    state[1, :2] = [9.0, 0.0]
    with pytest.raises(ValueError, match="set_state row 1: row = 9"):
        env.set_state(state)
    np.testing.assert_array_equal(env.get_state(), before)
    obs, *_ = env.step(np.array([3, 1]))  # (0, 0) -> (0, 1); (0, 0) -> (1, 0)
    np.testing.assert_array_equal(obs, np.eye(16, dtype=np.float32)[[1, 4]])
    np.testing.assert_array_equal(env.get_state()[:, :2], [[0, 1], [1, 0]])


def test_set_state_layout_lasts_until_the_next_reset() -> None:
    env = make(1, size=3, obs_mode="coords", maze_seed=5, wall_density=0.5)
    env.reset(seed=0)
    fixed = env.get_state()[0].copy()
    custom = np.concatenate([[0.0, 0.0], [0, 0, 1, 1, 1, 0, 1, 1, 0]])
    env.set_state(custom[None])
    obs, *_ = env.step(np.array([1]))  # down into (1, 0): a wall now
    assert tuple(obs[0]) == (0, 0)
    np.testing.assert_array_equal(env.get_state()[0], custom)
    env.reset()
    np.testing.assert_array_equal(env.get_state()[0], fixed)
