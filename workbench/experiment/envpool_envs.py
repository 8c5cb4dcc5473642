"""EnvPool's C++ environments as an env source: ``env.id: envpool/<task>``.

EnvPool (an optional dependency: ``pip install 'pbt-workbench[envpool]'``) steps a batch of
envs in C++ threads; its LunarLander, BipedalWalker, MuJoCo and Atari tasks are ports of
Gymnasium's. Each of its tasks is registered with Gymnasium as ``envpool/<task>``:

* the vector entry point (what a trial's env runner builds, ``gym.make_vec(...,
  vectorization_mode="vector_entry_point")``) is `EnvPoolVectorEnv`, a Gymnasium
  ``VectorEnv`` over one pool with Gymnasium's NEXT_STEP autoreset, which is EnvPool's own:
  after an episode ends, that env's next step resets it, ignores its action and returns the
  first observation with reward 0 (so the fast env runner samples from it as from sim_ext);
* the single-env entry point (the experiment's checks, videos) is `EnvPoolEnv`, a pool of one.

A pool is seeded when it is built (env i with ``seed + i``), so a ``reset(seed=...)`` builds
the pool again with that seed; a list of seeds must be consecutive.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

PREFIX = "envpool/"
INSTALL_HINT = "pip install 'pbt-workbench[envpool]' (EnvPool has wheels for Linux, Python <= 3.11)"


def installed() -> bool:
    return importlib.util.find_spec("envpool") is not None


def register() -> list[str]:
    """Registers every EnvPool task as ``envpool/<task>`` (idempotent); the ids, or [] when
    EnvPool is not installed."""
    if not installed():
        return []
    import envpool

    ids = []
    for task in envpool.list_all_envs():
        if "/" in task:  # its own namespaced ids (phys2d/...), which Gymnasium cannot nest
            continue
        env_id = PREFIX + task
        ids.append(env_id)
        if env_id not in gym.registry:
            gym.register(
                env_id,
                entry_point=f"{__name__}:EnvPoolEnv",
                vector_entry_point=f"{__name__}:EnvPoolVectorEnv",
                kwargs={"task": task},
                disable_env_checker=True,
            )
    return ids


def _first_seed(seed: int | list[int] | None, n: int) -> int | None:
    if seed is None or isinstance(seed, int | np.integer):
        return None if seed is None else int(seed)
    seeds = [int(s) for s in seed]
    if len(seeds) != n or seeds != list(range(seeds[0], seeds[0] + n)):
        raise ValueError(f"an EnvPool pool seeds its envs seed, seed+1, ...; got {seeds}")
    return seeds[0]


def _unbounded_if_tiny(space: Any) -> Any:
    """EnvPool gives some unbounded Box observations the smallest positive float as their
    lower bound (LunarLander's); Gymnasium's port says -inf."""
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        tiny = np.finfo(space.dtype).tiny
        if np.all(space.low == tiny):
            return gym.spaces.Box(-np.inf, space.high, space.shape, space.dtype)  # type: ignore[arg-type]
    return space


def _pool(task: str, num_envs: int, seed: int, config: dict[str, Any]) -> Any:
    import envpool

    return envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=seed, **config)


class EnvPoolVectorEnv(gym.vector.VectorEnv):  # type: ignore[misc,type-arg]
    """A Gymnasium vector env over one EnvPool pool (NEXT_STEP autoreset)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}  # noqa: RUF012

    def __init__(self, task: str, num_envs: int = 1, seed: int = 0, **config: Any) -> None:
        self.task, self.config = task, dict(config)
        self.num_envs = num_envs
        self._env = _pool(task, num_envs, seed, self.config)
        self.single_observation_space = _unbounded_if_tiny(self._env.observation_space)
        self.single_action_space = self._env.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        first = _first_seed(seed, self.num_envs)
        if first is not None:
            self._env.close()
            self._env = _pool(self.task, self.num_envs, first, self.config)
        obs, _ = self._env.reset()
        return obs, {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = self._env.step(np.asarray(actions))
        return obs, reward.astype(np.float64), terminated, truncated, {}

    def close_extras(self, **kwargs: Any) -> None:
        self._env.close()


class EnvPoolEnv(gym.Env):  # type: ignore[type-arg]
    """One env of an EnvPool task as a Gymnasium ``Env`` (a pool of one)."""

    def __init__(self, task: str, seed: int = 0, **config: Any) -> None:
        self._pool = EnvPoolVectorEnv(task, 1, seed, **config)
        self.observation_space = self._pool.single_observation_space
        self.action_space = self._pool.single_action_space

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self._pool.reset(seed=seed)
        return obs[0], info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._pool.step(np.asarray(action)[None])
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def close(self) -> None:
        self._pool.close()
