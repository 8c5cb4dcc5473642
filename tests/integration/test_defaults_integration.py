"""The small-env defaults in a built algorithm: its networks and its torch threads, and an
iteration trained with them (the choice itself, without Ray: tests/unit/test_defaults.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.support.experiments import tiny_ppo, write_experiment
from workbench.experiment.resolve import load_and_resolve
from workbench.trial.config import algorithm_config


def test_a_built_trial_has_the_small_network_and_one_torch_thread(tmp_path: Path) -> None:
    data = tiny_ppo(
        tmp_path,
        training={"train_batch_size_per_learner": 256},
        resources={"env_runners": {"count": 0, "envs_per_runner": 4}},
    )
    resolved = load_and_resolve(write_experiment(tmp_path, data), check_results=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    algo = algorithm_config(resolved.experiment, resolved.defaults).build_algo()
    try:
        assert torch.get_num_threads() == 1
        # The learner's module (the runners' is inference-only: no value network).
        weights = algo.learner_group.get_weights()["default_policy"]
        shapes = sorted(tuple(w.shape) for w in weights.values() if len(w.shape) == 2)
        # Separate policy and value networks, each 4 -> 64 -> 64, then the heads
        # (2 action logits, 1 value).
        assert shapes == sorted([(64, 4), (64, 64)] * 2 + [(2, 64), (1, 64)])
        result = algo.train()
        assert result["num_env_steps_sampled_lifetime"] >= 256
    finally:
        algo.stop()
        torch.set_num_threads(before)
