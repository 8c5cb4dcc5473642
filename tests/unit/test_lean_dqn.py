"""The lean DQN learner (workbench.trial.lean_dqn) against RLlib's own DQNTorchLearner: the
batch its one-pass build gives is the learner connector pipeline's, column by column; the
same replay samples give the same losses, TD errors, target-network updates and weights
step for step; checkpoints cross both ways; RLlib's pipeline runs wherever the lean build
does not apply; non-finite gradients are handled as RLlib handles them.

Built without a Ray cluster: learners from the config, transitions from a local
SingleAgentEnvRunner on Gymnasium's CartPole through RLlib's replay buffers."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

import workbench.trial.notices as notices
from tests.support.learners import MODULE, comparable, flat, learner, max_difference, weights
from workbench.trial.lean_common import LEAN_KEY
from workbench.trial.lean_dqn import LeanDQNTorchLearner, transitions_batch
from workbench.trial.lean_learner import install_lean_weight_sync

MINIBATCH = 64


def dqn_config(**learners: Any) -> Any:
    return (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
        .rl_module(
            model_config={
                "fcnet_hiddens": [64, 64],
                "fcnet_activation": "tanh",
                "head_fcnet_hiddens": [],
            }
        )
        .training(
            double_q=True,
            dueling=False,
            n_step=3,
            target_network_update_freq=200,
            lr=5e-3,  # large enough that a few updates move every weight
        )
        .learners(**learners)
        .debugging(seed=0)
    )


@pytest.fixture(scope="module")
def buffers() -> dict[str, Any]:
    """RLlib's prioritized and uniform replay buffers, each holding 1,200 CartPole steps
    (episodes that terminated and fragments cut at the sample's end)."""
    runner = SingleAgentEnvRunner(config=dqn_config())
    try:
        episodes = [runner.sample(num_timesteps=400, random_actions=True) for _ in range(3)]
    finally:
        runner.stop()
    prioritized = PrioritizedEpisodeReplayBuffer(capacity=10_000)
    uniform = EpisodeReplayBuffer(capacity=10_000)
    for chunk in episodes:
        prioritized.add(copy.deepcopy(chunk))
        uniform.add(copy.deepcopy(chunk))
    return {"prioritized": prioritized, "uniform": uniform}


def sample(buffer: Any, n_step: Any, seed: int, size: int = MINIBATCH) -> list[Any]:
    np.random.seed(seed)  # noqa: NPY002 (RLlib's buffers draw from the global stream)
    kwargs = {"beta": 0.4} if isinstance(buffer, PrioritizedEpisodeReplayBuffer) else {}
    drawn: list[Any] = buffer.sample(
        num_items=size, n_step=n_step, gamma=0.99, sample_episodes=True, **kwargs
    )
    return drawn


def rllib_batch(target: Any, episodes: list[Any]) -> Any:
    """The batch RLlib's own Learner builds (its learner connector pipeline)."""
    return DQNTorchLearner._make_batch_if_necessary(
        target, TrainingData(episodes=copy.deepcopy(episodes))
    )


def lean_batch(target: Any, episodes: list[Any]) -> Any:
    return target._make_batch_if_necessary(TrainingData(episodes=copy.deepcopy(episodes)))


def assert_same_batch(ours: Any, theirs: Any) -> None:
    assert ours.env_steps() == theirs.env_steps()
    assert ours.policy_batches.keys() == theirs.policy_batches.keys()
    for module_id, expected in theirs.policy_batches.items():
        got = ours.policy_batches[module_id]
        assert list(got.keys()) == list(expected.keys())
        for column, value in expected.items():
            assert isinstance(got[column], torch.Tensor), column
            assert got[column].dtype == value.dtype, column
            assert got[column].shape == value.shape, column
            assert torch.equal(got[column], value), column


@pytest.mark.parametrize("kind", ["prioritized", "uniform"])
@pytest.mark.parametrize("n_step", [1, 3, (1, 3)])
def test_the_lean_batch_is_the_pipelines_column_by_column(
    buffers: dict[str, Any], kind: str, n_step: Any
) -> None:
    lean = learner(dqn_config(learner_class=LeanDQNTorchLearner))
    for seed in range(3):
        episodes = sample(buffers[kind], n_step, seed)
        assert len(episodes) == MINIBATCH
        assert transitions_batch(episodes) is not None  # the lean build applies
        assert_same_batch(lean_batch(lean, episodes), rllib_batch(lean, episodes))
    # The samples held terminated transitions, whose columns the check above covered.
    drawn = [e for seed in range(20) for e in sample(buffers[kind], n_step, seed)]
    assert any(e.is_terminated for e in drawn)


def update(target: Any, episodes: list[Any], steps: int) -> dict[str, Any]:
    results = target.update(
        episodes=copy.deepcopy(episodes), timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: steps}
    )
    return flat(results)


