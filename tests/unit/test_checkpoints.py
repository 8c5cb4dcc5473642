"""CheckpointGuard: prune old checkpoints, never one that a trial or PBT still needs."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.fs
from ray.tune import Checkpoint

from workbench.tune_ext.checkpoints import CheckpointGuard


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


def _storage(tmp_path: Path) -> Any:
    staging = tmp_path / "staging"
    staging.mkdir()
    return SimpleNamespace(
        storage_filesystem=pyarrow.fs.LocalFileSystem(),
        experiment_fs_path=str(tmp_path),
        experiment_driver_staging_path=str(staging),
    )


def _snapshot(folder: Path, session: str, restores: dict[str, Any]) -> Path:
    """An experiment snapshot as Tune writes it (Ray 2.60): each trial's checkpoint
    manager, cloudpickled into the runtime JSON, names the checkpoint it restores."""
    from ray.tune.utils.serialization import TuneFunctionEncoder

    trial_data = []
    for trial_id, result in restores.items():
        manager = SimpleNamespace(_latest_checkpoint_result=result, _checkpoint_results=[result])
        runtime = json.dumps({"checkpoint_manager": manager}, cls=TuneFunctionEncoder)
        trial_data.append([json.dumps({"trial_id": trial_id}), runtime])
    path = folder / f"experiment_state-{session}.json"
    path.write_text(json.dumps({"trial_data": trial_data}))
    return path


def test_spares_what_the_last_snapshot_restores_though_the_clone_moved_on(
    tmp_path: Path,
) -> None:
    # A clone exploited twice: live, it restores the donor's checkpoint 5; the snapshot
    # a killed driver leaves in the results folder still has it restore checkpoint 0.
    donor = _trial(tmp_path, "donor", 6)
    clone = _trial(tmp_path, "clone", 1)
    results = donor.run_metadata.checkpoint_manager._checkpoint_results
    clone.checkpoint = results[5].checkpoint
    clone.run_metadata.checkpoint_manager._latest_checkpoint_result = results[5]
    donor.storage = _storage(tmp_path)
    _snapshot(tmp_path, "2026-12-02_04-17-04", {"clone": results[0], "donor": results[5]})

    # Live state alone (no storage to read): checkpoint 0 goes, and a resume fails.
    live_only = _trial(tmp_path / "live", "donor", 6)
    CheckpointGuard(keep=3).on_checkpoint(0, [live_only], live_only, live_only.checkpoint)
    assert not (tmp_path / "live" / "donor" / "checkpoint_000000").exists()

    guard = CheckpointGuard(keep=3)
    guard.on_checkpoint(0, [donor, clone], donor, donor.checkpoint)
    left = sorted(p.name for p in (tmp_path / "donor").iterdir())
    assert left == [f"checkpoint_{i:06d}" for i in (0, 3, 4, 5)]

    # The snapshot being written (staging) names it too: still spared.
    _snapshot(Path(donor.storage.experiment_driver_staging_path), "s", {"clone": results[0]})
    (tmp_path / "experiment_state-2026-12-02_04-17-04.json").unlink()
    guard.on_checkpoint(0, [donor, clone], donor, donor.checkpoint)
    assert (tmp_path / "donor" / "checkpoint_000000").is_dir()

    # Once the snapshots have moved on, it goes with the next checkpoint.
    _snapshot(Path(donor.storage.experiment_driver_staging_path), "s", {"clone": results[5]})
    guard.on_checkpoint(0, [donor, clone], donor, donor.checkpoint)
    left = sorted(p.name for p in (tmp_path / "donor").iterdir())
    assert left == [f"checkpoint_{i:06d}" for i in (3, 4, 5)]


def test_an_unreadable_snapshot_deletes_nothing(tmp_path: Path) -> None:
    trial = _trial(tmp_path, "a", 6)
    trial.storage = _storage(tmp_path)
    (tmp_path / "experiment_state-2026-12-02_04-17-04.json").write_text("{cut sh")
    CheckpointGuard(keep=3).on_checkpoint(0, [trial], trial, trial.checkpoint)
    assert len(list((tmp_path / "a").iterdir())) == 6


def test_a_snapshot_read_again_decodes_only_the_trials_that_changed(
    tmp_path: Path, monkeypatch: Any
) -> None:
    import workbench.tune_ext.checkpoints as module

    decoded: list[str] = []
    restores = module._restores

    def counting(runtime_json: str) -> str | None:
        path = restores(runtime_json)
        decoded.append(str(path))
        return path

    monkeypatch.setattr(module, "_restores", counting)
    trials = {f"t{i}": _trial(tmp_path, f"t{i}", 2) for i in range(8)}
    latest = {
        name: t.run_metadata.checkpoint_manager._checkpoint_results for name, t in trials.items()
    }
    storage = _storage(tmp_path)
    staging = Path(storage.experiment_driver_staging_path)
    snapshots = module._Snapshots()

    _snapshot(staging, "s", {name: results[0] for name, results in latest.items()})
    first = snapshots.named(storage)
    assert first == {str(tmp_path / f"t{i}" / "checkpoint_000000") for i in range(8)}
    assert len(decoded) == 8

    # One trial checkpointed since: only its state is decoded, and the answer is whole.
    decoded.clear()
    _snapshot(staging, "s", {**{n: r[0] for n, r in latest.items()}, "t3": latest["t3"][1]})
    second = snapshots.named(storage)
    assert decoded == [str(tmp_path / "t3" / "checkpoint_000001")]
    assert second == (first - {str(tmp_path / "t3" / "checkpoint_000000")}) | {
        str(tmp_path / "t3" / "checkpoint_000001")
    }

    # The results folder's copy of that version (the driver's sync): not parsed again.
    decoded.clear()
    (tmp_path / "experiment_state-s.json").write_bytes(
        (staging / "experiment_state-s.json").read_bytes()
    )
    assert snapshots.named(storage) == second and decoded == []


def test_the_snapshot_this_driver_wrote_is_taken_from_memory_not_parsed(
    tmp_path: Path, monkeypatch: Any
) -> None:
    import workbench.tune_ext.checkpoints as module
    from workbench.tune_ext import state_sync

    trials = {f"t{i}": _trial(tmp_path, f"t{i}", 2) for i in range(3)}
    first = {n: t.run_metadata.checkpoint_manager._checkpoint_results[0] for n, t in trials.items()}
    storage = _storage(tmp_path)
    staging = Path(storage.experiment_driver_staging_path)
    path = _snapshot(staging, "s", first)
    trial_data = json.loads(path.read_text())["trial_data"]
    parsed: list[int] = []
    loads = module.json.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        if len(text) == path.stat().st_size:  # the whole snapshot, not one trial's state
            parsed.append(len(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(module.json, "loads", counting)
    monkeypatch.setitem(state_sync.WRITTEN, str(path), ((0, 0), trial_data))
    expected = {str(tmp_path / f"t{i}" / "checkpoint_000000") for i in range(3)}
    # Written by someone else since (another stamp): parsed, as any file.
    assert module._Snapshots().named(storage) == expected and len(parsed) == 1
    # As this driver wrote it (the stamp save_state_whole recorded): not parsed.
    parsed.clear()
    info = path.stat()
    stamp = (info.st_mtime_ns, info.st_size)
    monkeypatch.setitem(state_sync.WRITTEN, str(path), (stamp, trial_data))
    assert module._Snapshots().named(storage) == expected and parsed == []
