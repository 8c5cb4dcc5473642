"""The experiment snapshot a trial checkpoint forces comes at most `LAG_S` after the last
one (workbench.tune_ext.snapshot_pace), on Tune's own checkpoint manager."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

from workbench.tune_ext import snapshot_pace

LAG_S = 1.0


class _Trial:
    """What Tune's manager counts checkpoints by (a hashable trial)."""


class _Syncer:
    """The storage's syncer, as Tune's manager drives it (the copy to the results folder)."""

    def sync_up(self, local_dir: str, remote_dir: str) -> bool:
        return True  # a copy launched

    def wait(self) -> None:
        pass


def _manager(tmp_path: Path) -> _ExperimentCheckpointManager:
    # As the workbench sets it up: a snapshot forced by every trial checkpoint. The storage
    # is the part of Tune's that the manager reads (its own needs a running Ray).
    storage = SimpleNamespace(
        experiment_driver_staging_path=str(tmp_path / "staging"),
        experiment_fs_path=str(tmp_path / "results"),
        syncer=_Syncer(),
    )
    return _ExperimentCheckpointManager(
        storage=storage,  # type: ignore[arg-type]
        checkpoint_period="auto",
        sync_every_n_trial_checkpoints=1,
    )


class _Driver:
    """Tune's side: trial checkpoints registered with the manager, and the step's sync
    after each; ``saves`` holds, for each snapshot written, how many checkpoints it held."""

    def __init__(self, manager: _ExperimentCheckpointManager) -> None:
        self.manager = manager
        self.checkpoints = 0
        self.saves: list[int] = []

    def save(self) -> None:
        self.saves.append(self.checkpoints)

    def step(self, **forced: bool) -> None:
        self.manager.sync_up_experiment_state(save_fn=self.save, **forced)

    def burst(self, trials: int) -> None:
        """``trials`` checkpoints in a row, each followed by its step's sync."""
        for _ in range(trials):
            self.manager.on_trial_checkpoint(_Trial())  # type: ignore[arg-type]
            self.checkpoints += 1
            self.step()


def test_tune_alone_writes_a_snapshot_after_every_checkpoint(tmp_path: Path) -> None:
    driver = _Driver(_manager(tmp_path))
    driver.burst(5)
    assert driver.saves == [1, 2, 3, 4, 5]


def test_a_burst_of_checkpoints_costs_one_snapshot_within_the_bound(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    snapshot_pace.pace(manager, LAG_S)
    snapshot_pace.pace(manager, LAG_S)  # idempotent: one wrapper
    driver = _Driver(manager)
    started = time.monotonic()
    driver.burst(5)
    assert time.monotonic() - started < LAG_S, "the burst itself took longer than the bound"
    assert driver.saves == [1], "the first checkpoint's snapshot is written at once"

    # Tune's loop goes on stepping: nothing is written until the bound has passed ...
    driver.step()
    assert driver.saves == [1]
    time.sleep(LAG_S - (time.monotonic() - manager._last_save_time) + 0.05)
    # ... and then the next step writes one snapshot holding every checkpoint held.
    driver.step()
    assert driver.saves == [1, 5]
    # With nothing new, the steps after it write nothing (Tune's own period, 10 s or more).
    driver.step()
    assert driver.saves == [1, 5]


def test_the_end_of_a_run_writes_its_snapshot_at_once(tmp_path: Path) -> None:
    """Tune's last snapshot (the end of the run, or Ctrl-C) is forced: never held."""
    manager = _manager(tmp_path)
    snapshot_pace.pace(manager, LAG_S)
    driver = _Driver(manager)
    driver.burst(3)
    driver.step(force=True, wait=True)
    assert driver.saves == [1, 3]


def test_no_bound_leaves_tunes_manager_as_it_was(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    snapshot_pace.pace(manager, 0.0)
    driver = _Driver(manager)
    driver.burst(3)
    assert driver.saves == [1, 2, 3]
