"""The workbench's trainable in a real algorithm: a kept actor's reset_config builds the
algorithm a new actor would have (the seeds and names without Ray: tests/unit/test_launch.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ray.tune.result import TRIAL_INFO

from tests.support.configs import config_of_file
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.trial.trainable import seeded_trainable, trial_seed


def test_reset_config_rebuilds_the_algorithm_for_the_next_trial_in_the_same_process(
    tmp_path: Path,
) -> None:
    """What Tune does with a kept actor (reuse_actors=True): reset() with the next
    trial's config, then restore() of a checkpoint (a PBT exploit) or nothing (a new
    trial). The algorithm must be the one a new actor would have built."""
    training = {"train_batch_size_per_learner": 128, "num_epochs": 1}
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, training=training, stop={"iterations": 1}))
    config = config_of_file(path)
    trainable = seeded_trainable(config.algo_class)

    def trial_config(index: int, lr: float) -> dict[str, Any]:
        data = config.copy(copy_frozen=False).training(lr=lr).to_dict()
        data[TRIAL_INFO] = SimpleNamespace(
            trial_id=f"abcde_{index:05d}", trial_name=f"PPO_{index:05d}", trial_resources=None
        )
        return data

    algo = trainable(config=trial_config(1, 1e-3))
    try:
        algo.train()
        saved = algo.save(str(tmp_path / "checkpoint"))
        runner = algo.env_runner
        assert algo.reset(trial_config(2, 5e-4)) is True  # Tune errors the trial on False
        assert (algo.config.lr, algo.config.seed) == (5e-4, trial_seed(0, "abcde_00002"))
        assert algo.iteration == 0
        assert algo.env_runner is not runner  # built again, not patched
        algo.restore(saved)  # the donor's state into the rebuilt algorithm
        assert algo.iteration == 1
        assert algo.train()["training_iteration"] == 2
        assert algo.config.lr == 5e-4
    finally:
        algo.stop()
