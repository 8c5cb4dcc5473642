"""workbench.files.write_atomic: a file is replaced whole or not at all, and leaves no
temporary file behind either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import workbench.files as files
from workbench.files import temporary_name, write_atomic


def test_the_new_content_replaces_the_old_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    assert write_atomic(path, "new") == path
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_write_that_fails_keeps_the_old_file_and_removes_its_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")

    def no_rename(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", no_rename)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_fsync_flushes_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(files.os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(
        files.os, "replace", lambda a, b: calls.append("replace") or real_replace(a, b)
    )
    write_atomic(tmp_path / "a", "x")
    write_atomic(tmp_path / "b", "y", fsync=True)
    assert calls == ["replace", "fsync", "replace"]


def test_temporaries_are_hidden_unique_and_beside_the_file(tmp_path: Path) -> None:
    path = tmp_path / "population_result.json"
    first, second = temporary_name(path), temporary_name(path)
    assert first != second and first.parent == path.parent
    assert first.name.startswith(".population_result.json.") and first.suffix == ".tmp"
