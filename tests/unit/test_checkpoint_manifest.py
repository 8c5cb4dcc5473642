"""Checkpoints that can be trusted: the manifest a checkpoint carries, the damage it
reveals, the checkpoint a trial restores when its newest is damaged, and the exit code
of a run with a failed trial."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.names import CHECKPOINT_FALLBACK_KEY
from workbench.run.summary import RunSummary
from workbench.trial.manifest import (
    MANIFEST_FILE,
    Candidate,
    CheckpointDamaged,
    choose,
    problem,
    restore_choice,
    write_manifest,
)
from workbench.tune_ext.checkpoints import CheckpointGuard

STATE = Path("learner_group") / "learner" / "rl_module" / "default_policy" / "module_state.pkl"


def _checkpoint(folder: Path, *, iteration: int = 1, seal: bool = True) -> Path:
    """A checkpoint-shaped folder: a few files in nested folders, and its manifest."""
    (folder / STATE).parent.mkdir(parents=True)
    (folder / STATE).write_bytes(bytes(range(256)) * 8)
    (folder / "algorithm_state.pkl").write_bytes(b"state %d" % iteration)
    (folder / "rllib_checkpoint.json").write_text("{}")
    if seal:
        write_manifest(folder, progress={"training_iteration": iteration})
    return folder


def test_the_manifest_lists_every_file_with_its_size_and_hash(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "checkpoint_000000")
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert manifest["format"] == 1 and manifest["written_by"] == "workbench"
    assert set(manifest["files"]) == {
        STATE.as_posix(),
        "algorithm_state.pkl",
        "rllib_checkpoint.json",
    }
    data = (folder / STATE).read_bytes()
    assert manifest["files"][STATE.as_posix()] == {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert manifest["progress"] == {"training_iteration": 1}
    assert sorted(p.name for p in folder.iterdir() if p.is_file())[-1] == MANIFEST_FILE
    assert not list(folder.glob("*.tmp"))  # written to a temporary name, then renamed
    assert problem(folder) is None


def _truncate(folder: Path) -> None:
    data = (folder / STATE).read_bytes()
    (folder / STATE).write_bytes(data[: len(data) // 2])


def _flip_a_byte(folder: Path) -> None:
    data = bytearray((folder / STATE).read_bytes())
    data[100] ^= 0xFF
    (folder / STATE).write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_truncate, f"{STATE.as_posix()} has 1024 bytes, its manifest says 2048 (truncated)"),
        (lambda f: (f / STATE).unlink(), f"{STATE.as_posix()} is missing"),
        (_flip_a_byte, f"{STATE.as_posix()} has changed since it was written"),
        (lambda f: (f / MANIFEST_FILE).unlink(), f"has no {MANIFEST_FILE}"),
        (lambda f: (f / MANIFEST_FILE).write_text('{"files": '), f"{MANIFEST_FILE} cannot be read"),
    ],
    ids=["truncated", "missing", "changed-byte", "no-manifest", "garbled-manifest"],
)
def test_damage_is_detected(tmp_path: Path, damage, message: str) -> None:  # type: ignore[no-untyped-def]
    folder = _checkpoint(tmp_path / "checkpoint_000000")
    damage(folder)
    found = problem(folder)
    assert found is not None and found.startswith(message), found


def _c(index: int, ok: bool = True, sealed: bool = True) -> Candidate:
    return Candidate(index, sealed, None if ok else "damaged")


@pytest.mark.parametrize(
    ("requested", "candidates", "chosen"),
    [
        (2, [_c(0), _c(1), _c(2)], 2),  # whole: the one asked for
        (2, [_c(0), _c(1), _c(2, ok=False)], 1),  # the newest intact before it
        (2, [_c(0), _c(1, ok=False), _c(2, ok=False)], 0),
        (2, [_c(0, ok=False), _c(1, ok=False), _c(2, ok=False)], None),  # none: the trial fails
        (1, [_c(0, ok=False), _c(1, ok=False), _c(2)], None),  # never one saved after it
        (1, [_c(0), _c(1, ok=False), _c(2)], 0),  # (a PBT donor's older checkpoint)
        (2, [_c(0), _c(1), _c(2, ok=False, sealed=False)], 1),  # manifest never written
        (2, [_c(i, ok=False, sealed=False) for i in range(3)], 2),  # before manifests: as is
    ],
)
def test_the_checkpoint_a_trial_restores(
    requested: int, candidates: list[Candidate], chosen: int | None
) -> None:
    found = choose(requested, candidates)
    assert (None if found is None else found.index) == chosen


def test_a_damaged_newest_checkpoint_falls_back_and_says_so(tmp_path: Path) -> None:
    trial = tmp_path / "PPO_00000"
    for index in range(3):
        _checkpoint(trial / f"checkpoint_{index:06d}", iteration=index + 1)
    newest = trial / "checkpoint_000002"
    assert restore_choice(newest).path == newest and restore_choice(newest).note is None

    _truncate(newest)
    _flip_a_byte(trial / "checkpoint_000001")
    choice = restore_choice(newest)
    assert choice.path == trial / "checkpoint_000000"
    assert choice.progress == {"training_iteration": 1}
    assert choice.note == (
        f"checkpoint_000002 is damaged ({STATE.as_posix()} has 1024 bytes, its manifest "
        "says 2048 (truncated)); restored the newest intact checkpoint, checkpoint_000000 "
        "(iteration 1), instead"
    )

    (trial / "checkpoint_000000" / "algorithm_state.pkl").unlink()
    with pytest.raises(CheckpointDamaged) as info:
        restore_choice(newest)
    message = str(info.value)
    assert message.startswith(f"no intact checkpoint to restore in {trial}: checkpoint_000002 ")
    assert "; checkpoint_000001 " in message
    assert message.endswith("; checkpoint_000000 algorithm_state.pkl is missing")


def test_the_console_says_when_a_trial_restored_an_older_checkpoint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    trial = SimpleNamespace(trainable_name="PPO", trial_id="abc_00003")
    guard = CheckpointGuard(keep=3)
    guard.on_trial_result(iteration=1, trials=[trial], trial=trial, result={"x": 1})
    assert capsys.readouterr().err == ""
    guard.on_trial_result(
        iteration=2, trials=[trial], trial=trial, result={CHECKPOINT_FALLBACK_KEY: "why"}
    )
    assert capsys.readouterr().err == "PPO_00003: why\n"


def test_any_failed_trial_makes_the_exit_code_nonzero(tmp_path: Path) -> None:
    trials = [SimpleNamespace(status="TERMINATED"), SimpleNamespace(status="ERROR")]
    summary = RunSummary("x", tmp_path, trials=trials, errors=1)  # type: ignore[arg-type]
    assert summary.exit_code == 1
    assert RunSummary("x", tmp_path, trials=trials[:1], errors=0).exit_code == 0  # type: ignore[arg-type]
    summary.interrupted = True
    assert summary.exit_code == 130
