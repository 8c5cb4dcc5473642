"""Gymnasium faces of the compiled environments.

Every class of the compiled module ``sim_ext._core`` that carries an ``env_name``
(one ``bind_env<...>`` line in ``csrc/bindings.cpp``) gets two Python classes here,
built by :func:`vector_env_class` and :func:`env_class`:

* ``<Name>VectorEnv``: a :class:`gymnasium.vector.VectorEnv` over the whole batch,
  NEXT_STEP autoreset, one C++ call per ``step``;
* ``<Name>Env``: a single :class:`gymnasium.Env` (the batch engine with one env).

and Gymnasium ids ``sim_ext/<env_name>`` with both ``entry_point`` and
``vector_entry_point`` (see :func:`register_all`).

Time limits follow Gymnasium's convention. An id whose environment Gymnasium also has (its
*twin*: ``CartPole-v1`` and ``sim_ext/CartPole-v1``) carries the twin's
``spec.max_episode_steps``: ``gym.make`` wraps the single env in ``TimeLimit`` with it, and the
single env itself counts no steps unless ``max_episode_steps`` is given to its constructor;
``gym.make_vec`` hands the limit to the vector env, whose C++ engine truncates (no wrapper, no
Python per step). Either way an episode is truncated once, at the same step. GridMaze, with
no twin and a limit that depends on its size, keeps its limit inside the env and a spec
without one.
"""

from __future__ import annotations

import secrets
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from sim_ext import _core, render
from sim_ext.faults import split_faults

ID_PREFIX = "sim_ext/"


def core_classes() -> dict[str, Any]:
    """The compiled batch environments, keyed by their Gymnasium name (``CartPole-v1``)."""
    found = {}
    for attr in dir(_core):
        cls = getattr(_core, attr)
        name = getattr(cls, "env_name", None)
        if isinstance(cls, type) and isinstance(name, str):
            found[name] = cls
    return found


def _spaces(core: Any) -> tuple[spaces.Box, spaces.Space[Any]]:
    obs = spaces.Box(
        low=np.asarray(core.obs_low, dtype=np.float32),
        high=np.asarray(core.obs_high, dtype=np.float32),
        dtype=np.float32,
    )
    act: spaces.Space[Any]
    if core.discrete:
        act = spaces.Discrete(core.num_actions)
    else:
        act = spaces.Box(
            low=np.asarray(core.act_low, dtype=np.float32),
            high=np.asarray(core.act_high, dtype=np.float32),
            dtype=np.float32,
        )
    return obs, act


def _fresh_seed() -> int:
    return secrets.randbits(63)


def twin_spec(env_name: str) -> EnvSpec | None:
    """Gymnasium's registration of the same environment (``CartPole-v1`` for
    ``sim_ext/CartPole-v1``), or None where Gymnasium itself has no such environment."""
    spec = gym.registry.get(env_name)
    own = spec is not None and str(spec.entry_point).startswith("gymnasium.envs.")
    return spec if own else None


def _time_limit(core: Any) -> int | None:
    limit = int(core.max_episode_steps)
    return limit if limit > 0 else None


