"""The environments an experiment can name: sim_ext's compiled ones, described for people."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium import spaces

import sim_ext
from sim_ext import env_class


def _space(space: Any) -> str:
    if isinstance(space, spaces.Box):
        low, high = float(space.low.min()), float(space.high.max())
        return f"Box{space.shape} {space.dtype} in [{low:.3g}, {high:.3g}]"
    return str(space)


def describe_environments() -> list[str]:
    """One line per sim_ext environment: id, spaces and time limit."""
    lines = []
    for env_id in sim_ext.env_ids():
        env = env_class(env_id.removeprefix(sim_ext.envs.ID_PREFIX))()
        # The spec's limit (gym.make's TimeLimit), else the env's own (GridMaze's 4 n^2).
        limit = gym.spec(env_id).max_episode_steps or env.max_episode_steps
        lines.append(
            f"{env_id:<32} obs {_space(env.observation_space):<36} "
            f"actions {_space(env.action_space):<30} time limit {limit}"
        )
        env.close()
    return lines
