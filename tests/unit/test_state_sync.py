"""Tune's experiment-state sync leaves out Tune's own half-written files (its atomic
saves' temporary names), which vanish mid-copy and fail the sync, and no write of the
experiment state, in staging or in the results folder, leaves a half-written one."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.fs
import pytest
from ray.train._internal.storage import _FilesystemSyncer, _upload_to_fs_path

from workbench.tune_ext.state_sync import (
    TUNES_SAVE_TO_DIR,
    save_state_whole,
    sync_without_temp_files,
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

    def _get_trial_checkpoints(self) -> dict[str, Any]:
        return {"t1": ["{}", "{}"]}

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
