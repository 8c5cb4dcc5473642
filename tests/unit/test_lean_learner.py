"""The lean PPO learner (workbench.trial.lean_learner) against RLlib's own PPOTorchLearner:
the same minibatches, losses, weights and metrics step for step, checkpoints that cross
both ways, RLlib's path wherever the lean one does not apply, and the clip schedule.

Built without a Ray cluster: learners from the config and episodes from a local
SingleAgentEnvRunner on Gymnasium's CartPole (a second or two for the module)."""

# RLlib shuffles with the global numpy stream: the tests seed and draw from it as RLlib does.
# ruff: noqa: NPY002
from __future__ import annotations

import copy
import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator

from tests.support.learners import MODULE, comparable, flat, learner, max_difference, weights
from workbench.trial.clip_schedule import CLIP_SCHEDULE_KEY, CURRENT_CLIP_PARAM_KEY
from workbench.trial.lean_common import LEAN_KEY
from workbench.trial.lean_learner import LeanPPOTorchLearner, install_lean_weight_sync
from workbench.trial.minibatch_plan import minibatch_plan

BATCH, MINIBATCH, EPOCHS = 512, 128, 3


def ppo_config(grad_clip: float | None = None, **learners: Any) -> Any:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
        .rl_module(
            model_config={
                "fcnet_hiddens": [64, 64],
                "fcnet_activation": "tanh",
                "vf_share_layers": False,
            }
        )
        .training(
            train_batch_size_per_learner=BATCH,
            minibatch_size=MINIBATCH,
            num_epochs=EPOCHS,
            grad_clip=grad_clip,
        )
        .learners(**learners)
        .debugging(seed=0)
    )


@pytest.fixture(scope="module")
def episodes() -> list[Any]:
    """Two train batches of CartPole episodes (the second continues the first's)."""
    runner = SingleAgentEnvRunner(config=ppo_config())
    try:
        return [runner.sample(num_timesteps=BATCH), runner.sample(num_timesteps=BATCH)]
    finally:
        runner.stop()


def update(target: Any, batch: list[Any], seed: int, steps: int = BATCH) -> dict[str, Any]:
    """One iteration's update on a copy of the episodes (the connectors extend them in
    place), with the global numpy stream RLlib shuffles with seeded."""
    np.random.seed(seed)
    results = target.update(
        episodes=copy.deepcopy(batch),
        timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: steps},
        num_epochs=EPOCHS,
        minibatch_size=MINIBATCH,
        shuffle_batch_per_epoch=True,
    )
    return flat(results)


def test_the_minibatch_plan_is_rllibs_cyclic_iterator() -> None:
    # Batches shorter and longer than a minibatch, epochs ending mid-minibatch.
    for case in itertools.product((1, 7, 10, 16), (1, 3, 4, 10, 25), (1, 2, 3), (True, False)):
        assert lean_minibatches(*case) == rllib_minibatches(*case), case


def rllib_minibatches(n: int, size: int, epochs: int, shuffle: bool) -> list[list[int]]:
    rows = torch.arange(n)
    batch = MultiAgentBatch({MODULE: SampleBatch({"x": rows})}, env_steps=n)
    np.random.seed(5)
    rllib = [
        mb.policy_batches[MODULE]["x"].tolist()
        for mb in MiniBatchCyclicIterator(
            batch, num_epochs=epochs, minibatch_size=size, shuffle_batch_per_epoch=shuffle
        )
    ]
    return rllib


def lean_minibatches(n: int, size: int, epochs: int, shuffle: bool) -> list[list[int]]:
    np.random.seed(5)
    order, lean = torch.arange(n), []
    for pieces in minibatch_plan(n, size, epochs, shuffle):
        parts = []
        for piece in pieces:
            if piece is None:
                order = order[torch.from_numpy(np.random.permutation(n))]
            else:
                parts.append(order[piece[0] : piece[1]])
        lean.append(torch.cat(parts).tolist())
    return lean


