"""The experiment's `defaults`: the workbench's small-env defaults or RLlib's, chosen from
the algorithm and the observation, never over what the file sets.

The choice, the RLlib config it gives and the saved file a resume reads (a built
algorithm trained with them: tests/integration/test_defaults_integration.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from tests.support.bad_files import problem_about, rejected
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.experiment.defaults import SMALL_ENV_MODEL, choose
from workbench.experiment.resolve import load_and_resolve
from workbench.trial.config import algorithm_config

CARTPOLE_OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def chosen(**kwargs: Any) -> Any:
    args: dict[str, Any] = {
        "wanted": "auto",
        "algorithm": "PPO",
        "observation_space": CARTPOLE_OBS,
        "discrete_actions": True,
        "model": {},
        "fixed": {},
        "searched": set(),
    }
    return choose(**{**args, **kwargs})


def test_auto_gives_ppo_on_a_small_vector_observation_the_small_env_defaults() -> None:
    defaults = chosen()
    assert defaults.name == "small_env"
    assert defaults.model == SMALL_ENV_MODEL
    assert defaults.minibatch_size(4000) == 1000  # four minibatches per batch
    assert defaults.torch_threads == 1
    assert "PPO on 4 observation features" in defaults.summary()


@pytest.mark.parametrize(
    ("algorithm", "space", "why"),
    [
        ("DQN", CARTPOLE_OBS, "DQN is not one of PPO, APPO, IMPALA"),
        ("PPO", gym.spaces.Box(0, 255, (84, 84, 3), np.uint8), "not a flat vector"),
        ("PPO", gym.spaces.Box(-1.0, 1.0, (65,), np.float32), "65 features (> 64)"),
        ("PPO", gym.spaces.Dict({"a": CARTPOLE_OBS}), "not a flat vector"),
    ],
)
def test_auto_keeps_rllibs_defaults_where_small_env_does_not_fit(
    algorithm: str, space: gym.Space[Any], why: str
) -> None:
    defaults = chosen(algorithm=algorithm, observation_space=space)
    assert defaults.name == "rllib"
    assert why in defaults.reason
    assert defaults.model == {}
    assert defaults.minibatch_size(4000) is None
    assert defaults.torch_threads is None


def test_auto_keeps_rllibs_defaults_for_continuous_actions(tmp_path: Path) -> None:
    """Measured on Pendulum: the small networks learned far slower than RLlib's."""
    defaults = chosen(discrete_actions=False)
    assert defaults.name == "rllib" and "continuous actions" in defaults.reason
    assert chosen(discrete_actions=False, wanted="small_env").name == "small_env"
    data = tiny_ppo(tmp_path, env={"id": "sim_ext/Pendulum-v1"})
    resolved = load_and_resolve(write_experiment(tmp_path, data), check_results=False)
    assert resolved.defaults.name == "rllib"


def test_what_the_file_sets_wins_over_the_small_env_defaults() -> None:
    mine = {"fcnet_hiddens": [32], "fcnet_activation": "linear"}
    defaults = chosen(model=mine)
    assert defaults.model == {**SMALL_ENV_MODEL, **mine}
    # A fixed or searched minibatch, or a searched train batch: no minibatch default.
    assert chosen(fixed={"minibatch_size": 64}).minibatches is None
    assert chosen(searched={"minibatch_size"}).minibatches is None
    assert chosen(searched={"train_batch_size_per_learner"}).minibatches is None
    # A fixed train batch is what the four minibatches divide.
    assert chosen(fixed={"train_batch_size_per_learner": 2000}).minibatch_size(2000) == 500
    # APPO and IMPALA get the model and the threads; their minibatching is their own.
    appo = chosen(algorithm="APPO")
    assert (appo.name, appo.minibatches, appo.torch_threads) == ("small_env", None, 1)


def test_rllib_asked_for_is_rllib_even_where_small_env_fits() -> None:
    defaults = chosen(wanted="rllib", model={"fcnet_hiddens": [128]})
    assert defaults.name == "rllib"
    assert defaults.model == {"fcnet_hiddens": [128]}
    assert defaults.minibatches is None and defaults.torch_threads is None


