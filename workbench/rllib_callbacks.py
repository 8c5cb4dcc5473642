"""RLlib callbacks the workbench installs in every trial (they run on the trial's actor)."""

from __future__ import annotations

from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.learner.learner import Learner


def reset_optimizer_lr(learner: Learner) -> dict[str, float]:
    """Sets every optimizer's learning rate from the learner's own (current) config.

    PBT clones a donor: Tune builds a new Algorithm with the mutated config, then
    restores the donor's checkpoint into it, optimizer state included. Torch keeps
    ``lr`` inside the optimizer state, so the first update after an exploit would run
    with the donor's learning rate; RLlib's scheduler only corrects it after that
    update. This puts the new config's rate in place before any update.
    """
    applied = {}
    for name, optimizer in learner._named_optimizers.items():
        schedule = learner._optimizer_lr_schedules.get(optimizer)
        if schedule is None:
            continue
        lr = float(schedule.get_current_value())
        learner._set_optimizer_lr(optimizer, lr)  # the framework subclass sets it
        applied[name] = lr
    return applied


class WorkbenchCallbacks(RLlibCallback):
    """Fixes what Ray 2.60 gets wrong for population-based training."""

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        learner_group = getattr(algorithm, "learner_group", None)
        if learner_group is not None:
            learner_group.foreach_learner(reset_optimizer_lr)
