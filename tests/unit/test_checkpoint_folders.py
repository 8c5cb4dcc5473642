"""A trial's checkpoint folders are written once: a save never lands in a folder the trial
already has, though the driver's checkpoint counter lags (Tune's StorageContext, Ray
2.60), and a folder Tune never registered is pruned once it is older than every
checkpoint the trial keeps."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.fs
from ray.train._internal.storage import StorageContext
from ray.tune import Checkpoint

from workbench.trial.manifest import skip_written_checkpoints, written_checkpoint_indices
from workbench.tune_ext.checkpoints import CheckpointGuard


def _save(storage: StorageContext, tmp_path: Path, iteration: int) -> Path:
    """What Tune's Trainable.save does with a checkpoint the trainable wrote: the counter
    advanced, then the folder copied to the one it names."""
    local = tmp_path / f"local_{iteration}_{id(storage)}"
    local.mkdir()
    (local / "iteration.json").write_text(json.dumps(iteration))
    storage._update_checkpoint_index({})
    return Path(storage.persist_current_checkpoint(Checkpoint.from_directory(local)).path)


def _iteration(folder: Path) -> int:
    return int(json.loads((folder / "iteration.json").read_text()))


def _storages(tmp_path: Path) -> tuple[StorageContext, StorageContext]:
    """A trial process's storage two saves in (iterations 1 and 2), and the driver's copy
    that processed only the first: the one a restarted process is handed."""
    storage = StorageContext(
        storage_path=str(tmp_path / "results"), experiment_dir_name="exp", trial_dir_name="t"
    )
    _save(storage, tmp_path, 1)
    driver = copy.deepcopy(storage)
    second = _save(storage, tmp_path, 2)
    assert second.name == "checkpoint_000001" and _iteration(second) == 2
    return storage, driver


def test_a_lagging_counter_overwrites_the_trials_newest_checkpoint_in_tune(
    tmp_path: Path,
) -> None:
    """The fall: the next process saves iteration 3 over the folder holding iteration 2,
    the one PBT may have handed a clone."""
    _, driver = _storages(tmp_path)
    third = _save(driver, tmp_path, 3)
    assert third.name == "checkpoint_000001" and _iteration(third) == 3


def test_a_save_skips_every_folder_the_trial_already_has(tmp_path: Path) -> None:
    storage, driver = _storages(tmp_path)
    assert skip_written_checkpoints(driver) == 0
    third = _save(driver, tmp_path, 3)
    assert third.name == "checkpoint_000002" and _iteration(third) == 3
    second = Path(storage.trial_fs_path) / "checkpoint_000001"
    assert _iteration(second) == 2  # untouched
    # In step: nothing to skip, the counter left alone.
    assert skip_written_checkpoints(driver) is None
    assert driver.current_checkpoint_index == 2
    assert written_checkpoint_indices(driver.storage_filesystem, driver.trial_fs_path) == [
        0,
        1,
        2,
    ]


def test_a_new_trial_with_no_folder_yet_saves_its_first_checkpoint(tmp_path: Path) -> None:
    storage = StorageContext(
        storage_path=str(tmp_path / "results"), experiment_dir_name="exp", trial_dir_name="t"
    )
    assert skip_written_checkpoints(storage) is None
    assert _save(storage, tmp_path, 1).name == "checkpoint_000000"


def _trial(tmp_path: Path, registered: list[int], unregistered: list[int]) -> Any:
    folder = tmp_path / "trial"
    staging = tmp_path / "staging"
    staging.mkdir()
    results = []
    for index in sorted(registered + unregistered):
        path = folder / f"checkpoint_{index:06d}"
        path.mkdir(parents=True)
        (path / "state.pkl").write_text("x")
        if index in registered:
            checkpoint = Checkpoint(str(path), filesystem=pyarrow.fs.LocalFileSystem())
            results.append(SimpleNamespace(checkpoint=checkpoint, metrics={}))
    manager = SimpleNamespace(_checkpoint_results=results, _latest_checkpoint_result=results[-1])
    return SimpleNamespace(
        run_metadata=SimpleNamespace(checkpoint_manager=manager),
        checkpoint=results[-1].checkpoint,
        storage=SimpleNamespace(
            storage_filesystem=pyarrow.fs.LocalFileSystem(),
            trial_fs_path=str(folder),
            experiment_fs_path=str(tmp_path),  # no snapshot written yet
            experiment_driver_staging_path=str(staging),
        ),
    )


def _left(tmp_path: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in (tmp_path / "trial").iterdir())


def test_a_folder_tune_never_registered_is_pruned_with_the_old_ones(tmp_path: Path) -> None:
    """Folder 1: a save whose result the driver dropped, older than the 3 kept. Folder 5:
    a save still being written, newer than any Tune registered: left alone."""
    trial = _trial(tmp_path, registered=[0, 2, 3, 4], unregistered=[1, 5])
    guard = CheckpointGuard(keep=3, scheduler=SimpleNamespace(_trial_state={}))
    guard.on_checkpoint(0, [trial], trial, trial.checkpoint)
    assert _left(tmp_path) == [2, 3, 4, 5]
    assert sorted(guard.deleted) == [
        str(tmp_path / "trial" / f"checkpoint_{i:06d}") for i in (0, 1)
    ]


def test_an_unregistered_folder_among_the_kept_ones_is_left(tmp_path: Path) -> None:
    """Folder 2: a save whose result reaches the driver after a later one's (PBT waited on
    it itself); pruned, a killed driver's snapshot named it as the trial's restore point
    (the killed-driver drill, once)."""
    trial = _trial(tmp_path, registered=[0, 1, 3, 4], unregistered=[2])
    guard = CheckpointGuard(keep=3, scheduler=SimpleNamespace(_trial_state={}))
    guard.on_checkpoint(0, [trial], trial, trial.checkpoint)
    assert _left(tmp_path) == [1, 2, 3, 4]


def test_an_unregistered_folder_pbt_hands_a_clone_is_kept(tmp_path: Path) -> None:
    """A donor's save PBT waited for itself: Tune dropped its result, but the clone is
    still to restore it."""
    trial = _trial(tmp_path, registered=[0, 2, 3, 4], unregistered=[1])
    handed = Checkpoint(str(tmp_path / "trial" / "checkpoint_000001"))
    scheduler = SimpleNamespace(_trial_state={"donor": SimpleNamespace(last_checkpoint=handed)})
    guard = CheckpointGuard(keep=3, scheduler=scheduler)
    guard.on_checkpoint(0, [trial], trial, trial.checkpoint)
    assert _left(tmp_path) == [1, 2, 3, 4]
    assert guard.deleted == [str(tmp_path / "trial" / "checkpoint_000000")]
