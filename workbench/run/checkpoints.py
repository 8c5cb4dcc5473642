"""Checkpoint retention that never deletes a checkpoint someone still needs.

Tune's ``CheckpointConfig(num_to_keep=K)`` deletes a trial's older checkpoints as
soon as it has K newer ones. Under PBT that includes the checkpoint a donor saved
for an exploit: the clone restores it seconds later, by which time a fast donor may
have written K more, and the clone fails ("Could not recover from checkpoint as it
does not exist on storage anymore"), again on every retry. So the workbench keeps
all checkpoints as far as Tune knows (num_to_keep=None) and prunes them itself after
each checkpoint: a trial keeps its newest K, plus any checkpoint that a trial will
restore from or that PBT holds for a future exploit.

This reads Tune's trial and PBT state (Ray 2.60 internals, pinned in pyproject).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from ray.train._internal.storage import _delete_fs_path
from ray.tune import Callback

from workbench.names import CHECKPOINT_FALLBACK_KEY, trial_name

logger = logging.getLogger(__name__)


def _path_of(item: Any) -> str | None:
    """The storage path of a Checkpoint or a _TrainingResult (None if pending or absent)."""
    checkpoint = getattr(item, "checkpoint", item)
    path = getattr(checkpoint, "path", None)
    return os.path.normpath(path) if isinstance(path, str) else None


class CheckpointGuard(Callback):  # type: ignore[misc]
    def __init__(self, keep: int, scheduler: Any = None) -> None:
        self.keep = keep
        self.scheduler = scheduler
        self.deleted: list[str] = []

    def in_use(self, trials: list[Any]) -> set[str]:
        """Checkpoints some trial restores from next, or PBT keeps for an exploit."""
        paths = set()
        for trial in trials:
            manager = trial.run_metadata.checkpoint_manager
            for item in (trial.checkpoint, getattr(manager, "_latest_checkpoint_result", None)):
                path = _path_of(item)
                if path:
                    paths.add(path)
        for state in getattr(self.scheduler, "_trial_state", {}).values():
            path = _path_of(getattr(state, "last_checkpoint", None))
            if path:
                paths.add(path)
        return paths

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        """Says on the console when a trial restored an older checkpoint than its newest
        (it was damaged: workbench.trial.manifest); the tracker tags its MLflow run."""
        note = result.get(CHECKPOINT_FALLBACK_KEY)
        if isinstance(note, str) and note:
            print(f"{trial_name(trial)}: {note}", file=sys.stderr, flush=True)

    def on_checkpoint(
        self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any
    ) -> None:

        manager = trial.run_metadata.checkpoint_manager
        results = list(manager._checkpoint_results)
        if len(results) <= self.keep:
            return
        protected = self.in_use(trials)
        kept = []
        for position, result in enumerate(results):
            path = _path_of(result)
            newest = position >= len(results) - self.keep
            if newest or path is None or path in protected:
                kept.append(result)
                continue
            try:
                _delete_fs_path(fs=result.checkpoint.filesystem, fs_path=result.checkpoint.path)
                self.deleted.append(path)
            except FileNotFoundError:
                pass
            except OSError as err:  # keep bookkeeping honest, try again next time
                logger.warning("could not delete checkpoint %s: %s", path, err)
                kept.append(result)
        manager._checkpoint_results = kept
