"""Fast batched C++ environments with a Gymnasium face.

Importing ``sim_ext`` registers ``sim_ext/<name>`` ids for every compiled
environment, so ``gym.make("sim_ext/CartPole-v1")`` and
``gym.make_vec("sim_ext/CartPole-v1", num_envs=64, vectorization_mode="vector_entry_point")``
work. In another process, importing is enough; with Gymnasium alone,
``gym.make("sim_ext:sim_ext/CartPole-v1")`` imports it first.
"""

from sim_ext.envs import (
    SimEnv,
    SimVectorEnv,
    core_classes,
    env_class,
    env_ids,
    register_all,
    vector_env_class,
)

__all__ = [
    "SimEnv",
    "SimVectorEnv",
    "core_classes",
    "env_class",
    "env_ids",
    "register_all",
    "vector_env_class",
]

register_all()


def __getattr__(name: str) -> object:
    # CartPoleVectorEnv, CartPoleEnv, ...: built from the compiled module in sim_ext.envs.
    from sim_ext import envs

    return getattr(envs, name)
