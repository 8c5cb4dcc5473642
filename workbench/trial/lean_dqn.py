"""A DQN learner for small networks on CPU: RLlib's DQN, without its per-transition Python.

DQN calls ``Learner.update`` once per minibatch, on transitions its replay buffer hands
over as one-step episodes (the n-step return already folded in). RLlib 2.60 turns those
episodes into a train batch with its learner connector pipeline, seven connectors that
each walk every episode through ``InfiniteLookbackBuffer`` getters: about three
quarters of an update's time on the 64x64 networks (``benchmarks/learner_overhead.py``
``--dqn``, docs/benchmarks/learner-overhead.md). Then it checks every gradient tensor for
NaN with a Python ``all()`` each and steps a for-loop Adam.

``LeanDQNTorchLearner`` keeps RLlib's DQN: its RLModule, loss (``compute_loss_for_module``
runs unchanged, TD errors for the prioritized buffer included), target-network updates,
metrics, optimizer state and checkpoints. It changes two things:

* where the pipeline is RLlib's default one and the episodes are the replay buffer's
  one-step transitions of a flat observation space, the batch is gathered in one pass
  over the episodes, stacked, and converted with RLlib's own ``convert_to_torch_tensor``
  (the same columns, dtypes and values as the pipeline's, which
  tests/unit/test_lean_dqn.py checks column by column); anything else goes through the
  pipeline;
* gradients are checked for NaN/inf once for all tensors and stepped with the fused Adam
  (``workbench.trial.lean_common.LeanAdam``), as the lean PPO learner does.

The pipeline's own timers (``learner_connector`` metrics) are not logged on the lean path:
it does not run.
"""

# RLlib types its batches and episodes loosely: inside the learner they are numpy/torch.
# mypy: disable-error-code="no-untyped-call,attr-defined,arg-type"
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.connectors.common.add_observations_from_episodes_to_batch import (
    AddObservationsFromEpisodesToBatch,
)
from ray.rllib.connectors.common.add_states_from_episodes_to_batch import (
    AddStatesFromEpisodesToBatch,
)
from ray.rllib.connectors.common.add_time_dim_to_batch_and_zero_pad import (
    AddTimeDimToBatchAndZeroPad,
)
from ray.rllib.connectors.common.batch_individual_items import BatchIndividualItems
from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.connectors.learner.add_columns_from_episodes_to_train_batch import (
    AddColumnsFromEpisodesToTrainBatch,
)
from ray.rllib.connectors.learner.add_next_observations_from_episodes_to_train_batch import (
    AddNextObservationsFromEpisodesToTrainBatch,
)
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.torch_utils import convert_to_torch_tensor

from workbench.trial.lean_common import LEAN_KEY, LeanAdam
from workbench.trial.notices import notice_once

# RLlib 2.60's learner pipeline for DQN with no custom connectors, in order.
DEFAULT_DQN_PIPELINE = (
    AddObservationsFromEpisodesToBatch,
    AddNextObservationsFromEpisodesToTrainBatch,
    AddColumnsFromEpisodesToTrainBatch,
    AddTimeDimToBatchAndZeroPad,
    AddStatesFromEpisodesToBatch,
    BatchIndividualItems,
    NumpyToTensor,
)


def transitions_batch(episodes: list[Any]) -> dict[str, np.ndarray] | None:
    """The columns RLlib's default DQN pipeline builds from one-step replay episodes, as
    arrays in episode order (stacked as RLlib's ``batch`` stacks them); None where an
    episode is not such a transition.

    Each item is read from its ``InfiniteLookbackBuffer`` directly (``data[lookback + t]``,
    a list or, once finalized, an array of a flat space), not through the episode's
    getters: the getters cost microseconds per call, a minibatch needs six per row."""
    if not episodes:
        return None
    first_keys = episodes[0].extra_model_outputs.keys()
    if Columns.STATE_IN in first_keys or Columns.STATE_OUT in first_keys:
        return None
    if not all(
        type(e) is SingleAgentEpisode and e.extra_model_outputs.keys() == first_keys
        for e in episodes
    ):
        return None
    observations = [e.observations for e in episodes]
    if any(len(b.data) - b.lookback != 2 for b in observations):
        return None  # not one step (two observations)
    # Column by column, in the pipeline's order; np.array stacks a list of same-shaped
    # items as RLlib's batching (np.stack) does, with the same dtype, in one C call.
    columns = {
        Columns.OBS: [b.data[b.lookback] for b in observations],
        Columns.NEXT_OBS: [b.data[b.lookback + 1] for b in observations],
        Columns.ACTIONS: [b.data[b.lookback] for b in (e.actions for e in episodes)],
        Columns.REWARDS: [b.data[b.lookback] for b in (e.rewards for e in episodes)],
        Columns.TERMINATEDS: [e.is_terminated for e in episodes],
        Columns.TRUNCATEDS: [e.is_truncated for e in episodes],
    }
    for key in first_keys:
        column = [e.extra_model_outputs[key] for e in episodes]
        columns[key] = [b.data[b.lookback] for b in column]
    return {name: np.array(items) for name, items in columns.items()}


class LeanDQNTorchLearner(LeanAdam, DQNTorchLearner):  # type: ignore[misc]
    """RLlib's DQN torch learner with a lean batch build and gradient step (see the
    module docstring)."""

    def lean_batch_unfit(self, training_data: Any) -> str | None:
        """Why this update's batch goes through RLlib's pipeline (None: the lean build)."""
        if self.config.learner_config_dict.get(LEAN_KEY, True) is False:
            return "the lean learner is switched off (learner_config_dict lean_learner: false)"
        if training_data.episodes is None or training_data.batch is not None:
            return "the update has no episodes, or a batch besides them"
        if len(self.module) != 1:
            return "several RLModules (multi-agent)"
        module = next(iter(self.module.values()))
        if module.is_stateful():
            return "a recurrent (stateful) RLModule"
        space = module.observation_space
        if not isinstance(space, gym.spaces.Box | gym.spaces.Discrete):
            return f"the observation space is {type(space).__name__}, not Box or Discrete"
        pipeline = self._learner_connector
        if pipeline is None or tuple(type(c) for c in pipeline.connectors) != (
            DEFAULT_DQN_PIPELINE
        ):
            return "the learner connector pipeline is not RLlib's default one"
        return None

    def _make_batch_if_necessary(self, training_data: Any) -> Any:
        """RLlib's batch from replay episodes, gathered in one pass where it can be."""
        unfit = self.lean_batch_unfit(training_data)
        columns = None if unfit else transitions_batch(training_data.episodes)
        if columns is None:
            if unfit is None:
                unfit = "the episodes are not one-step replay transitions"
            notice_once(f"lean DQN learner: RLlib's learner connectors run, because {unfit}")
            return super()._make_batch_if_necessary(training_data)
        module_id = next(iter(self.module.keys()))
        tensors = convert_to_torch_tensor(columns, device=self._device)
        return MultiAgentBatch(
            {module_id: SampleBatch(tensors)}, env_steps=len(training_data.episodes)
        )

    def apply_gradients(self, gradients_dict: Any) -> None:
        """RLlib's apply_gradients with one NaN/inf check for all tensors."""
        if self.config.learner_config_dict.get(LEAN_KEY, True) is False or not (
            self.lean_apply_gradients(gradients_dict)
        ):
            super().apply_gradients(gradients_dict)
