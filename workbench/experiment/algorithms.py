"""The algorithms an experiment can name, and how their hyperparameters are spelled.

Users write RLlib's public names (those of ``AlgorithmConfig.training(...)``, such as
``train_batch_size_per_learner`` or ``lambda_``). Tune's param_space is the config's
``to_dict()``, where some of them live under other keys (``_train_batch_size_per_learner``,
``lambda``): PBT mutations and PB2 bounds must use those. The mapping is read off RLlib
itself (set a probe value through ``training()`` and see which attribute holds it), not
re-derived here.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from workbench.errors import did_you_mean


@dataclass(frozen=True)
class AlgorithmInfo:
    name: str
    module: str
    config_class: str
    search_space_file: str  # the default in search_spaces/
    continuous_actions: bool  # can act in Box action spaces
    discrete_actions: bool


ALGORITHMS: dict[str, AlgorithmInfo] = {
    info.name: info
    for info in (
        AlgorithmInfo("PPO", "ray.rllib.algorithms.ppo", "PPOConfig", "ppo.yaml", True, True),
        AlgorithmInfo("APPO", "ray.rllib.algorithms.appo", "APPOConfig", "appo.yaml", True, True),
        AlgorithmInfo(
            "IMPALA", "ray.rllib.algorithms.impala", "IMPALAConfig", "impala.yaml", True, True
        ),
        AlgorithmInfo("DQN", "ray.rllib.algorithms.dqn", "DQNConfig", "dqn.yaml", False, True),
        AlgorithmInfo("SAC", "ray.rllib.algorithms.sac", "SACConfig", "sac.yaml", True, False),
    )
}

# Tune reads these renames off AlgorithmConfig.to_dict().
# The algorithms workbench.fast_runner.FastEnvRunner samples for: their env runners
# feed RLlib's default connectors and modules that output action distribution inputs.
FAST_RUNNER_ALGORITHMS = ("PPO", "APPO", "IMPALA")

# The algorithms the workbench has a lean learner for (workbench.trial.lean_learner: PPO,
# workbench.trial.lean_dqn: DQN).
LEAN_LEARNER_ALGORITHMS = ("PPO", "DQN")

_TO_DICT_RENAMES = {"lambda_": "lambda", "input_": "input"}

# Other libraries' names for RLlib's hyperparameters, for users who bring settings from
# them: the name -> (RLlib's names it may mean, the library that spells it so). The first
# of RLlib's names that the algorithm has is suggested.
_OTHER_NAMES: dict[str, tuple[tuple[str, ...], str]] = {
    "learning_rate": (("lr",), "Stable-Baselines3's"),
    "gae_lambda": (("lambda_",), "Stable-Baselines3's"),
    "clip_range": (("clip_param",), "Stable-Baselines3's"),
    "clip_coef": (("clip_param",), "CleanRL's"),
    "ent_coef": (("entropy_coeff",), "Stable-Baselines3's"),
    "vf_coef": (("vf_loss_coeff",), "Stable-Baselines3's"),
    "n_epochs": (("num_epochs",), "Stable-Baselines3's"),
    "update_epochs": (("num_epochs",), "CleanRL's"),
    "batch_size": (("minibatch_size", "train_batch_size_per_learner"), "Stable-Baselines3's"),
    "max_grad_norm": (("grad_clip",), "Stable-Baselines3's"),
    "target_kl": (("kl_target",), "Stable-Baselines3's"),
}


def hyperparameter_hint(name: str, valid: Iterable[str]) -> str:
    """' (did you mean ...?)' for a name the algorithm lacks: RLlib's name when ``name`` is
    another library's (``learning_rate`` -> ``lr``), else the closest valid name."""
    choices = list(valid)
    meant, source = _OTHER_NAMES.get(name, ((), ""))
    for candidate in meant:
        if candidate in choices:
            return f" (did you mean {candidate!r}? {name!r} is {source} name)"
    return did_you_mean(name, choices)


_NOT_HYPERPARAMETERS = {"self", "kwargs"}


def config_class(name: str) -> type[AlgorithmConfig]:
    info = ALGORITHMS[name]
    cls: type[AlgorithmConfig] = getattr(importlib.import_module(info.module), info.config_class)
    return cls


@cache
def training_parameters(name: str) -> frozenset[str]:
    """Every keyword ``config.training()`` of this algorithm accepts (through its bases)."""
    names: set[str] = set()
    for klass in config_class(name).__mro__:
        method = klass.__dict__.get("training")
        if method is not None:
            names.update(inspect.signature(method).parameters)
    return frozenset(names - _NOT_HYPERPARAMETERS)


class _Probe:
    """A value no setter would invent: found again by identity."""


@cache
def tune_key(name: str, parameter: str) -> str:
    """The key of ``parameter`` in Tune's param_space (``to_dict()``) for this algorithm."""
    config = config_class(name)()
    probe = _Probe()
    overrides: dict[str, Any] = {parameter: probe}
    config.training(**overrides)
    for attr, value in vars(config).items():
        if value is probe:
            return _TO_DICT_RENAMES.get(attr, attr)
    # The setter transformed the value (merged a dict, for instance): same name.
    return _TO_DICT_RENAMES.get(parameter, parameter)


def default_value(name: str, parameter: str) -> Any:
    """The algorithm's default for a training parameter (read from a fresh config)."""
    key = tune_key(name, parameter)
    return config_class(name)().to_dict().get(key)
