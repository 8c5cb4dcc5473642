"""Tune's experiment-state sync leaves out Tune's own half-written files (its atomic
saves' temporary names), which vanish mid-copy and fail the sync, and no write of the
experiment state, in staging or in the results folder, leaves a half-written one."""

from __future__ import annotations

import dataclasses
import errno
import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow.fs
import pytest
from ray.train._internal.storage import _FilesystemSyncer, _upload_to_fs_path
from ray.tune.utils.serialization import TuneFunctionDecoder

from workbench.tune_ext.state_sync import (
    TUNES_SAVE_TO_DIR,
    WRITTEN,
    save_state_whole,
    sync_without_temp_files,
    trial_states,
)


def _sync(staging: Path, target: Path) -> set[str]:
    syncer = _FilesystemSyncer(storage_filesystem=pyarrow.fs.LocalFileSystem())
    function, kwargs = syncer._sync_up_command(local_path=str(staging), uri=str(target))
    function(**kwargs)
    return {p.name for p in target.iterdir()}


def test_the_sync_skips_the_temporary_files_of_tunes_atomic_saves(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "experiment_state-2026.json").write_text("{}")
    (staging / "callback-states-2026.pkl").write_bytes(b"x")
    temp = f".{uuid.uuid4()}-callback-states-2026.pkl"  # what _atomic_save writes first
    (staging / temp).write_bytes(b"x")
    (staging / ".hidden_but_state").write_text("kept")  # not the temporary pattern
    # What Ray's syncer runs, as Ray calls it (no exclusions), copies the temporary file:
    # one renamed away between the listing and the copy fails the whole sync. (The syncer
    # class itself may be patched already: any in-process run of this session does it.)
    _upload_to_fs_path(
        local_path=str(staging), fs=pyarrow.fs.LocalFileSystem(), fs_path=str(tmp_path / "before")
    )
    assert temp in {p.name for p in (tmp_path / "before").iterdir()}
    sync_without_temp_files()
    sync_without_temp_files()  # idempotent
    copied = _sync(staging, tmp_path / "after")
    assert temp not in copied
    assert copied == {"experiment_state-2026.json", "callback-states-2026.pkl", ".hidden_but_state"}


def test_a_results_folder_s_files_are_replaced_whole_not_overwritten_in_place(
    tmp_path: Path,
) -> None:
    # Tune's upload writes over the results folder's copy in place: a driver killed
    # during the copy leaves it truncated. The workbench's renames a whole copy over it.
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "experiment_state-2026.json").write_text('{"new": true}')
    for name, upload in (("tune", _upload_to_fs_path), ("workbench", None)):
        target = tmp_path / name
        target.mkdir()
        (target / "experiment_state-2026.json").write_text('{"old": true}')
        with open(target / "experiment_state-2026.json") as before:
            if upload is not None:
                upload(
                    local_path=str(staging), fs=pyarrow.fs.LocalFileSystem(), fs_path=str(target)
                )
            else:
                sync_without_temp_files()
                _sync(staging, target)
            kept = before.read()  # what a reader of the old file still sees
        assert (target / "experiment_state-2026.json").read_text() == '{"new": true}'
        assert kept == ('{"new": true}' if name == "tune" else '{"old": true}'), name
    assert not [p for p in (tmp_path / "workbench").iterdir() if p.name.startswith(".")]


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise RuntimeError("the driver is killed here")


@dataclasses.dataclass
class _Picklable:
    """A value JSON cannot hold, which Tune's encoder cloudpickles (as the stopper)."""

    value: int = 7