@pytest.mark.parametrize("grad_clip", [None, 0.5])
def test_the_lean_update_is_rllibs_update_step_for_step(
    episodes: list[Any], grad_clip: float | None
) -> None:
    # torch's default Adam in both: the same operations, so the same bits; with gradient
    # clipping by global norm (SB3's max_grad_norm 0.5) too.
    rllib = learner(ppo_config(grad_clip))
    lean_class = type("ForLoopAdamLean", (LeanPPOTorchLearner,), {"adam_implementation": None})
    lean = learner(ppo_config(grad_clip, learner_class=lean_class), like=rllib)
    assert max_difference(weights(rllib), weights(lean)) == 0.0
    for step, batch in enumerate(episodes):  # two iterations: the KL coeff and Adam's state move
        ours = update(lean, batch, seed=step, steps=BATCH * (step + 1))
        theirs = update(rllib, batch, seed=step, steps=BATCH * (step + 1))
        assert max_difference(weights(rllib), weights(lean)) == 0.0, step
        ours, theirs = comparable(ours), comparable(theirs)
        assert ours.keys() == theirs.keys()
        for key in theirs:
            expected = pytest.approx(theirs[key], rel=1e-6, abs=1e-7, nan_ok=True)
            assert ours[key] == expected, (step, key)
    assert theirs[f"{MODULE}/total_loss"] != 0.0
    assert theirs["__all_modules__/num_module_steps_trained"] >= BATCH * EPOCHS


def test_fused_adam_stays_within_float_tolerance(episodes: list[Any]) -> None:
    rllib = learner(ppo_config())
    lean = learner(ppo_config(learner_class=LeanPPOTorchLearner), like=rllib)
    before = weights(rllib)
    for step, batch in enumerate(episodes):
        ours = update(lean, batch, seed=step)
        theirs = update(rllib, batch, seed=step)
        assert ours[f"{MODULE}/total_loss"] == pytest.approx(
            theirs[f"{MODULE}/total_loss"], rel=1e-4
        )
    moved = max_difference(before, weights(rllib))
    assert moved > 1e-3  # the updates did something
    assert max_difference(weights(rllib), weights(lean)) < 1e-5
    group = lean.get_optimizer(MODULE).param_groups[0]
    assert group["fused"] is True


def test_checkpoints_cross_between_the_lean_learner_and_rllibs(episodes: list[Any]) -> None:
    lean = learner(ppo_config(learner_class=LeanPPOTorchLearner))
    update(lean, episodes[0], seed=0)
    state = lean.get_state()
    saved_groups = state["optimizer"][f"{MODULE}_default_optimizer"]["state"]["param_groups"]
    assert all(g["fused"] is None and g["foreach"] is None for g in saved_groups)
    # RLlib's learner restores it and trains on as a lean learner restored from it does
    # (a restore, either way, starts from what the state holds: weights and Adam's
    # moments, not the adapted KL coefficient, which RLlib's learner state leaves out).
    rllib = learner(ppo_config(), like=lean)
    restored = learner(ppo_config(learner_class=LeanPPOTorchLearner), like=lean)
    assert isinstance(rllib, PPOTorchLearner) and not isinstance(rllib, LeanPPOTorchLearner)
    assert rllib.get_optimizer(MODULE).param_groups[0]["fused"] is None
    assert rllib.get_optimizer(MODULE).state  # Adam's moments came with it
    update(rllib, episodes[1], seed=1)
    update(restored, episodes[1], seed=1)
    assert max_difference(weights(rllib), weights(restored)) < 1e-5
    # ... and the other way: the lean learner restores RLlib's, with its fused Adam.
    again = learner(ppo_config(learner_class=LeanPPOTorchLearner), like=rllib)
    assert again.get_optimizer(MODULE).param_groups[0]["fused"] is True
    assert max_difference(weights(again), weights(rllib)) == 0.0


class _CustomLoss(LeanPPOTorchLearner):
    calls = 0

    def compute_loss_for_module(self, **kwargs: Any) -> Any:
        type(self).calls += 1
        return super().compute_loss_for_module(**kwargs)


def test_a_subclass_with_its_own_loss_gets_rllibs_update(episodes: list[Any]) -> None:
    custom = learner(ppo_config(learner_class=_CustomLoss))
    update(custom, episodes[0], seed=0)
    assert _CustomLoss.calls >= BATCH * EPOCHS // MINIBATCH  # once per minibatch