def test_the_lean_update_is_rllibs_step_for_step(buffers: dict[str, Any]) -> None:
    # torch's default Adam in both: the same operations, so the same bits.
    rllib = learner(dqn_config())
    lean_class = type("ForLoopAdamLeanDQN", (LeanDQNTorchLearner,), {"adam_implementation": None})
    lean = learner(dqn_config(learner_class=lean_class), like=rllib)
    assert max_difference(weights(rllib), weights(lean)) == 0.0
    target_before = {k: v for k, v in weights(rllib).items() if "target" in k}
    assert target_before  # the module has target networks
    moves = 0
    for step in range(8):
        episodes = sample(buffers["prioritized"], 3, seed=100 + step)
        steps = 100 * (step + 1)  # the target network is updated every 200 steps
        ours = update(lean, episodes, steps)
        theirs = update(rllib, episodes, steps)
        assert max_difference(weights(rllib), weights(lean)) == 0.0, step
        # The TD errors the prioritized buffer is updated with.
        assert np.array_equal(ours[f"{MODULE}/td_error"], theirs[f"{MODULE}/td_error"]), step
        ours, theirs = comparable(ours), comparable(theirs)
        assert ours.keys() == theirs.keys()
        for key in theirs:
            expected = np.asarray(theirs[key], dtype=float)
            got = np.asarray(ours[key], dtype=float)
            assert np.allclose(got, expected, rtol=1e-6, atol=1e-7, equal_nan=True), (step, key)
        target_now = {k: v for k, v in weights(rllib).items() if "target" in k}
        moves += max_difference(target_now, target_before) > 0
        target_before = target_now
    assert moves == 4  # the target network was updated every 200 steps, in both alike
    assert theirs[f"{MODULE}/total_loss"] != 0.0


def test_fused_adam_stays_within_float_tolerance(buffers: dict[str, Any]) -> None:
    rllib = learner(dqn_config())
    lean = learner(dqn_config(learner_class=LeanDQNTorchLearner), like=rllib)
    before = weights(rllib)
    for step in range(5):
        episodes = sample(buffers["uniform"], 1, seed=step)
        ours = update(lean, episodes, 100 * (step + 1))
        theirs = update(rllib, episodes, 100 * (step + 1))
        assert ours[f"{MODULE}/total_loss"] == pytest.approx(
            theirs[f"{MODULE}/total_loss"], rel=1e-4
        )
    assert max_difference(before, weights(rllib)) > 1e-3  # the updates did something
    assert max_difference(weights(rllib), weights(lean)) < 1e-5
    assert lean.get_optimizer(MODULE).param_groups[0]["fused"] is True


def test_checkpoints_cross_between_the_lean_dqn_learner_and_rllibs(
    buffers: dict[str, Any],
) -> None:
    lean = learner(dqn_config(learner_class=LeanDQNTorchLearner))
    update(lean, sample(buffers["prioritized"], 3, seed=0), 100)
    state = lean.get_state()
    saved = state["optimizer"][f"{MODULE}_default_optimizer"]["state"]["param_groups"]
    assert all(g["fused"] is None and g["foreach"] is None for g in saved)
    rllib = learner(dqn_config(), like=lean)
    restored = learner(dqn_config(learner_class=LeanDQNTorchLearner), like=lean)
    assert type(rllib) is DQNTorchLearner
    assert rllib.get_optimizer(MODULE).state  # Adam's moments came with it
    episodes = sample(buffers["prioritized"], 3, seed=1)
    update(rllib, episodes, 200)
    update(restored, episodes, 200)
    assert max_difference(weights(rllib), weights(restored)) < 1e-5
    again = learner(dqn_config(learner_class=LeanDQNTorchLearner), like=rllib)
    assert again.get_optimizer(MODULE).param_groups[0]["fused"] is True
    assert max_difference(weights(again), weights(rllib)) == 0.0