class _Controller:
    """The attributes ``TuneController.save_to_dir`` reads."""

    def __init__(self, staging: Path, runner_data: dict[str, Any]) -> None:
        self._storage = SimpleNamespace(experiment_driver_staging_path=str(staging))
        self._start_time = 1.0
        self._session_str = "2026"
        self.experiment_state_file_name = "experiment_state-2026.json"
        self._search_alg = SimpleNamespace(save_to_dir=lambda *a, **k: None)
        self._callbacks = SimpleNamespace(save_to_dir=lambda *a, **k: None)
        self._runner_data = runner_data

        self._trials_to_cache: set[Any] = set()
        self._trial_metadata = {"t1": ("{}", "{}")}

    def _get_trial_checkpoints(self) -> dict[str, Any]:  # Tune's save reads it
        return self._trial_metadata

    def __getstate__(self) -> dict[str, Any]:
        return self._runner_data


@pytest.mark.parametrize("save", ["tune", "workbench"])
def test_an_experiment_state_save_that_dies_midway_leaves_the_last_one_whole(
    tmp_path: Path, save: str
) -> None:
    staging = tmp_path / "staging"
    function = TUNES_SAVE_TO_DIR if save == "tune" else save_state_whole
    function(_Controller(staging, {"iteration": 1}))  # type: ignore[arg-type]
    state = staging / "experiment_state-2026.json"
    whole = json.loads(state.read_text())
    assert whole["runner_data"] == {"iteration": 1}
    dying = _Controller(staging, {"iteration": 2, "padding": "x" * 100_000, "z": _Unpicklable()})
    with pytest.raises(RuntimeError, match="killed here"):
        function(dying)  # type: ignore[arg-type]
    if save == "tune":  # the fall: what is left cannot be read
        with pytest.raises(json.JSONDecodeError):
            json.loads(state.read_text())
    else:
        assert json.loads(state.read_text()) == whole
        assert [p.name for p in staging.iterdir()] == [state.name]
        # What the checkpoint pruning takes instead of parsing the file: the last whole one.
        info = state.stat()
        stamp, trial_data = WRITTEN[str(state)]
        assert stamp == (info.st_mtime_ns, info.st_size)
        assert [list(t) for t in trial_data] == whole["trial_data"]


def test_a_save_encodes_again_only_the_trials_that_changed_and_reads_as_tunes_does(
    tmp_path: Path,
) -> None:
    from workbench.tune_ext import state_sync

    runner = {"iteration": 3, "stopper": _Picklable()}
    ours = _Controller(tmp_path / "ours", runner)
    theirs = _Controller(tmp_path / "theirs", runner)
    pairs = {f"t{i}": (json.dumps({"trial_id": f"t{i}"}), json.dumps({"n": i})) for i in range(3)}
    for changed in (None, "t1"):
        if changed is not None:  # one trial reported: a new pair, the others' are kept
            pairs[changed] = (pairs[changed][0], json.dumps({"n": 10, "s": 'a "quoted" text'}))
        for controller in (ours, theirs):
            controller._trial_metadata = dict(pairs)
        before = dict(state_sync._ENTRIES.get(ours, {}))
        save_state_whole(ours)  # type: ignore[arg-type]
        TUNES_SAVE_TO_DIR(theirs)  # type: ignore[arg-type]
        read = [
            json.loads(
                (c / "experiment_state-2026.json").read_text(),
                cls=TuneFunctionDecoder,
                allow_cloudpickle=True,
            )
            for c in (tmp_path / "ours", tmp_path / "theirs")
        ]
        assert read[0] == read[1]
        assert [tuple(t) for t in read[0]["trial_data"]] == list(pairs.values())
    after = state_sync._ENTRIES[ours]
    unchanged = [id(pairs[t]) for t in ("t0", "t2")]
    assert all(after[k][1] is before[k][1] for k in unchanged)  # not encoded again
    assert id(pairs["t1"]) not in before and len(after) == 3