class SimVectorEnv(gym.vector.VectorEnv):  # type: ignore[type-arg]
    """A batch of ``num_envs`` C++ environments behind Gymnasium's VectorEnv API.

    ``env_config`` keywords go to the C++ environment, which checks them (unknown
    keys and out-of-range values raise ``ValueError``).

    ``copy=True`` (Gymnasium's default for its own vector envs) returns fresh
    arrays from ``reset``/``step``. With ``copy=False`` they are read-only views of
    the environment's own output buffers, overwritten by the next ``step``: the
    fastest path, for callers that consume a step before taking the next. RLlib's
    env runner keeps per-env rows of the observation array across steps, so it
    needs ``copy=True``.
    """

    core_class: ClassVar[Any]
    metadata: dict[str, Any] = {  # noqa: RUF012 (Gymnasium's own convention)
        "autoreset_mode": AutoresetMode.NEXT_STEP,
        "render_modes": [],
    }

    def __init__(self, num_envs: int = 1, *, copy: bool = True, **env_config: Any) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)):
            raise TypeError(
                f"{self.core_class.env_name}: num_envs must be an int, got {num_envs!r}"
            )
        core_config, self._faults = split_faults(self.core_class.env_name, env_config)
        self._core = self.core_class(int(num_envs), core_config)
        self.num_envs = int(num_envs)
        self.copy = copy
        self.env_config = dict(env_config)
        self.single_observation_space, self.single_action_space = _spaces(self._core)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        # Views of the C++ output buffers, made once: step() hands them out as is.
        self._obs = self._core.obs
        self._reward = self._core.reward
        self._terminated = self._core.terminated
        self._truncated = self._core.truncated
        self._seeded = False

    @property
    def max_episode_steps(self) -> int | None:
        """The step that truncates an episode (None: ``max_episode_steps=0``, no limit)."""
        return _time_limit(self._core)

    @property
    def elapsed_steps(self) -> np.ndarray:
        """Steps taken in each env's current episode (read-only view)."""
        return self._core.elapsed_steps  # type: ignore[no-any-return]

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets all envs, or those in ``options["reset_mask"]`` (a bool array).

        ``seed``: an int seeds env ``i`` from ``(seed, i)``; a list gives each env
        its own seed (``None`` entries keep their stream); ``None`` continues the
        streams (drawing fresh entropy on the first reset).
        """
        name = self.core_class.env_name
        mask = None
        if options:
            unknown = set(options) - {"reset_mask"}
            if unknown:
                raise ValueError(
                    f"{name}: unknown reset option(s) {sorted(unknown)}; valid: 'reset_mask'"
                )
            mask = options.get("reset_mask")
            if mask is not None and not (
                isinstance(mask, np.ndarray)
                and mask.dtype == np.bool_
                and mask.shape == (self.num_envs,)
            ):
                raise ValueError(
                    f"{name}: reset_mask must be a numpy bool array of shape ({self.num_envs},), "
                    f"got {mask!r}"
                )
        # Check every seed before touching any stream: a refused reset changes nothing.
        if isinstance(seed, (list, tuple)):
            if len(seed) != self.num_envs:
                raise ValueError(f"{name}: got {len(seed)} seeds for {self.num_envs} envs")
            seeds = [None if s is None else _check_seed(s) for s in seed]
            for i, s in enumerate(seeds):
                if s is not None:
                    self._core.seed_one(i, s)
            super().reset(seed=None)
        elif seed is not None:
            self._core.seed(_check_seed(seed))
            super().reset(seed=seed)
        elif not self._seeded:
            self._core.seed(_fresh_seed())
        self._seeded = True
        self._core.reset(mask)
        return (self._obs.copy() if self.copy else self._obs), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._faults.armed:
            self._faults.on_step(self.num_envs)
        self._core.step(actions)
        if self.copy:
            return (
                self._obs.copy(),
                self._reward.copy(),
                self._terminated.copy(),
                self._truncated.copy(),
                {},
            )
        return self._obs, self._reward, self._terminated, self._truncated, {}

    def get_state(self) -> np.ndarray:
        """The physical state of every env, shape ``(num_envs, state_dim)``, float64."""
        return self._core.get_state()  # type: ignore[no-any-return]

    def set_state(self, state: np.ndarray) -> None:
        """Overwrites the physical state (observations follow; counters do not)."""
        self._core.set_state(state)

    def close_extras(self, **kwargs: Any) -> None:
        self._core.close()

    @property
    def closed(self) -> bool:  # type: ignore[override]
        return bool(self._core.closed)

    @closed.setter
    def closed(self, value: bool) -> None:
        # gymnasium.vector.VectorEnv.close() sets this; the C++ flag is the truth.
        pass


class SimEnv(gym.Env):  # type: ignore[type-arg]
    """One C++ environment behind Gymnasium's Env API (no autoreset: call reset()).

    Where the id's spec carries a time limit (``wrapped_time_limit``), the env counts no steps
    itself, as Gymnasium's own single envs: ``gym.make`` adds ``TimeLimit``. Passing
    ``max_episode_steps`` to the constructor sets a limit inside the env instead.

    ``render_mode="rgb_array"``: ``render()`` returns the current state as an
    ``(height, width, 3)`` uint8 picture like Gymnasium's (:mod:`sim_ext.render`).
    """

    core_class: ClassVar[Any]
    wrapped_time_limit: ClassVar[int | None] = None
    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, render_mode: str | None = None, **env_config: Any) -> None:
        name = self.core_class.env_name
        modes = self.metadata["render_modes"]
        if render_mode is not None and render_mode not in modes:
            raise ValueError(
                f"{name}: render_mode={render_mode!r} is not supported; "
                f"valid: None{''.join(f', {m!r}' for m in modes)}"
            )
        self.render_mode = render_mode
        core_config, self._faults = split_faults(name, env_config)
        if self.wrapped_time_limit is not None and core_config.get("max_episode_steps") is None:
            core_config = {**core_config, "max_episode_steps": 0}
        self._core = self.core_class(1, core_config)
        self.env_config = dict(env_config)
        self.observation_space, self.action_space = _spaces(self._core)
        self._discrete = bool(self._core.discrete)
        self._act_dim = int(self._core.act_dim)
        self._actions = (
            np.zeros(1, dtype=np.int64)
            if self._discrete
            else np.zeros((1, self._act_dim), dtype=np.float32)
        )
        self._obs = self._core.obs
        self._episode_over = True
        self._seeded = False

    @property
    def max_episode_steps(self) -> int | None:
        """The env's own time limit; None where ``gym.make``'s ``TimeLimit`` does the counting
        (the spec's ``max_episode_steps``)."""
        return _time_limit(self._core)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if options:
            name = self.core_class.env_name
            raise ValueError(f"{name}: unknown reset option(s) {sorted(options)}; valid: none")
        if seed is not None:
            self._core.seed(_check_seed(seed))
        elif not self._seeded:
            self._core.seed(_fresh_seed())
        self._seeded = True
        self._core.reset(None)
        self._episode_over = False
        return self._obs[0].copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._core.closed:
            raise RuntimeError(f"{self.core_class.env_name}: environment is closed")
        if self._episode_over:
            raise RuntimeError(
                f"{self.core_class.env_name}: step() called at the end of an episode or before "
                "the first reset(); call reset() first"
            )
        self._load_action(action)
        if self._faults.armed:
            self._faults.on_step(1)
        self._core.step(self._actions)
        terminated = bool(self._core.terminated[0])
        truncated = bool(self._core.truncated[0])
        self._episode_over = terminated or truncated
        return self._obs[0].copy(), float(self._core.reward[0]), terminated, truncated, {}

    def _load_action(self, action: Any) -> None:
        name = self.core_class.env_name
        if self._discrete:
            if isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
                action = action.item()
            if isinstance(action, bool) or not isinstance(action, (int, np.integer)):
                raise TypeError(
                    f"{name}: action must be an int in [0, {self._core.num_actions}), "
                    f"got {action!r} ({type(action).__name__})"
                )
            if not 0 <= action < self._core.num_actions:
                raise ValueError(
                    f"{name}: action {action} is out of range; expected an int in "
                    f"[0, {self._core.num_actions})"
                )
            self._actions[0] = action
            return
        arr = np.asarray(action)
        if arr.dtype.kind != "f" or arr.shape != (self._act_dim,):
            raise TypeError(
                f"{name}: action must be a float array of shape ({self._act_dim},), "
                f"got {action!r} (dtype {arr.dtype}, shape {arr.shape})"
            )
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}: action must be finite, got {arr.tolist()}")
        self._actions[0] = arr

    def get_state(self) -> np.ndarray:
        """The physical state, shape ``(state_dim,)``, float64."""
        return self._core.get_state()[0]  # type: ignore[no-any-return]

    def set_state(self, state: np.ndarray) -> None:
        self._core.set_state(np.asarray(state, dtype=np.float64).reshape(1, -1))

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The current state as an ``(height, width, 3)`` uint8 picture (``rgb_array``)."""
        if self.render_mode is None:
            gym.logger.warn(
                f"{self.core_class.env_name}: render() without a render_mode; make the env "
                'with render_mode="rgb_array"'
            )
            return None
        return render.frame(self.core_class.env_name, self.get_state())

    def close(self) -> None:
        self._core.close()


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return int(seed)


def _class_stem(env_name: str) -> str:
    return env_name.split("-v")[0]


def vector_env_class(env_name: str) -> type[SimVectorEnv]:
    """The VectorEnv class of one compiled environment (``CartPole-v1`` -> CartPoleVectorEnv)."""
    return _CLASSES[f"{_class_stem(env_name)}VectorEnv"]  # type: ignore[return-value]


def env_class(env_name: str) -> type[SimEnv]:
    """The single-env class of one compiled environment (``CartPole-v1`` -> CartPoleEnv)."""
    return _CLASSES[f"{_class_stem(env_name)}Env"]  # type: ignore[return-value]


def _build_classes() -> dict[str, type]:
    built: dict[str, type] = {}
    for env_name, core in core_classes().items():
        stem = _class_stem(env_name)
        twin = twin_spec(env_name)
        fps = render.RENDER_FPS.get(env_name)
        single: dict[str, Any] = {
            "wrapped_time_limit": twin.max_episode_steps if twin is not None else None,
            "metadata": {"render_modes": ["rgb_array"], "render_fps": fps}
            if fps is not None
            else {"render_modes": []},
        }
        for base, suffix, extra in (
            (SimVectorEnv, "VectorEnv", {}),
            (SimEnv, "Env", single),
        ):
            name = stem + suffix
            # Module-level names keep these picklable by reference (Ray ships env creators).
            built[name] = type(name, (base,), {"core_class": core, "__module__": __name__, **extra})
    return built


_CLASSES = _build_classes()
globals().update(_CLASSES)


def env_ids() -> list[str]:
    """The Gymnasium ids of all compiled environments (``sim_ext/CartPole-v1``, ...)."""
    return [ID_PREFIX + name for name in sorted(core_classes())]


def register_all() -> None:
    """Registers ``sim_ext/<name>`` for every compiled environment (idempotent).

    An environment with a Gymnasium twin gets the twin's ``max_episode_steps`` and
    ``reward_threshold`` (see the module's docstring for who truncates).
    """
    for env_name in core_classes():
        env_id = ID_PREFIX + env_name
        if env_id in gym.registry:
            continue
        stem = _class_stem(env_name)
        twin = twin_spec(env_name)
        gym.register(
            id=env_id,
            entry_point=f"{__name__}:{stem}Env",
            vector_entry_point=f"{__name__}:{stem}VectorEnv",
            max_episode_steps=twin.max_episode_steps if twin is not None else None,
            reward_threshold=twin.reward_threshold if twin is not None else None,
        )


def __getattr__(name: str) -> Any:
    try:
        return _CLASSES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
