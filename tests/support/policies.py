"""Policy checkpoints without training: RLlib's own LearnerGroup, built and saved in this
process (no Ray), which is the part of an algorithm checkpoint a policy is read from; and
what the policy does, computed with RLlib's own pieces in a plain loop."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import sim_ext  # noqa: F401  (registers the sim_ext ids)
from workbench.experiment.algorithms import config_class
from workbench.policy.checkpoint import load_module, read_checkpoint
from workbench.trial.manifest import policy_settings, write_manifest


def learner_group_checkpoint(
    folder: Path, algorithm: str, env_id: str, env_config: dict[str, Any] | None = None
) -> Path:
    """``folder`` as a checkpoint whose policy has fresh (seeded) random weights, with
    the manifest a trial's checkpoint carries (workbench.trial.manifest)."""
    env = gym.make(env_id, **(env_config or {}))
    config = config_class(algorithm)().environment(env_id, env_config=dict(env_config or {}))
    torch.manual_seed(0)
    group = config.build_learner_group(
        spaces={"default_policy": (env.observation_space, env.action_space)}
    )
    group.save_to_path(str(folder / "learner_group"))
    write_manifest(folder, policy=policy_settings(config, None))  # as a trial's checkpoint
    return folder


def rllib_actor(checkpoint: Path) -> Callable[[np.ndarray], np.ndarray]:
    """What RLlib's env runner sends to the env with explore=False, computed with
    RLlib's own pieces: forward_inference, the inference distribution made
    deterministic, and `unsquash_action` / `clip_action` for Box actions."""
    from ray.rllib.core.columns import Columns
    from ray.rllib.utils.spaces.space_utils import clip_action, unsquash_action

    info = read_checkpoint(checkpoint)
    module = load_module(info)
    dist_class = module.get_inference_action_dist_cls()
    box = isinstance(module.action_space, gym.spaces.Box)

    def act(observations: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = module.forward_inference({Columns.OBS: torch.from_numpy(observations)})
            if Columns.ACTIONS in out:
                actions = out[Columns.ACTIONS].numpy()
            else:
                dist = dist_class.from_logits(out[Columns.ACTION_DIST_INPUTS])
                actions = dist.to_deterministic().sample().numpy()
        if box and info.normalize_actions:
            return np.asarray(unsquash_action(actions, module.action_space))
        if box and info.clip_actions:
            return np.asarray(clip_action(actions, module.action_space))
        return np.asarray(actions)

    return act


def plain_rollout(checkpoint: Path, episodes: int, seed: int) -> tuple[list[float], list[int]]:
    """One `gym.make` env per episode (episode k from seed + k), one observation at a
    time through RLlib's module: what `evaluate` must reproduce with its batches."""
    info = read_checkpoint(checkpoint)
    act = rllib_actor(checkpoint)
    returns: list[float] = []
    lengths: list[int] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one observation at a time: threads only wait on each other
    try:
        for k in range(episodes):
            episode_return, length = _episode(act, info.env_id, info.env_config, seed + k)
            returns.append(episode_return)
            lengths.append(length)
    finally:
        torch.set_num_threads(threads)
    return returns, lengths


def _episode(act: Any, env_id: str, env_config: dict[str, Any], seed: int) -> tuple[float, int]:
    env = gym.make(env_id, **env_config)
    obs, _ = env.reset(seed=seed)
    total, length, done = 0.0, 0, False
    while not done:
        action = act(obs[None].astype(np.float32))[0]
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        length += 1
        done = terminated or truncated
    return total, length
