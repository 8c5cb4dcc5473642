"""The fast env runner inside a built algorithm on a local Ray: the learner gets the same
batch from it as from RLlib's runner, and training with it gives the same numbers
(sampling alone: tests/unit/test_fast_runner.py)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import numpy as np
import pytest
import ray
import torch

from tests.support.env_runners import runner_config
from workbench.trial.callbacks import WorkbenchCallbacks
from workbench.trial.fast_runner import FastEnvRunner
from workbench.trial.score import pop_returns


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One CPU, not the tier's two: these algorithms sample and learn in the driver."""
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_the_learner_gets_the_same_batch_advantages_included(local_ray: None) -> None:
    from ray.rllib.core.learner.training_data import TrainingData

    algo = runner_config("sim_ext/CartPole-v1", 8).build_algo()
    try:
        rllib = algo.env_runner
        fast = FastEnvRunner(config=algo.config)
        fast.module.set_state(rllib.module.get_state())
        learner = algo.learner_group._learner
        batches = []
        for runner in (rllib, fast):
            torch.manual_seed(0)
            episodes = runner.sample(num_timesteps=300, explore=True)
            batch = learner._make_batch_if_necessary(TrainingData(episodes=copy.deepcopy(episodes)))
            batches.append(batch.policy_batches["default_policy"])
        expected, got = batches
        assert set(expected.keys()) == set(got.keys())
        assert {"advantages", "value_targets", "action_logp"} <= set(expected.keys())
        for key in expected:
            np.testing.assert_allclose(
                np.asarray(got[key]), np.asarray(expected[key]), rtol=1e-5, atol=1e-6
            )
    finally:
        algo.stop()


def test_training_with_it_is_training_with_rllibs_runner(local_ray: None) -> None:
    """Not 'about as well': the same numbers, iteration for iteration (seeded)."""
    from workbench.trial.fast_runner import FastEnvRunner as Fast

    curves = []
    for fast in (False, True):
        config = (
            runner_config("sim_ext/CartPole-v1", 8, seed=3)
            .training(train_batch_size_per_learner=512, minibatch_size=128, num_epochs=2)
            .callbacks(WorkbenchCallbacks)  # the episodes' returns, for the score
        )
        if fast:
            config.env_runners(env_runner_cls=Fast)
        algo = config.build_algo()
        try:
            torch.manual_seed(0)
            curve = []
            for _ in range(4):
                result = algo.train()
                returns = pop_returns(result)
                # RLlib's per-iteration mean is the mean of the episodes that ended in it.
                assert len(returns) == result["env_runners"]["num_episodes"] > 0
                assert np.mean(returns) == pytest.approx(
                    result["env_runners"]["episode_return_mean"], rel=1e-5
                )
                curve.append(
                    (
                        result["num_env_steps_sampled_lifetime"],
                        result["env_runners"].get("episode_return_mean"),
                        result["learners"]["default_policy"]["total_loss"],
                        returns,
                    )
                )
            curves.append(curve)
        finally:
            algo.stop()
    rllib, fast_curve = curves
    assert [c[:2] for c in fast_curve] == [c[:2] for c in rllib]
    # The score's input: the same episodes' returns from either runner.
    assert [c[3] for c in fast_curve] == [c[3] for c in rllib]
    for (_, _, loss_fast, _), (_, _, loss_rllib, _) in zip(fast_curve, rllib, strict=True):
        assert float(loss_fast) == pytest.approx(float(loss_rllib), rel=1e-4)


def test_remote_runners_send_the_episodes_returns_too(local_ray: None) -> None:
    config = (
        runner_config("sim_ext/CartPole-v1", 8, seed=3)
        .env_runners(num_env_runners=1, env_runner_cls=FastEnvRunner)
        .training(train_batch_size_per_learner=512, minibatch_size=128, num_epochs=1)
        .callbacks(WorkbenchCallbacks)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    returns = pop_returns(result)
    assert len(returns) == result["env_runners"]["num_episodes"] > 0
    assert np.mean(returns) == pytest.approx(result["env_runners"]["episode_return_mean"])
