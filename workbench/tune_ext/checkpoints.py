"""Checkpoint retention that never deletes a checkpoint someone still needs.

Tune's ``CheckpointConfig(num_to_keep=K)`` deletes a trial's older checkpoints as
soon as it has K newer ones. Under PBT that includes the checkpoint a donor saved
for an exploit: the clone restores it seconds later, by which time a fast donor may
have written K more, and the clone fails ("Could not recover from checkpoint as it
does not exist on storage anymore"), again on every retry. So the workbench keeps
all checkpoints as far as Tune knows (num_to_keep=None) and prunes them itself after
each checkpoint: a trial keeps its newest K, plus any checkpoint that a trial will
restore from or that PBT holds for a future exploit.

"Will restore from" covers a resume too: `workbench resume` restores each trial from the
checkpoint Tune's last experiment snapshot names, and that snapshot lags the live state
(Tune writes it after a trial checkpoint, and a background thread copies it into the
results folder). A clone exploited twice in quick succession no longer needs its first
donor checkpoint, but the snapshot a killed driver leaves may still name it; deleted, the
clone fails its restore on every retry. So a checkpoint also stays while the snapshot in
the results folder or the one being written (the driver's staging folder) names it.

This reads Tune's trial and PBT state (Ray 2.60 internals, pinned in pyproject).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow.fs
from ray.train._internal.storage import _delete_fs_path
from ray.tune import Callback
from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
from ray.tune.execution.tune_controller import TuneController
from ray.tune.utils.serialization import TuneFunctionDecoder

from workbench.names import CHECKPOINT_FALLBACK_KEY, trial_name
from workbench.trial.manifest import checkpoint_index, written_checkpoint_indices
from workbench.tune_ext import state_sync

logger = logging.getLogger(__name__)


class _Unreadable(Exception):
    """An experiment snapshot could not be read: nothing is deleted this time."""


def _path_of(item: Any) -> str | None:
    """The storage path of a Checkpoint or a _TrainingResult (None if pending or absent)."""
    checkpoint = getattr(item, "checkpoint", item)
    path = getattr(checkpoint, "path", None)
    return os.path.normpath(path) if isinstance(path, str) else None


def _restores(runtime_json: str) -> str | None:
    """The checkpoint a trial's runtime state (one entry of a snapshot's trial data) has it
    restore."""
    runtime = json.loads(runtime_json, cls=TuneFunctionDecoder, allow_cloudpickle=True)
    manager = runtime.get("checkpoint_manager")
    return _path_of(getattr(manager, "_latest_checkpoint_result", None))


# A text's key among the versions and trial states this driver has read.
_Key = tuple[int, int]


def _digest(data: str | bytes) -> _Key:
    """Python's own hash of the text (64-bit SipHash, keyed per process) and its length.
    The keys never leave this process, and it hashes 4-5 times faster than hashlib's
    blake2b, which took 14% of the driver's main thread at 16 trials
    (docs/benchmarks/population-scale.md, the driver's snapshot reads)."""
    return hash(data), len(data)


# Snapshot versions whose trials' states are remembered: the staging file's last few and
# the results folder's copy, which lags it by a sync or two.
_VERSIONS_KEPT = 4


class _Snapshots:
    """The checkpoints named by the experiment snapshots a resume could start from: the
    newest in the results folder and the one in the driver's staging folder, on its way
    there. A file is read again only when it changes, a copy of a version already read
    (the results folder's, synced from staging) is not parsed again, and within a new
    version only the trials whose state changed are decoded: Tune keeps a trial's state
    JSON until its next result and the snapshot is written after trial checkpoints,
    so most trials of a large population are the same text as in the last read (each a
    few hundred KB: its checkpoint manager, cloudpickled, and Tune's metric statistics)."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[tuple[Any, int], set[str]]] = {}
        # The versions read last (a file's digest -> what it names), newest last.
        self._versions: dict[_Key, set[str]] = {}
        # A trial state's digest -> the checkpoint it restores, for the trials of the
        # versions read last.
        self._decoded: dict[_Key, dict[_Key, str | None]] = {}

    def _restored_by(self, text: bytes, trial_data: list[Any] | None = None) -> set[str]:
        """What the snapshot ``text`` names; ``trial_data``: its trials' states where the
        caller has them (this driver wrote the file), else parsed from ``text``."""
        version = _digest(text)
        if version in self._versions:
            return self._versions[version]
        known: dict[_Key, str | None] = {}
        for decoded in self._decoded.values():
            known.update(decoded)
        now: dict[_Key, str | None] = {}
        if trial_data is None:
            trial_data = json.loads(text)["trial_data"]
        for _trial_json, runtime_json in trial_data:
            key = _digest(runtime_json)
            now[key] = known[key] if key in known else _restores(runtime_json)
        named = {path for path in now.values() if path}
        self._versions[version] = named
        self._decoded[version] = now
        for old in list(self._versions)[:-_VERSIONS_KEPT]:
            del self._versions[old], self._decoded[old]
        return named

    def named(self, storage: Any) -> set[str]:
        paths: set[str] = set()
        staging = Path(storage.experiment_driver_staging_path)
        if staging.is_dir():  # first: the results folder's copy is usually of this one
            pattern = TuneController.CKPT_FILE_TMPL.format("*")
            local = pyarrow.fs.LocalFileSystem()
            for name in fnmatch.filter(os.listdir(staging), pattern):
                paths |= self._named_by(local, str(staging / name))
        fs = storage.storage_filesystem
        newest = _find_newest_experiment_checkpoint(storage.experiment_fs_path, fs=fs)
        if newest is not None:
            paths |= self._named_by(fs, newest)
        return paths

    def _named_by(self, fs: Any, path: str) -> set[str]:
        info = fs.get_file_info(path)
        if info.type != pyarrow.fs.FileType.File:
            return set()
        stamp = (info.mtime_ns, info.size)
        cached = self._read.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        with fs.open_input_stream(path) as f:
            text = f.readall()
        written = state_sync.WRITTEN.get(path)
        mine = written[1] if written is not None and written[0] == stamp else None
        named = self._restored_by(text, mine)
        self._read[path] = (stamp, named)
        return named


class CheckpointGuard(Callback):  # type: ignore[misc]
    def __init__(self, keep: int, scheduler: Any = None) -> None:
        self.keep = keep
        self.scheduler = scheduler
        self.deleted: list[str] = []
        self._snapshots = _Snapshots()

    def in_snapshots(self, trial: Any) -> set[str]:
        """Checkpoints a resume would restore (see the module's docstring). _Unreadable
        when a snapshot cannot be read: then nothing is deleted this time."""
        storage = getattr(trial, "storage", None)
        if storage is None:
            return set()
        try:
            return self._snapshots.named(storage)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
            logger.warning("kept old checkpoints: the experiment snapshot is unreadable (%s)", err)
            raise _Unreadable from err

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
        try:
            protected |= self.in_snapshots(trial)
        except _Unreadable:
            return
        for orphan in unregistered_checkpoints(trial, results, self.keep):
            if orphan not in protected:
                self._delete(trial.storage.storage_filesystem, orphan)
        kept = []
        for position, result in enumerate(results):
            path = _path_of(result)
            newest = position >= len(results) - self.keep
            if newest or path is None or path in protected:
                kept.append(result)
                continue
            if not self._delete(result.checkpoint.filesystem, result.checkpoint.path):
                kept.append(result)  # keep bookkeeping honest, try again next time
        manager._checkpoint_results = kept

    def _delete(self, filesystem: Any, path: str) -> bool:
        """Deletes a checkpoint folder; False when it is still there."""
        try:
            _delete_fs_path(fs=filesystem, fs_path=path)
            self.deleted.append(os.path.normpath(path))
        except FileNotFoundError:
            pass
        except OSError as err:
            logger.warning("could not delete checkpoint %s: %s", path, err)
            return False
        return True


def unregistered_checkpoints(trial: Any, results: list[Any], keep: int) -> list[str]:
    """The trial's checkpoint folders that Tune has not registered and that are older
    than every one of the ``keep`` it registered last: saves whose results the driver
    dropped when the trial was paused or cloned over while saving
    (workbench.trial.manifest.skip_written_checkpoints). Tune does not know them, so it
    would never prune them. A newer one may be a save whose result is still on its way:
    a save's result can reach the driver after a later one's (PBT waits on the save it
    asked for itself), and pruned then, a killed driver's snapshot named it as the
    trial's restore point. The folder a donor saved that way can still be the one PBT
    hands a clone (``in_use`` keeps it while it is)."""
    storage = getattr(trial, "storage", None)
    filesystem = getattr(storage, "storage_filesystem", None)
    trial_path = getattr(storage, "trial_fs_path", None)
    if filesystem is None or not isinstance(trial_path, str) or len(results) <= keep:
        return []
    folder = os.path.normpath(trial_path)
    registered = {_path_of(result) for result in results}
    kept = [
        index
        for path in (_path_of(result) for result in results[-keep:])
        if path is not None and os.path.dirname(path) == folder
        for index in [checkpoint_index(Path(path))]
        if index is not None
    ]
    if len(kept) < keep:
        return []
    paths = (
        os.path.join(folder, f"checkpoint_{index:06d}")
        for index in written_checkpoint_indices(filesystem, trial_path)
        if index < min(kept)
    )
    return [path for path in paths if path not in registered]
