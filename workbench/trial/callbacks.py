"""RLlib callbacks the workbench installs in every trial (they run on the trial's actor)."""

from __future__ import annotations

import math
from typing import Any

import torch
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.learner.learner import Learner
from ray.tune.utils import flatten_dict

from workbench.trial import time_split
from workbench.trial.score import RETURNS_KEY, episode_returns


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


def set_torch_threads(threads: int) -> int:

    torch.set_num_threads(threads)
    return torch.get_num_threads()


def tracked_values(metrics: Any) -> dict[str, float]:
    """The timers and counters `time_split.iteration_split` needs from before an iteration,
    read from an Algorithm's MetricsLogger (empty in a new trial; a checkpoint's after a
    restore, since RLlib checkpoints its metrics)."""

    flat = {
        key: metrics.peek(tuple(key.split("/")), default=math.nan) for key in time_split.TRACKED
    }
    return time_split.snapshot(flat)


class WorkbenchCallbacks(RLlibCallback):
    """Fixes what Ray 2.60 gets wrong for population-based training, and adds the time
    split of every iteration to its result (``result["workbench"]``, see
    `workbench.trial.time_split`)."""

    def __init__(self) -> None:
        super().__init__()
        # The tracked timers (EMAs) and counters as they were before the next iteration.
        self._before: dict[str, float] = {}

    # torch intra-op threads in the trial's process and its CPU learners; None leaves
    # them to Ray, which sets OMP_NUM_THREADS to an actor's whole CPUs (at least one).
    torch_threads: int | None = None

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        if self.torch_threads is not None:
            set_torch_threads(self.torch_threads)
            learner_group = getattr(algorithm, "learner_group", None)
            if learner_group is not None and learner_group.is_remote:
                threads = self.torch_threads
                learner_group.foreach_learner(lambda _learner: set_torch_threads(threads))
        self._before = tracked_values(algorithm.metrics)

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        learner_group = getattr(algorithm, "learner_group", None)
        if learner_group is not None:
            learner_group.foreach_learner(reset_optimizer_lr)
        self._before = tracked_values(algorithm.metrics)

    def on_sample_end(
        self,
        *,
        env_runner: Any = None,
        metrics_logger: Any = None,
        samples: Any,
        **kwargs: Any,
    ) -> None:
        """Each episode that ended in this sample() call, its whole return (the score's
        input: `workbench.trial.score`), as an item series RLlib gathers from every
        runner into the iteration's result. Runs in the env runner, after the sample,
        once per call: no per-step work, so the fast runner keeps its loop."""
        if metrics_logger is None:
            return
        chunks = getattr(env_runner, "_ongoing_episodes_for_metrics", None) or {}
        for value in episode_returns(samples, chunks):
            metrics_logger.log_value(RETURNS_KEY, value, reduce="item_series")

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any], **kwargs: Any) -> None:
        flat = flatten_dict(
            {k: v for k, v in result.items() if k not in ("config", time_split.PREFIX)},
            delimiter="/",
        )
        facts = time_split.facts_from_config(algorithm.config)
        split = time_split.iteration_split(flat, self._before, facts)
        result[time_split.PREFIX] = split.metrics()
        self._before = {**self._before, **time_split.snapshot(flat)}


class OneTorchThreadCallbacks(WorkbenchCallbacks):
    """WorkbenchCallbacks with one torch thread per trial process (small-env defaults)."""

    torch_threads = 1


def callbacks_class(*, torch_threads: int | None) -> type[WorkbenchCallbacks]:
    """The callbacks class of a trial: a module-level class, so Tune can pickle configs."""
    if torch_threads is None:
        return WorkbenchCallbacks
    if torch_threads == 1:
        return OneTorchThreadCallbacks
    raise ValueError(f"no callbacks class for {torch_threads} torch threads")
