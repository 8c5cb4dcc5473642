"""The env section checked against Gymnasium: the environment built once with its config,
and its action space against what the algorithm can act in."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import sim_ext
from workbench.errors import Problem, did_you_mean, one_of
from workbench.experiment import envpool_envs
from workbench.experiment.algorithms import ALGORITHMS
from workbench.experiment.bounds import Bound, not_finite, not_int64
from workbench.experiment.schema import Experiment


def check_env(
    experiment: Experiment, where: str, problems: list[Problem]
) -> tuple[bool | None, gym.Space[Any] | None]:
    """Builds the env once (its constructor checks env_config): whether its actions are
    discrete (None: unsupported or not built), and its observation space."""
    env_id = experiment.env.id
    if env_id.startswith(envpool_envs.PREFIX) and not envpool_envs.register():
        problems.append(
            Problem(
                where,
                "env.id",
                f"{env_id!r} is one of EnvPool's environments, and EnvPool is not installed "
                f"here: {envpool_envs.INSTALL_HINT}",
            )
        )
        return None, None
    known = set(gym.registry)
    if env_id not in known:
        problems.append(
            Problem(
                where,
                "env.id",
                f"unknown environment {env_id!r}"
                f"{did_you_mean(env_id, known)}; sim_ext ids: {one_of(sim_ext.env_ids())}",
            )
        )
        return None, None
    config = experiment.env.config
    bad = [
        Problem(where, f"env.config.{key}", why)
        for key, value in config.items()
        if (why := _env_value_problem(key, value)) is not None
    ]
    if bad:
        problems += bad
        return None, None
    try:
        env = gym.make(env_id, **config)
    except gym.error.DependencyNotInstalled as err:
        # A third-party env's package (LunarLander's Box2D: the project's box2d extra).
        hint = " (pip install -e '.[box2d]')" if "box2d" in str(err).lower() else ""
        problems.append(Problem(where, "env.id", f"{env_id} cannot be built here: {err}{hint}"))
        return None, None
    except (TypeError, ValueError, AssertionError, OverflowError) as err:
        # The env's own checks (sim_ext names the valid keys), or Gymnasium's asserts.
        problems.append(Problem(where, "env.config", str(err) or type(err).__name__))
        return None, None
    except RuntimeError as err:  # pybind11's casts, a third-party env's own refusal
        why = str(err).split(" (#define")[0] or type(err).__name__
        problems.append(Problem(where, "env.config", f"{env_id} refused it: {why}"))
        return None, None
    try:
        space = env.action_space
        if isinstance(space, gym.spaces.Discrete):
            return True, env.observation_space
        if isinstance(space, gym.spaces.Box):
            return False, env.observation_space
        problems.append(Problem(where, "env.id", f"action space {space} is not supported"))
        return None, env.observation_space
    finally:
        env.close()  # type: ignore[no-untyped-call]


# Keywords gym.make itself takes (not the env's): their values are Gymnasium's to check,
# and it asserts instead of raising a ValueError.
_GYM_MAKE_INTS = {"max_episode_steps": Bound(integer=True, low=1, high=10**9)}


def _env_value_problem(key: str, value: Any) -> str | None:
    bound = _GYM_MAKE_INTS.get(key)
    return bound.problem(value) if bound is not None else not_finite(value) or not_int64(value)


def check_action_space(
    experiment: Experiment, discrete: bool | None, where: str, problems: list[Problem]
) -> None:
    """The algorithm can act in the env's actions (``discrete``: check_env's answer; None,
    an env not built, is checked no further)."""
    algo = experiment.algorithm
    info = ALGORITHMS[algo]
    for kind, wanted, able in (
        ("discrete", True, info.discrete_actions),
        ("continuous", False, info.continuous_actions),
    ):
        if discrete is wanted and not able:
            capable = one_of(
                a
                for a, i in ALGORITHMS.items()
                if (i.discrete_actions if wanted else i.continuous_actions)
            )
            problems.append(
                Problem(
                    where,
                    "algorithm",
                    f"{algo} cannot act in a {kind} action space ({experiment.env.id}); "
                    f"use {capable}",
                )
            )
