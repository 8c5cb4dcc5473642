"""Evaluation: a trained policy restored for inference only and rolled out on its env.

No Tune and no Ray cluster: the policy is the RLModule inside an algorithm checkpoint
(``learner_group/learner/rl_module/default_policy``), the settings that matter for
acting (env id, env_config, RLlib's action normalisation) come from the config the
checkpoint's learner group was built with, and the rollout steps a vector env in this
process. By default the policy acts deterministically, as RLlib's env runners do with
``explore=False``: the argmax of a categorical, the mean of a Gaussian.

A policy is found from a checkpoint folder, a trial folder (its newest checkpoint) or
an MLflow trial run (the newest checkpoint in its population's results folder), and
evaluations are logged to the trial's MLflow run as ``eval/*`` metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from ray.rllib.core.columns import Columns

import sim_ext  # noqa: F401  (registers the sim_ext ids)
from workbench.errors import ExperimentError
from workbench.policy.checkpoint import PolicyCheckpoint, load_module

# Episodes still running after this many steps mean the env has no time limit.
MAX_EPISODE_STEPS = 100_000


class Policy(torch.nn.Module):
    """An RLModule as a plain torch module: a batch of observations -> the actions the
    env takes, as RLlib's env runner computes them.

    ``forward_inference``; the module's own actions if it gives them (DQN), else its
    inference distribution made deterministic (argmax, mean) or sampled; then what
    RLlib's module-to-env connector does to Box actions (``NormalizeAndClipActions``):
    unsquash from [-1, 1] to the bounds and clip (``normalize_actions``, RLlib's
    default), or only clip (``clip_actions``).
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
    ) -> None:
        super().__init__()
        self.module = module
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


def policy_module(
    module: Any, checkpoint: PolicyCheckpoint, *, deterministic: bool = True
) -> Policy:
    """The checkpoint's module as a `Policy`: observations -> the env's actions."""
    return Policy(
        module,
        module.action_space,
        normalize_actions=checkpoint.normalize_actions,
        clip_actions=checkpoint.clip_actions,
        deterministic=deterministic,
    ).eval()


def make_vector_env(env_id: str, num_envs: int, env_config: dict[str, Any]) -> Any:
    """A vector env of `num_envs` copies: sim_ext's C++ batch, Gymnasium's own otherwise."""
    mode = "vector_entry_point" if env_id.startswith("sim_ext/") else "sync"
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **env_config)


@dataclass
class Evaluation:
    """Returns and lengths of `episodes` episodes; episode k started from seed + k."""

    returns: list[float]
    lengths: list[int]
    env_id: str
    env_config: dict[str, Any]
    seed: int
    deterministic: bool
    checkpoint: Path | None = None
    training_iteration: int | None = None
    run_id: str | None = None  # the MLflow run it was logged to
    notes: list[str] = field(default_factory=list)

    def stats(self) -> dict[str, float]:
        returns = np.asarray(self.returns, dtype=np.float64)
        return {
            "return_mean": float(returns.mean()),
            "return_std": float(returns.std()),
            "return_min": float(returns.min()),
            "return_max": float(returns.max()),
            "len_mean": float(np.mean(self.lengths)),
            "episodes": float(len(self.returns)),
        }

    def summary(self) -> str:
        s = self.stats()
        how = "deterministic" if self.deterministic else "stochastic"
        return (
            f"return {s['return_mean']:.1f} ± {s['return_std']:.1f} "
            f"(min {s['return_min']:.1f}, max {s['return_max']:.1f}), "
            f"episode length {s['len_mean']:.1f}, over {len(self.returns)} {how} episodes "
            f"on {self.env_id} (seeds {self.seed}..{self.seed + len(self.returns) - 1})"
        )


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


def parse_env_config(items: list[str] | None, source: str) -> dict[str, Any]:
    """``--env-config KEY=VALUE`` options (the value read as YAML: 3, 1e-3, true, text)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ExperimentError.single(
                source, "--env-config", f"{item!r} is not KEY=VALUE (for example substeps=2)"
            )
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key.strip()] = text
    return out


def evaluate_checkpoint(
    checkpoint: PolicyCheckpoint,
    *,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = 0,
    env_config: dict[str, Any] | None = None,
) -> Evaluation:
    """Rolls out the checkpoint's policy on its env (env_config: keys to override)."""
    config = {**checkpoint.env_config, **(env_config or {})}
    # Building the module and sampling (stochastic) draw from torch's global RNG: seeded
    # here, and left as it was. One thread: a small network's batch gains nothing from
    # more, and on a busy machine torch's threads wait on each other (seconds instead of
    # a tenth of one, measured).
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            module = load_module(checkpoint)
            _check_spaces(module, checkpoint, config)
            act = torch_actor(policy_module(module, checkpoint, deterministic=deterministic))
            start = time.monotonic()
            returns, lengths = rollout(act, checkpoint.env_id, config, episodes=episodes, seed=seed)
            elapsed = time.monotonic() - start
    finally:
        torch.set_num_threads(threads)
    result = Evaluation(
        returns=returns,
        lengths=lengths,
        env_id=checkpoint.env_id,
        env_config=config,
        seed=seed,
        deterministic=deterministic,
        checkpoint=checkpoint.path,
        training_iteration=checkpoint.training_iteration,
    )
    result.notes.append(f"{sum(lengths)} env steps in {elapsed:.1f} s")
    return result


def _check_spaces(module: Any, checkpoint: PolicyCheckpoint, env_config: dict[str, Any]) -> None:
    """The env (with these settings) must give and take what the policy was built for."""
    try:
        env = make_vector_env(checkpoint.env_id, 1, env_config)
    except (TypeError, ValueError) as err:
        raise ExperimentError.single(
            str(checkpoint.path), "--env-config", f"{checkpoint.env_id}: {err}"
        ) from None
    try:
        pairs = (
            ("observation", env.single_observation_space, module.observation_space),
            ("action", env.single_action_space, module.action_space),
        )
        for what, env_space, policy_space in pairs:
            if not _same_space(env_space, policy_space):
                raise ExperimentError.single(
                    str(checkpoint.path),
                    "--env-config",
                    f"{checkpoint.env_id} with env_config {env_config} has the {what} space "
                    f"{env_space}, but the policy was trained on {policy_space}; valid: the "
                    f"settings it was trained with ({checkpoint.env_config}) or others that "
                    "keep the spaces",
                )
    finally:
        env.close()


def _same_space(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    shape_a, shape_b = getattr(a, "shape", None), getattr(b, "shape", None)
    if shape_a != shape_b:
        return False
    return bool(getattr(a, "n", None) == getattr(b, "n", None))
