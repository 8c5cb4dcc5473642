"""`env.normalize_observations`: a trial trains behind RLlib's MeanStdFilter, and its
policy acts on the same normalised observations everywhere else: the statistics are in
its checkpoint's manifest, `workbench eval` and the trial's own evaluation apply them and
agree, the exported policy applies them, and a restore (a resume, a PBT exploit) brings
the checkpoint's statistics back into the runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.support.configs import config_of_file
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.cli import main
from workbench.experiment.resolve import load_and_resolve
from workbench.names import EVAL_RETURN_METRIC
from workbench.policy.checkpoint import load_module, read_checkpoint
from workbench.policy.evaluate import evaluate_checkpoint, policy_module
from workbench.policy.export import load_exported, sample_observations
from workbench.trial.config import build_config
from workbench.trial.manifest import MANIFEST_FILE
from workbench.trial.observation_filter import Normalize, find_filter, runner_stats
from workbench.trial.score import ScoreSettings, evaluate_module
from workbench.trial.trainable import seeded_trainable

ENV = "sim_ext/MountainCarContinuous-v0"  # position ~-0.5, velocity ~0.01: scales apart


def _trainable(tmp_path: Path) -> Any:
    data = tiny_ppo(
        tmp_path,
        env={"id": ENV, "normalize_observations": True},
        training={"train_batch_size_per_learner": 256, "minibatch_size": 128, "num_epochs": 1},
        resources={"env_runners": {"envs_per_runner": 4}},
    )
    resolved = load_and_resolve(write_experiment(tmp_path, data))
    config = build_config(resolved.experiment, resolved.defaults)
    return seeded_trainable(config.algo_class)(config=config)


def test_a_normalising_trials_policy_acts_the_same_in_and_out_of_training(
    local_ray: None, tmp_path: Path
) -> None:
    trainable = _trainable(tmp_path)
    try:
        for _ in range(2):
            trainable.train()
        stats = runner_stats(trainable.env_runner)
        assert stats is not None and stats.count >= 512  # every observation it sampled
        assert abs(stats.mean[0]) > 0.1 and stats.std[1] < 0.1  # what it normalises
        saved = Path(trainable.save(str(tmp_path / "ckpt")).checkpoint.path)

        # The checkpoint says how its policy sees observations, as plain numbers.
        manifest = json.loads((saved / MANIFEST_FILE).read_text())
        assert manifest["policy"]["observation_filter"] == stats.to_json()
        checkpoint = read_checkpoint(saved)
        assert checkpoint.observation_filter == stats

        # The policy from the checkpoint acts on what RLlib's connector hands the module.
        connector = find_filter(trainable.env_runner)
        assert connector is not None
        observations = sample_observations(ENV, {}, n=64, seed=3)
        filtered = np.stack(
            [connector._filters[None](o, update=False) for o in observations]  # RLlib's own
        )
        with torch.no_grad():
            ours_in = Normalize(stats)(torch.from_numpy(observations)).numpy()
        np.testing.assert_array_equal(ours_in, filtered)
        module = load_module(checkpoint)
        policy = policy_module(module, checkpoint)
        with torch.no_grad():
            ours = policy(torch.from_numpy(observations))
            plain = module.forward_inference({"obs": torch.from_numpy(filtered)})
        mean = plain["action_dist_inputs"][:, :1]  # a Gaussian's mean, then its log std
        low, high = -1.0, 1.0  # the env's action bounds: unsquash of the mean, clipped
        expected = torch.clamp(low + (mean + 1.0) * (high - low) / 2.0, low, high)
        torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
        assert connector._filters[None].running_stats.num_pushes == stats.count  # not updated

        # `workbench eval` of the checkpoint and the trial's own evaluation agree.
        settings = ScoreSettings(eval_episodes=3, eval_seed=5)
        in_trial = evaluate_module(
            trainable.get_module(),
            env_id=ENV,
            env_config={},
            normalize_actions=True,
            clip_actions=False,
            settings=settings,
            observation_filter=stats,
        )
        from_checkpoint = evaluate_checkpoint(checkpoint, episodes=3, seed=5)
        assert in_trial[EVAL_RETURN_METRIC] == pytest.approx(from_checkpoint.stats()["return_mean"])

        # The exported policy carries the statistics.
        out = tmp_path / "exported"
        assert main(["export-policy", str(saved), "--no-log", "-o", str(out)]) == 0
        with torch.no_grad():
            exported = load_exported(out / "policy.pt2")(torch.from_numpy(observations))
        torch.testing.assert_close(exported, ours, rtol=0, atol=1e-6)

        trainable.train()  # the runner's statistics move on
        assert runner_stats(trainable.env_runner) != stats
    finally:
        trainable.stop()

    # A restore (a resume, a PBT exploit) puts the checkpoint's statistics back.
    again = _trainable(tmp_path)
    try:
        again.restore(str(saved))
        assert runner_stats(again.env_runner) == stats
    finally:
        again.stop()


def test_a_trial_with_remote_runners_checkpoints_their_merged_statistics(
    local_ray: None, tmp_path: Path
) -> None:
    # The runners normalise in their own processes; RLlib merges their statistics into
    # the trial's own runner each iteration, and that is what the checkpoint must say.
    data = tiny_ppo(
        tmp_path,
        env={"id": ENV, "normalize_observations": True},
        training={"train_batch_size_per_learner": 256, "minibatch_size": 128, "num_epochs": 1},
        resources={
            "cpus_main": 0.5,
            "cpus_per_learner": 0.5,
            "env_runners": {"count": 1, "envs_per_runner": 4, "cpus_each": 0.5},
        },
    )
    config = config_of_file(write_experiment(tmp_path, data))
    trainable = seeded_trainable(config.algo_class)(config=config)
    try:
        trainable.train()
        trainable.train()
        stats = runner_stats(trainable)
        assert stats is not None and stats.count >= 512  # sampled remotely, merged here
        saved = Path(trainable.save(str(tmp_path / "ckpt")).checkpoint.path)
        assert read_checkpoint(saved).observation_filter == stats
    finally:
        trainable.stop()
