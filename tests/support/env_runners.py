"""RLlib env runner configs for the fast runner's tests: PPO on a sim_ext env, sampled in
the process that builds the runner (no remote runners)."""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.ppo import PPOConfig

from workbench.trial.config import register_env


def runner_config(env_id: str = "sim_ext/CartPole-v1", n: int = 8, seed: int = 7) -> Any:
    register_env(env_id)
    return (
        PPOConfig()
        .environment(env=env_id)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=n,
            gym_env_vectorize_mode="vector_entry_point",
        )
        .debugging(seed=seed)
    )