def test_the_staging_snapshot_is_swapped_in_whole_or_not_at_all(tmp_path: Path) -> None:
    from workbench.tune_ext.state_sync import swap_in

    path = tmp_path / "experiment_state-2026.json"
    swap_in(lambda to: to.write_text('{"first": true}'), path)  # none there before
    assert path.read_text() == '{"first": true}'

    def dies(to: Path) -> None:
        to.write_text('{"half')
        raise RuntimeError("the driver is killed here")

    with pytest.raises(RuntimeError):
        swap_in(dies, path)
    assert path.read_text() == '{"first": true}'
    with open(path) as reader:  # a sync copying the old file as the new one comes in
        swap_in(lambda to: to.write_text('{"second": true}'), path)
        assert reader.read() == '{"first": true}'
    assert path.read_text() == '{"second": true}'
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_the_sync_copies_a_staging_file_swapped_in_while_it_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`swap_in` leaves the staging snapshot missing between its unlink and its rename: a
    sync that opens it then finds it gone, and after, there again, whole."""
    from workbench.tune_ext import state_sync

    staging, target = tmp_path / "staging", tmp_path / "results"
    staging.mkdir()
    (staging / "experiment_state-2026.json").write_text('{"new": true}')
    link = state_sync.os.link
    calls: list[str] = []

    def in_the_gap(source: Any, to: Any) -> Any:
        calls.append(str(source))
        if len(calls) == 1:
            raise FileNotFoundError(source)  # opened in the gap
        return link(source, to)

    monkeypatch.setattr(state_sync.os, "link", in_the_gap)
    sync_without_temp_files()
    assert _sync(staging, target) == {"experiment_state-2026.json"}
    assert (target / "experiment_state-2026.json").read_text() == '{"new": true}'
    assert len(calls) == 2


def test_the_results_folder_shares_the_staging_snapshot_until_it_is_swapped_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot (10 MB at 32 trials, synced after every trial checkpoint) is linked,
    not copied, where staging and results lie on one filesystem; a new snapshot, swapped
    in as a new file, leaves the results folder's whole until the next sync. Where a link
    cannot be made (another filesystem) it is copied; other files are always copied."""
    from workbench.tune_ext import state_sync

    staging = tmp_path / "staging"
    staging.mkdir()
    snapshot = staging / "experiment_state-2026.json"
    state_sync.swap_in(lambda to: to.write_text('{"v": 1}'), snapshot)
    (staging / "searcher-state-2026.pkl").write_bytes(b"s")
    sync_without_temp_files()
    _sync(staging, tmp_path / "results")
    synced = tmp_path / "results" / "experiment_state-2026.json"
    assert synced.stat().st_ino == snapshot.stat().st_ino
    searcher = tmp_path / "results" / "searcher-state-2026.pkl"
    assert searcher.stat().st_ino != (staging / "searcher-state-2026.pkl").stat().st_ino
    state_sync.swap_in(lambda to: to.write_text('{"v": 2}'), snapshot)
    assert synced.read_text() == '{"v": 1}'
    _sync(staging, tmp_path / "results")
    assert synced.read_text() == '{"v": 2}'

    def across_filesystems(source: Any, to: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(state_sync.os, "link", across_filesystems)
    _sync(staging, tmp_path / "elsewhere")
    copied = tmp_path / "elsewhere" / "experiment_state-2026.json"
    assert copied.read_text() == '{"v": 2}'
    assert copied.stat().st_ino != snapshot.stat().st_ino


def _reported_trial(iterations: int) -> Any:
    """A Tune trial that has taken ``iterations`` results, as Tune's controller records
    them (its run metadata keeps each metric's last 5 and last 10 values)."""
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    from ray.tune.experiment import Trial

    trial = Trial(
        "trainable",
        config={"lr": 1e-3},
        trial_id="t_00000",
        stub=True,
        placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
    )
    trial.create_placement_group_factory()  # as Tune's add_trial does
    for i in range(1, iterations + 1):
        _report(trial, i)
    return trial


def _report(trial: Any, iteration: int) -> None:
    metrics = {f"learners/m{k}": iteration * 0.5 + k * 1000 for k in range(20)}
    # RLlib reports some counters and means as numpy numbers.
    numpy = {"env_steps": np.int64(iteration * 64), "return_mean": np.float32(iteration / 3)}
    trial.update_last_result(
        {"training_iteration": iteration, "score": float(iteration), **metrics, **numpy}
    )


def test_the_snapshot_holds_what_tunes_own_encoding_holds_in_tunes_format() -> None:
    from ray.tune.experiment import Trial
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    trial = _reported_trial(12)
    theirs = trial.get_json_state()
    trial.invalidate_json_state()
    trial.run_metadata.invalidate_cache()
    controller = SimpleNamespace(_trials_to_cache={trial}, _trial_metadata={})
    (ours,) = trial_states(controller)
    assert not controller._trials_to_cache and controller._trial_metadata == {"t_00000": ours}
    assert trial.get_json_state() == ours  # Tune's own reads hit the same caches

    # Read back by Tune's own readers, the two are the same trial.
    assert Trial.from_json_state(ours[0], stub=True).config == {"lr": 1e-3}
    read = [_TrainingRunMetadata.from_json_state(state[1]) for state in (theirs, ours)]
    assert read[0].metric_analysis == read[1].metric_analysis
    assert read[0].last_result == read[1].last_result
    windows = [r.metric_n_steps["learners/m3"] for r in read]
    assert windows[0] == windows[1] and windows[1]["5"].maxlen == 5
    assert list(windows[1]["10"]) == [i * 0.5 + 3000 for i in range(3, 13)]


def test_a_trial_read_back_from_the_snapshot_goes_on_as_if_never_saved(tmp_path: Path) -> None:
    """The windows (one blob for all the metrics) and the checkpoint manager (the standard
    pickler) read back by Tune's own reader as Tune keeps them: the next results move the
    read-back trial's statistics exactly as they move the trial that was never saved."""
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    trial = _reported_trial(12)
    folder = tmp_path / "checkpoint_000011"
    folder.mkdir()
    manager = trial.run_metadata.checkpoint_manager
    manager.register_checkpoint(
        _TrainingResult(checkpoint=Checkpoint(str(folder)), metrics={"score": 11.0})
    )
    controller = SimpleNamespace(_trials_to_cache={trial}, _trial_metadata={})
    (state,) = trial_states(controller)
    read = _TrainingRunMetadata.from_json_state(state[1])

    (saved,) = read.checkpoint_manager._checkpoint_results
    assert saved.checkpoint.path == str(folder) and saved.metrics["score"] == 11.0
    window = read.metric_n_steps["return_mean"]["5"]
    assert window.maxlen == 5 and all(type(v) is float for v in window)  # numpy's, as numbers
    for iteration in (13, 14, 15):  # the windows roll on: the oldest values leave
        _report(trial, iteration)
        for metric, value in trial.run_metadata.last_result.items():
            if metric in read.metric_analysis:
                read.update_metric(metric, value, step=iteration)
    for metric in ("learners/m3", "env_steps", "return_mean"):
        assert read.metric_analysis[metric] == pytest.approx(
            trial.run_metadata.metric_analysis[metric]
        )
        for n in ("5", "10"):
            kept = trial.run_metadata.metric_n_steps[metric][n]
            assert list(read.metric_n_steps[metric][n]) == pytest.approx(list(kept))


def test_rays_log_once_set_grows_with_tunes_encoding_not_the_snapshots() -> None:
    from ray.util import debug

    trial = _reported_trial(3)
    controller = SimpleNamespace(_trials_to_cache=set(), _trial_metadata={})
    before = len(debug._logged)
    for i in range(4, 8):  # a result, then a snapshot, four times
        _report(trial, i)
        trial.get_json_state()  # Tune's own
    grown = len(debug._logged) - before
    assert grown >= 4 * 2 * 20  # the fall: every window's text, every time, kept
    before = len(debug._logged)
    for i in range(8, 12):
        _report(trial, i)
        controller._trials_to_cache.add(trial)
        trial_states(controller)
    assert len(debug._logged) == before
