"""Steps a sim_ext batch and one Gymnasium reference env per batch member with
the same actions, and compares every field of every step.

At each episode start the C++ state is copied into the reference (the two
libraries draw initial states from different generators). After that the two
either run freely (``resync=False``: differences accumulate over whole episodes)
or the reference restarts every step from the C++ state (``resync=True``: each
step's dynamics compared at tight tolerance, however unstable the system).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim_ext import vector_env_class


@dataclass
class AlignmentReport:
    steps: int = 0
    episodes: int = 0
    terminations: int = 0
    truncations: int = 0
    max_obs_error: float = 0.0
    max_reward_error: float = 0.0


def align(
    env_name: str,
    make_reference: Callable[[], Any],
    set_reference_state: Callable[[Any, np.ndarray], None],
    policy: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    *,
    num_envs: int,
    steps: int,
    obs_atol: float,
    obs_rtol: float,
    reward_atol: float,
    seed: int = 0,
    resync: bool = False,
    env_config: dict[str, Any] | None = None,
) -> AlignmentReport:
    env = vector_env_class(env_name)(num_envs=num_envs, **(env_config or {}))
    limit = env.max_episode_steps
    refs = [make_reference() for _ in range(num_envs)]
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    state = env.get_state()
    for i, ref in enumerate(refs):
        ref.reset(seed=seed + i)
        set_reference_state(ref, state[i])
    ref_elapsed = np.zeros(num_envs, dtype=np.int64)
    restarting = np.zeros(num_envs, dtype=bool)
    report = AlignmentReport()

    for t in range(steps):
        actions = policy(obs, rng)
        if resync:
            before = env.get_state()
            for i, ref in enumerate(refs):
                if not restarting[i]:
                    set_reference_state(ref, before[i])
        obs, reward, terminated, truncated, _ = env.step(actions)
        state = env.get_state()
        for i, ref in enumerate(refs):
            where = f"{env_name} env {i} step {t}"
            if restarting[i]:
                # NEXT_STEP autoreset: this step started a new episode.
                assert reward[i] == 0.0 and not terminated[i] and not truncated[i], where
                set_reference_state(ref, state[i])
                ref_elapsed[i] = 0
                report.episodes += 1
                continue
            ref_obs, ref_reward, ref_terminated, _, _ = ref.step(actions[i])
            ref_elapsed[i] += 1
            ref_truncated = (not ref_terminated) and ref_elapsed[i] >= limit
            ref_obs = np.asarray(ref_obs, dtype=np.float64)
            err = np.abs(obs[i].astype(np.float64) - ref_obs)
            assert np.all(err <= obs_atol + obs_rtol * np.abs(ref_obs)), (
                f"{where}: obs {obs[i].tolist()} vs reference {ref_obs.tolist()}"
            )
            assert abs(float(reward[i]) - float(ref_reward)) <= reward_atol, (
                f"{where}: reward {reward[i]} vs reference {ref_reward}"
            )
            assert bool(terminated[i]) == bool(ref_terminated), (
                f"{where}: terminated {terminated[i]} vs reference {ref_terminated}, obs {obs[i]}"
            )
            assert bool(truncated[i]) == ref_truncated, (
                f"{where}: truncated {truncated[i]} vs reference {ref_truncated}"
            )
            report.max_obs_error = max(report.max_obs_error, float(err.max()))
            report.max_reward_error = max(
                report.max_reward_error, abs(float(reward[i]) - float(ref_reward))
            )
            report.steps += 1
        report.terminations += int(terminated.sum())
        report.truncations += int(truncated.sum())
        restarting = terminated | truncated
    env.close()
    return report