def test_the_rllib_config_carries_the_small_env_model_and_minibatch(tmp_path: Path) -> None:
    data = tiny_ppo(tmp_path, training={"train_batch_size_per_learner": 2000})
    resolved = load_and_resolve(write_experiment(tmp_path, data), check_results=False)
    config = algorithm_config(resolved.experiment, resolved.defaults)
    assert config.model_config["fcnet_hiddens"] == [64, 64]
    assert config.model_config["fcnet_activation"] == "tanh"
    assert config.model_config["vf_share_layers"] is False
    assert config.minibatch_size == 500
    assert config.callbacks_class.torch_threads == 1  # type: ignore[attr-defined]

    data = tiny_ppo(tmp_path, defaults="rllib", training={"train_batch_size_per_learner": 2000})
    resolved = load_and_resolve(write_experiment(tmp_path, data), check_results=False)
    config = algorithm_config(resolved.experiment, resolved.defaults)
    default = type(config)()
    assert config.model_config == default.model_config  # RLlib's 256x256
    assert config.minibatch_size == default.minibatch_size
    assert config.callbacks_class.torch_threads is None  # type: ignore[attr-defined]


def test_the_saved_experiment_pins_the_chosen_defaults(tmp_path: Path) -> None:
    """`workbench resume` rebuilds trials from the saved file: it must say small_env and
    the model, not 'auto', so the networks match the checkpoints whatever auto picks."""
    from workbench.names import RESOLVED_FILE
    from workbench.run.launch import prepare_results_dir

    data = tiny_ppo(tmp_path, model={"fcnet_hiddens": [32, 32]})
    resolved = load_and_resolve(write_experiment(tmp_path, data), check_results=False)
    prepare_results_dir(resolved)
    saved = yaml.safe_load((resolved.results_dir / RESOLVED_FILE).read_text())
    assert saved["defaults"] == "small_env"
    assert saved["model"] == {**SMALL_ENV_MODEL, "fcnet_hiddens": [32, 32]}
    again = load_and_resolve(resolved.results_dir / RESOLVED_FILE, check_results=False)
    for field in ("name", "model", "minibatches", "torch_threads"):
        assert getattr(again.defaults, field) == getattr(resolved.defaults, field)


def test_a_misspelt_model_field_is_refused_with_the_field_and_the_valid_ones(
    tmp_path: Path,
) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, model={"fcnet_hidens": [64]}))
    err = rejected(path)
    problem_about(err, path, "model.fcnet_hidens", "did you mean 'fcnet_hiddens'", "valid:")


def test_layer_sizes_that_are_not_positive_integers_are_refused(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, model={"fcnet_hiddens": "64x64"}))
    problem_about(rejected(path), path, "model.fcnet_hiddens", "'64x64'", "[64, 64]")


def test_small_env_asked_for_an_algorithm_it_does_not_fit_is_refused(tmp_path: Path) -> None:
    data = tiny_ppo(tmp_path, algorithm="DQN", defaults="small_env")
    path = write_experiment(tmp_path, data)
    problem_about(rejected(path), path, "defaults", "not DQN's", "'auto' or 'rllib'")


def test_an_unknown_defaults_value_is_refused_with_the_valid_ones(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, defaults="tiny"))
    problem_about(rejected(path), path, "defaults", "'tiny'", "small_env")


def test_a_results_folder_from_before_the_defaults_field_resumes_on_rllibs(
    tmp_path: Path,
) -> None:
    """Its checkpoints hold RLlib's 256x256 networks: resuming it with the small-env
    defaults that 'auto' now picks would build networks they do not fit."""
    from workbench.experiment.resolve import load_saved, saved_defaults
    from workbench.names import RESOLVED_FILE
    from workbench.run.launch import prepare_results_dir

    resolved = load_and_resolve(write_experiment(tmp_path, tiny_ppo(tmp_path)), check_results=False)
    prepare_results_dir(resolved)
    saved = resolved.results_dir / RESOLVED_FILE
    assert load_saved(saved).defaults.name == "small_env"  # written now: pinned
    old = yaml.safe_load(saved.read_text())
    del old["defaults"], old["model"]
    saved.write_text(yaml.safe_dump(old, sort_keys=False))
    again = load_saved(saved)
    assert again.defaults.name == "rllib" and again.defaults.model == {}
    # export-schedule reads the same file as data (the replay experiment is built from it).
    assert saved_defaults(old)["defaults"] == "rllib"
    assert saved_defaults({**old, "defaults": "small_env"})["defaults"] == "small_env"