class _Identity(ConnectorV2):
    """A user's learner connector that changes nothing."""

    def __call__(self, *, batch: Any, **_: Any) -> Any:
        return batch


def test_rllibs_pipeline_runs_where_the_lean_build_does_not_apply(
    buffers: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(notices, "_NOTICED", set())
    episodes = sample(buffers["uniform"], 1, seed=0)
    data = TrainingData(episodes=episodes)
    off = learner(
        dqn_config(learner_class=LeanDQNTorchLearner, learner_config_dict={LEAN_KEY: False})
    )
    assert "switched off" in str(off.lean_batch_unfit(data))
    # A user's learner connector in the pipeline: RLlib's pipeline builds the batch.
    custom = learner(dqn_config(learner_class=LeanDQNTorchLearner))
    assert custom.lean_batch_unfit(data) is None
    custom._learner_connector.append(_Identity())
    assert custom.lean_batch_unfit(data) == (
        "the learner connector pipeline is not RLlib's default one"
    )
    assert_same_batch(lean_batch(custom, episodes), rllib_batch(custom, episodes))
    assert "RLlib's learner connectors run" in capsys.readouterr().out
    # Episodes longer than one step are not replay transitions.
    whole = [e for e in buffers["uniform"].episodes if len(e) > 1][:2]
    assert whole and transitions_batch(whole) is None
    assert transitions_batch([]) is None


def test_non_finite_gradients_are_made_finite_as_rllib_does() -> None:
    rllib = learner(dqn_config())
    lean_class = type("ForLoopAdamLeanDQN", (LeanDQNTorchLearner,), {"adam_implementation": None})
    lean = learner(dqn_config(learner_class=lean_class), like=rllib)
    for target in (rllib, lean):
        grads = {}
        for i, (pid, param) in enumerate(target._params.items()):
            grad = torch.full_like(param, 0.01)
            if i == 0:
                grad.view(-1)[0] = float("nan")
                grad.view(-1)[1] = float("inf")
            grads[pid] = grad
        target.apply_gradients(grads)
    after = weights(lean)
    assert max_difference(weights(rllib), after) == 0.0
    assert all(bool(torch.isfinite(v).all()) for v in after.values())


def test_weight_sync_to_the_local_runner_copies_what_rllib_would_send(
    buffers: dict[str, Any],
) -> None:
    lean = learner(dqn_config(learner_class=LeanDQNTorchLearner))
    runner = SingleAgentEnvRunner(config=dqn_config())
    try:
        before = {k: v.clone() for k, v in runner.module.state_dict().items()}
        update(lean, sample(buffers["prioritized"], 3, seed=0), 100)
        rllib_calls: list[dict[str, Any]] = []
        group = SimpleNamespace(
            local_env_runner=runner,
            num_remote_workers=lambda: 0,
            sync_weights=lambda **kwargs: rllib_calls.append(kwargs),
        )
        learner_group = SimpleNamespace(is_local=True, _learner=lean)
        install_lean_weight_sync(
            SimpleNamespace(env_runner_group=group, learner_group=learner_group)
        )
        # As DQN's training step calls it: the modules it updated, inference-only.
        group.sync_weights(
            from_worker_or_learner_group=learner_group,
            policies={MODULE},
            global_vars=None,
            inference_only=True,
        )
        assert not rllib_calls
        # What RLlib's set_state loads from the learner's inference-only state (the
        # target networks are not sent; keys not sent stay as they were).
        sent = lean.module[MODULE].get_state(inference_only=True)
        assert not any("target" in key for key in sent)
        synced = runner.module.state_dict()
        for key, value in synced.items():
            expected = torch.as_tensor(sent[key]) if key in sent else before[key]
            assert torch.equal(value, expected), key
        assert any(not torch.equal(before[k], synced[k]) for k in sent if k in synced)
        assert runner._weights_seq_no == lean._weights_seq_no == 1
    finally:
        runner.stop()
