"""CheckpointGuard: prune old checkpoints, never one that a trial or PBT still needs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.fs
from ray.tune import Checkpoint

from workbench.run.checkpoints import CheckpointGuard


def _result(path: Path) -> Any:
    path.mkdir(parents=True)
    (path / "state.pkl").write_text("x")
    return SimpleNamespace(
        checkpoint=Checkpoint(str(path), filesystem=pyarrow.fs.LocalFileSystem()), metrics={}
    )


def _trial(tmp_path: Path, name: str, count: int) -> Any:
    results = [_result(tmp_path / name / f"checkpoint_{i:06d}") for i in range(count)]
    manager = SimpleNamespace(_checkpoint_results=list(results), _latest_checkpoint_result=None)
    trial = SimpleNamespace(run_metadata=SimpleNamespace(checkpoint_manager=manager))
    trial.checkpoint = results[-1].checkpoint
    manager._latest_checkpoint_result = results[-1]
    return trial


def test_keeps_the_newest_and_deletes_the_rest(tmp_path: Path) -> None:
    trial = _trial(tmp_path, "a", 6)
    guard = CheckpointGuard(keep=3)
    guard.on_checkpoint(0, [trial], trial, trial.checkpoint)
    left = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert left == ["checkpoint_000003", "checkpoint_000004", "checkpoint_000005"]
    assert len(trial.run_metadata.checkpoint_manager._checkpoint_results) == 3


def test_spares_a_donor_checkpoint_pbt_holds_and_one_a_clone_restores(tmp_path: Path) -> None:
    donor = _trial(tmp_path, "donor", 6)
    clone = _trial(tmp_path, "clone", 1)
    held_by_pbt = donor.run_metadata.checkpoint_manager._checkpoint_results[1]
    restored_by_clone = donor.run_metadata.checkpoint_manager._checkpoint_results[0]
    # The clone was paused to restore from the donor's checkpoint 0 (PBT's exploit).
    clone.checkpoint = restored_by_clone.checkpoint
    scheduler = SimpleNamespace(
        _trial_state={"donor": SimpleNamespace(last_checkpoint=held_by_pbt)}
    )
    guard = CheckpointGuard(keep=3, scheduler=scheduler)
    guard.on_checkpoint(0, [donor, clone], donor, donor.checkpoint)
    left = sorted(p.name for p in (tmp_path / "donor").iterdir())
    assert left == [f"checkpoint_{i:06d}" for i in (0, 1, 3, 4, 5)]
    assert guard.deleted == [str(tmp_path / "donor" / "checkpoint_000002")]
