"""What fills what an experiment file leaves unset: RLlib's defaults, or the workbench's
for small environments (the experiment's ``defaults`` field).

RLlib's defaults suit Atari-sized problems: a 256x256 MLP for each network and PPO
minibatches of 128. On a small vector observation (CartPole's 4 numbers) that makes every
PPO iteration learner-bound: with the fast env runner sampling 4,000 steps takes about
0.1 s here and the learner's 6 epochs of 31 minibatches about 1.1 s. The small-env
defaults are those of CleanRL and Stable-Baselines3 for classic control: a 64x64 tanh MLP
for the policy and another for the value function, and four minibatches per train batch;
plus one torch thread per trial process (a second thread buys nothing at this size and
costs when trials share cores). `benchmarks/end_to_end.py` measures the difference; the
fields the file sets (``model``, ``training``, the search space) always win. 'auto' keeps
RLlib's defaults for continuous actions: on Pendulum and LunarLander the small networks learned
slower per env step (docs/benchmarks/continuous-parity.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from workbench.experiment import rllib_names
from workbench.experiment.algorithms import FAST_RUNNER_ALGORITHMS

SMALL_ENV_ALGORITHMS = FAST_RUNNER_ALGORITHMS  # on-policy, with RLlib's default MLP modules
SMALL_ENV_MAX_FEATURES = 64
SMALL_ENV_MODEL: dict[str, Any] = {
    "fcnet_hiddens": [64, 64],
    "fcnet_activation": "tanh",
    "vf_share_layers": False,
}
SMALL_ENV_MINIBATCHES = 4  # PPO minibatches per train batch (CleanRL's num_minibatches)
SMALL_ENV_TORCH_THREADS = 1
MINIBATCH_KEYS = ("minibatch_size", "train_batch_size_per_learner")


@dataclass(frozen=True)
class Defaults:
    """The defaults one experiment gets, and why."""

    name: str  # "small_env" or "rllib"
    reason: str
    model: dict[str, Any] = field(default_factory=dict)  # the file's fields over the profile's
    minibatches: int | None = None  # PPO minibatch_size = train batch // minibatches
    torch_threads: int | None = None  # torch intra-op threads in each trial process

    def minibatch_size(self, train_batch_size: int) -> int | None:
        if self.minibatches is None:
            return None
        return max(1, train_batch_size // self.minibatches)

    def summary(self) -> str:
        """One line for the start of a run."""
        if self.name != "small_env":
            return f"defaults: RLlib's ({self.reason})"
        parts = []
        hiddens = self.model.get("fcnet_hiddens")
        if hiddens is not None:
            shape = "x".join(str(h) for h in hiddens)
            parts.append(f"model {shape} {self.model.get('fcnet_activation', '')}".rstrip())
        if self.minibatches is not None:
            parts.append(f"{self.minibatches} minibatches per batch")
        if self.torch_threads is not None:
            parts.append(f"{self.torch_threads} torch thread per trial process")
        return f"defaults: small_env ({self.reason}): {', '.join(parts)}"


def observation_features(space: gym.Space[Any]) -> int | None:
    """The length of a flat vector observation; None for images, dicts, tuples."""
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return int(space.shape[0])
    return None


def model_fields() -> list[str]:
    """The fields of RLlib's DefaultModelConfig: what a model section may set."""
    return list(rllib_names.MODEL_FIELDS)


def small_env_applies(
    algorithm: str, observation_space: gym.Space[Any] | None, discrete_actions: bool | None
) -> str | None:
    """Why the small-env defaults do not fit (None: they do)."""
    if algorithm not in SMALL_ENV_ALGORITHMS:
        return f"{algorithm} is not one of {', '.join(SMALL_ENV_ALGORITHMS)}"
    if discrete_actions is not True:
        # Measured: PPO on sim_ext Pendulum (experiments/pendulum_pb2.yaml) with 64x64
        # networks was still at about -1000 after 144k env steps, where RLlib's 256x256
        # reached -188 after 80k; on LunarLanderContinuous with RL Zoo's settings 64x64 tanh
        # evaluated lower than 256x256 (ReLU) after 500k env steps on 3 of 3 seeds
        # (docs/benchmarks/continuous-parity.md).
        return "continuous actions (the small networks learned Pendulum and LunarLander slower)"
    if observation_space is None:
        return "the observation space is unknown"
    features = observation_features(observation_space)
    if features is None:
        return f"the observation {observation_space} is not a flat vector"
    if features > SMALL_ENV_MAX_FEATURES:
        return f"the observation has {features} features (> {SMALL_ENV_MAX_FEATURES})"
    return None


def choose(
    *,
    wanted: str,
    algorithm: str,
    observation_space: gym.Space[Any] | None,
    discrete_actions: bool | None,
    model: dict[str, Any],
    fixed: dict[str, Any],
    searched: set[str],
) -> Defaults:
    """The defaults for an experiment. `wanted` is its ``defaults`` field (auto,
    small_env, rllib), `discrete_actions` whether its env's actions are discrete,
    `model` its ``model`` section, `fixed` its ``training`` section and `searched` the
    names its search space varies. combination_checks.check_model has already refused
    small_env where it cannot apply (algorithms other than SMALL_ENV_ALGORITHMS)."""
    unfit = small_env_applies(algorithm, observation_space, discrete_actions)
    if wanted == "rllib":
        return Defaults("rllib", "the file asks for them", model=dict(model))
    if wanted == "auto" and unfit is not None:
        return Defaults("rllib", unfit, model=dict(model))
    features = observation_features(observation_space) if observation_space else None
    reason = (
        "the file asks for them"
        if wanted == "small_env"
        else f"{algorithm} on {features} observation features"
    )
    # A minibatch size the file fixes or searches wins; so does RLlib's where the train
    # batch is searched (the minibatch would have to follow each trial's batch).
    sets_minibatch = (
        algorithm == "PPO" and "minibatch_size" not in fixed and not searched & set(MINIBATCH_KEYS)
    )
    minibatches = SMALL_ENV_MINIBATCHES if sets_minibatch else None
    return Defaults(
        "small_env",
        reason,
        model={**SMALL_ENV_MODEL, **model},
        minibatches=minibatches,
        torch_threads=SMALL_ENV_TORCH_THREADS,
    )
