"""The algorithms an experiment can name, and how their hyperparameters are spelled.

Users write RLlib's public names (those of ``AlgorithmConfig.training(...)``, such as
``train_batch_size_per_learner`` or ``lambda_``). Tune's param_space is the config's
``to_dict()``, where some of them live under other keys (``_train_batch_size_per_learner``,
``lambda``): PBT mutations and PB2 bounds must use those. The names and the mapping are
read off RLlib itself by tools/write_rllib_names.py into ``rllib_names``, so that checking
an experiment does not import RLlib (a test fails when the table and RLlib part).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.errors import did_you_mean
from workbench.experiment import rllib_names

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig


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

# The algorithms workbench.fast_runner.FastEnvRunner samples for: their env runners
# feed RLlib's default connectors and modules that output action distribution inputs.
FAST_RUNNER_ALGORITHMS = ("PPO", "APPO", "IMPALA")

# The algorithms the workbench has a lean learner for (workbench.trial.lean_learner: PPO,
# workbench.trial.lean_dqn: DQN).
LEAN_LEARNER_ALGORITHMS = ("PPO", "DQN")

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


def config_class(name: str) -> type[AlgorithmConfig]:
    """The algorithm's RLlib config class (imports RLlib)."""
    info = ALGORITHMS[name]
    cls: type[AlgorithmConfig] = getattr(importlib.import_module(info.module), info.config_class)
    return cls


def training_parameters(name: str) -> frozenset[str]:
    """Every keyword ``config.training()`` of this algorithm accepts (through its bases)."""
    return rllib_names.TRAINING_PARAMETERS[name]


def tune_key(name: str, parameter: str) -> str:
    """The key of ``parameter`` in Tune's param_space (``to_dict()``) for this algorithm."""
    return rllib_names.TUNE_KEYS[name].get(parameter, parameter)


def default_train_batch(name: str) -> int:
    """The train batch per learner of a trial whose file sets none."""
    return rllib_names.TRAIN_BATCH_DEFAULTS[name]
