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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from workbench.errors import ExperimentError
from workbench.policy.checkpoint import PolicyCheckpoint, load_module

# The batched rollout lives a layer down, where a trial's own evaluation uses it too.
from workbench.trial.rollout import (
    MAX_EPISODE_STEPS,
    Policy,
    make_vector_env,
    rollout,
    torch_actor,
)

__all__ = [
    "MAX_EPISODE_STEPS",
    "Evaluation",
    "Policy",
    "evaluate_checkpoint",
    "make_vector_env",
    "parse_env_config",
    "policy_module",
    "rollout",
    "torch_actor",
]


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
        observation_filter=checkpoint.observation_filter,
    ).eval()


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
    time_s: float = 0.0  # the rollout's wall time

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
        time_s=elapsed,
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
