"""Tune's experiment-state sync leaves out Tune's own half-written files (its atomic
saves' temporary names), which vanish mid-copy and fail the sync."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow.fs
from ray.train._internal.storage import _FilesystemSyncer, _upload_to_fs_path

from workbench.run.state_sync import sync_without_temp_files


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
