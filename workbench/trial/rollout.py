"""Batched rollouts of a policy on a vector env: the one loop that both `workbench eval`
(a checkpoint's policy, `workbench.policy.evaluate`) and a trial's own evaluation before
a confirmed stop (`workbench.trial.score`) play episodes with.

sim_ext ids step all their copies in one C++ call; other ids get Gymnasium's own vector
class. `Policy` turns an RLModule into what RLlib's env runner does with it at inference:
observations in, the env's actions out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns

import sim_ext  # noqa: F401  (registers the sim_ext ids)
from workbench.errors import ExperimentError
from workbench.experiment import envpool_envs
from workbench.trial.observation_filter import Normalize, ObservationStats

# Episodes still running after this many steps mean the env has no time limit.
MAX_EPISODE_STEPS = 100_000


class Policy(torch.nn.Module):
    """An RLModule as a plain torch module: a batch of observations -> the actions the
    env takes, as RLlib's env runner computes them.

    ``forward_inference``; the module's own actions if it gives them (DQN), else its
    inference distribution made deterministic (argmax, mean) or sampled; then what
    RLlib's module-to-env connector does to Box actions (``NormalizeAndClipActions``):
    unsquash from [-1, 1] to the bounds and clip (``normalize_actions``, RLlib's
    default), or only clip (``clip_actions``). With ``observation_filter`` (a trial that
    normalised its observations) the observations first go through the statistics its
    MeanStdFilter had (workbench.trial.observation_filter).
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(
        self,
        module: Any,
        action_space: Any,
        *,
        normalize_actions: bool,
        clip_actions: bool,
        deterministic: bool = True,
        observation_filter: ObservationStats | None = None,
    ) -> None:
        super().__init__()
        self.module = module
        # RLlib's MeanStdFilter at inference (env.normalize_observations).
        self.normalize = None if observation_filter is None else Normalize(observation_filter)
        self.dist_class = module.get_inference_action_dist_cls()
        self.deterministic = deterministic
        self.to_env = "none"
        if isinstance(action_space, gym.spaces.Box):
            bounded = bool(np.all(action_space.bounded_below & action_space.bounded_above))
            if normalize_actions:
                if bounded and action_space.dtype in (np.float32, np.float64):
                    self.to_env = "unsquash"
            elif clip_actions:
                self.to_env = "clip"
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.normalize is not None:
            obs = self.normalize(obs)
        out = self.module.forward_inference({Columns.OBS: obs})
        if Columns.ACTIONS in out:
            actions: torch.Tensor = out[Columns.ACTIONS]
        else:
            dist = self.dist_class.from_logits(out[Columns.ACTION_DIST_INPUTS])
            actions = dist.to_deterministic().sample() if self.deterministic else dist.sample()
        if self.to_env == "unsquash":
            actions = self.low + (actions + 1.0) * (self.high - self.low) / 2.0
            actions = torch.clamp(actions, self.low, self.high)
        elif self.to_env == "clip":
            actions = torch.clamp(actions, self.low, self.high)
        return actions


def make_vector_env(env_id: str, num_envs: int, env_config: dict[str, Any]) -> Any:
    """A vector env of `num_envs` copies: sim_ext's or EnvPool's C++ batch, Gymnasium's
    own otherwise."""
    if env_id.startswith(envpool_envs.PREFIX):
        envpool_envs.register()
    native = env_id.startswith(("sim_ext/", envpool_envs.PREFIX))
    mode = "vector_entry_point" if native else "sync"
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **env_config)


def rollout(
    act: Callable[[np.ndarray], np.ndarray],
    env_id: str,
    env_config: dict[str, Any],
    *,
    episodes: int,
    seed: int = 0,
    max_envs: int = 64,
) -> tuple[list[float], list[int]]:
    """Plays `episodes` whole episodes, up to `max_envs` at once; episode k is reset with
    seed ``seed + k``. Returns each episode's return and length, in episode order."""
    returns: list[float] = []
    lengths: list[int] = []
    while len(returns) < episodes:
        n = min(max_envs, episodes - len(returns))
        env = make_vector_env(env_id, n, env_config)
        try:
            obs, _ = env.reset(seed=[seed + len(returns) + i for i in range(n)])
            total = np.zeros(n, dtype=np.float64)
            length = np.zeros(n, dtype=np.int64)
            done = np.zeros(n, dtype=bool)
            for _ in range(MAX_EPISODE_STEPS):
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                # Gymnasium's NEXT_STEP autoreset: a finished env restarts on its next
                # step; those steps belong to no episode of ours.
                running = ~done
                total += np.where(running, reward, 0.0)
                length += running
                done |= np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
                if done.all():
                    break
            else:
                raise ExperimentError.single(
                    env_id,
                    "",
                    f"{int((~done).sum())} episodes still running after {MAX_EPISODE_STEPS} "
                    "steps: the env has no time limit; give one (e.g. --env-config "
                    "max_episode_steps=N)",
                )
        finally:
            env.close()
        returns.extend(float(r) for r in total)
        lengths.extend(int(n_) for n_ in length)
    return returns, lengths


def torch_actor(policy: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., np.ndarray]:
    """numpy observations -> numpy actions through a torch policy (no gradients)."""

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out: np.ndarray = policy(torch.as_tensor(np.asarray(obs, dtype=np.float32))).numpy()
        return out

    return act
