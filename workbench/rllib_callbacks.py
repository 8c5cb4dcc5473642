"""RLlib callbacks the workbench installs in every trial (they run on the trial's actor)."""

from __future__ import annotations

from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.learner.learner import Learner
from ray.tune.utils import flatten_dict

from workbench import diagnosis


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


def tracked_values(metrics: Any) -> dict[str, float]:
    """The timers and counters `diagnosis.iteration_split` needs from before an iteration,
    read from an Algorithm's MetricsLogger (empty in a new trial; a checkpoint's after a
    restore, since RLlib checkpoints its metrics)."""
    import math

    flat = {key: metrics.peek(tuple(key.split("/")), default=math.nan) for key in diagnosis.TRACKED}
    return diagnosis.snapshot(flat)


class WorkbenchCallbacks(RLlibCallback):
    """Fixes what Ray 2.60 gets wrong for population-based training, and adds the time
    split of every iteration to its result (``result["workbench"]``, see diagnosis.py)."""

    def __init__(self) -> None:
        super().__init__()
        # The tracked timers (EMAs) and counters as they were before the next iteration.
        self._before: dict[str, float] = {}

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        self._before = tracked_values(algorithm.metrics)

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        learner_group = getattr(algorithm, "learner_group", None)
        if learner_group is not None:
            learner_group.foreach_learner(reset_optimizer_lr)
        self._before = tracked_values(algorithm.metrics)

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any], **kwargs: Any) -> None:
        flat = flatten_dict(
            {k: v for k, v in result.items() if k not in ("config", diagnosis.PREFIX)},
            delimiter="/",
        )
        facts = diagnosis.facts_from_config(algorithm.config)
        split = diagnosis.iteration_split(flat, self._before, facts)
        result[diagnosis.PREFIX] = split.metrics()
        self._before = {**self._before, **diagnosis.snapshot(flat)}