def test_the_lean_path_switches_off_from_the_config(episodes: list[Any]) -> None:
    off = learner(
        ppo_config(learner_class=LeanPPOTorchLearner, learner_config_dict={LEAN_KEY: False})
    )
    reason = off.lean_unfit(
        type("Data", (), {"episodes": episodes[0], "episodes_refs": None})(),
        {"minibatch_size": MINIBATCH},
    )
    assert reason is not None and "switched off" in reason
    calls: list[int] = []
    original = PPOTorchLearner.compute_loss_for_module

    def counted(self: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, **kwargs)

    PPOTorchLearner.compute_loss_for_module = counted  # type: ignore[method-assign]
    try:
        update(off, episodes[0], seed=0)
    finally:
        PPOTorchLearner.compute_loss_for_module = original  # type: ignore[method-assign]
    assert calls  # RLlib's loss ran


def test_clip_param_follows_its_schedule(episodes: list[Any]) -> None:
    schedule = [[0, 0.3], [1000, 0.1]]
    lean = learner(
        ppo_config(
            learner_class=LeanPPOTorchLearner, learner_config_dict={CLIP_SCHEDULE_KEY: schedule}
        )
    )
    config = lean.config.get_config_for_module(MODULE)
    assert lean.clip_param_for(MODULE, config) == pytest.approx(0.3)
    metrics = update(lean, episodes[0], seed=0, steps=500)
    assert lean.clip_param_for(MODULE, config) == pytest.approx(0.2)
    assert metrics[f"{MODULE}/{CURRENT_CLIP_PARAM_KEY}"] == pytest.approx(0.2)
    update(lean, episodes[1], seed=1, steps=5000)
    assert lean.clip_param_for(MODULE, config) == pytest.approx(0.1)
    # Without a schedule the loss reads the config's clip_param, as RLlib's does.
    plain = learner(ppo_config(learner_class=LeanPPOTorchLearner))
    assert plain.clip_param_for(MODULE, config) == pytest.approx(config.clip_param)


def test_rllibs_own_loop_reads_the_clip_schedule_too(episodes: list[Any]) -> None:
    # The lean loop switched off runs RLlib's update and loss, with the scheduled clip.
    lean_class = type("ForLoopAdamLean", (LeanPPOTorchLearner,), {"adam_implementation": None})
    schedule = {CLIP_SCHEDULE_KEY: [[0, 0.02], [10**6, 0.02]]}  # far from clip_param 0.3
    lean = learner(ppo_config(learner_class=lean_class, learner_config_dict=schedule))
    rllib_loop = learner(
        ppo_config(learner_class=lean_class, learner_config_dict={**schedule, LEAN_KEY: False}),
        like=lean,
    )
    unscheduled = learner(ppo_config(learner_class=lean_class), like=lean)
    for target in (lean, rllib_loop, unscheduled):
        update(target, episodes[0], seed=0)
    assert max_difference(weights(lean), weights(rllib_loop)) == 0.0
    assert max_difference(weights(lean), weights(unscheduled)) > 1e-6


def test_weight_sync_to_the_local_runner_copies_what_rllib_would_send(
    episodes: list[Any],
) -> None:
    lean = learner(ppo_config(learner_class=LeanPPOTorchLearner))
    runner = SingleAgentEnvRunner(config=ppo_config())
    try:
        before = {k: v.clone() for k, v in runner.module.state_dict().items()}
        update(lean, episodes[0], seed=0)
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
        group.sync_weights(from_worker_or_learner_group=learner_group, inference_only=True)
        assert not rllib_calls
        # What RLlib's set_state loads from the learner's inference-only state.
        # (keys it does not send would stay as they were).
        sent = lean.module[MODULE].get_state(inference_only=True)
        synced = runner.module.state_dict()
        for key, value in synced.items():
            expected = torch.as_tensor(sent[key]) if key in sent else before[key]
            assert torch.equal(value, expected), key
        assert any(not torch.equal(before[k], synced[k]) for k in sent if k in synced)
        assert runner._weights_seq_no == lean._weights_seq_no == 1
        # Global vars, or another source: RLlib's own sync.
        group.sync_weights(from_worker_or_learner_group=learner_group, global_vars={"t": 1})
        assert len(rllib_calls) == 1
    finally:
        runner.stop()
