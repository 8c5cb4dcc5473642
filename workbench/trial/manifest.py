"""Checkpoints that can be trusted: a manifest of every file a checkpoint holds (its size
and SHA-256), written last, and the check that a checkpoint is whole before it is used.

A checkpoint counts only when its manifest is there and every file it lists has its size
and hash: a crash while RLlib writes or Tune copies the checkpoint (a truncated file, a
file never copied, a manifest never written) shows as a damaged checkpoint, never as one
that fails later on an ``UnpicklingError``. A trial restores its newest whole checkpoint
(`restore_choice`). The manifest also carries what acting with the checkpoint's policy
needs (the env and RLlib's action settings, as JSON), so that `workbench eval` and
`export-policy` read them without unpickling anything.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.files import write_atomic

MANIFEST_FILE = "workbench_checkpoint.json"
FORMAT = 1
_CHECKPOINT_NAME = re.compile(r"^checkpoint_(\d+)$")
# Tune's keys in a checkpoint's metrics that Trainable.restore reads.
PROGRESS_KEYS = ("training_iteration", "time_total_s", "timesteps_total", "episodes_total")


class CheckpointDamaged(RuntimeError):
    """No whole checkpoint to restore: each one's problem is in the message."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*")
        # Not the manifest, nor one a killed writer left half-written (write_atomic's).
        if p.is_file() and p.name != MANIFEST_FILE and not p.name.startswith(f".{MANIFEST_FILE}.")
    )


def write_manifest(
    folder: Path,
    *,
    policy: dict[str, Any] | None = None,
    progress: dict[str, Any] | None = None,
) -> Path:
    """Writes the manifest of every file under ``folder``, last and atomically (a
    temporary file renamed into place), so that a checkpoint with a manifest is whole."""
    files = {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in _files(folder)
    }
    data: dict[str, Any] = {"format": FORMAT, "written_by": "workbench", "files": files}
    if policy is not None:
        data["policy"] = policy
    if progress is not None:
        data["progress"] = progress
    text = json.dumps(data, indent=1, sort_keys=True)
    return write_atomic(folder / MANIFEST_FILE, text, fsync=True)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The checkpoint's manifest (None if it has none); ValueError if it is not one."""
    path = folder / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{MANIFEST_FILE} cannot be read ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ValueError(f"{MANIFEST_FILE} is not a workbench checkpoint manifest")
    return data


def problem(folder: Path) -> str | None:
    """What is wrong with the checkpoint in ``folder`` (None: it is whole)."""
    if not folder.is_dir():
        return "is gone"
    try:
        manifest = read_manifest(folder)
    except ValueError as err:
        return str(err)
    if manifest is None:
        return f"has no {MANIFEST_FILE} (written incompletely, or not by the workbench)"
    for name, entry in sorted(manifest["files"].items()):
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        expected = entry.get("size") if isinstance(entry, dict) else None
        if size != expected:
            shorter = " (truncated)" if isinstance(expected, int) and size < expected else ""
            return f"{name} has {size} bytes, its manifest says {expected}{shorter}"
        if _sha256(path) != entry.get("sha256"):
            return f"{name} has changed since it was written (its SHA-256 differs)"
    return None


@dataclass(frozen=True)
class Candidate:
    """One checkpoint of a trial, as the restore sees it."""

    index: int  # Tune's checkpoint_NNNNNN: the save order
    sealed: bool  # it has a manifest
    problem: str | None  # None: whole


def choose(requested: int, candidates: Sequence[Candidate]) -> Candidate | None:
    """The checkpoint to restore when ``requested`` is asked for: itself if it is whole,
    else the newest whole one saved before it; None when there is none. A trial folder
    with no manifest at all predates them: its checkpoints are used as they are."""
    by_index = {c.index: c for c in candidates}
    asked = by_index.get(requested)
    if asked is not None and asked.problem is None:
        return asked
    if asked is not None and not any(c.sealed for c in candidates):
        return asked  # written before checkpoints had manifests: nothing to check against
    older = [c for c in candidates if c.index < requested and c.problem is None]
    return max(older, key=lambda c: c.index) if older else None


def checkpoint_index(path: Path) -> int | None:
    match = _CHECKPOINT_NAME.match(path.name)
    return int(match.group(1)) if match else None


def written_checkpoint_indices(filesystem: Any, trial_path: str) -> list[int]:
    """The indices of the checkpoint folders in a trial's folder on its storage (a
    pyarrow filesystem), in ascending order."""
    import pyarrow.fs

    selector = pyarrow.fs.FileSelector(trial_path, allow_not_found=True)
    found = []
    for info in filesystem.get_file_info(selector):
        match = _CHECKPOINT_NAME.match(info.base_name)
        if match and info.type == pyarrow.fs.FileType.Directory:
            found.append(int(match.group(1)))
    return sorted(found)


def skip_written_checkpoints(storage: Any) -> int | None:
    """Moves a trial's checkpoint counter past every checkpoint folder it already has, so
    that its next save writes a new folder; returns the counter's old value when it
    moved it, else None.

    Tune numbers a trial's checkpoint folders with a counter its trainable and the driver
    each advance, the driver only when it processes a save's result, and a new or
    reused trial process takes the driver's (Ray 2.60: ``StorageContext.
    current_checkpoint_index``; the save goes to the folder one past it). A save whose
    result the driver drops, as it does when a trial is paused or cloned over while
    saving, leaves the driver's counter one behind, and the trial's next process saved
    into the folder that save had written. A donor caught so at a synchronous PBT
    decision wrote its next iteration over the checkpoint its clone was about to
    restore, and the clone went on an iteration past the checkpoint its lineage named."""
    filesystem = getattr(storage, "storage_filesystem", None)
    trial_path = getattr(storage, "trial_fs_path", None)
    current = getattr(storage, "current_checkpoint_index", None)
    if filesystem is None or not isinstance(trial_path, str) or not isinstance(current, int):
        return None
    written = written_checkpoint_indices(filesystem, trial_path)
    if not written or written[-1] <= current:
        return None
    storage.current_checkpoint_index = written[-1]
    return current


@dataclass(frozen=True)
class RestoreChoice:
    path: Path  # the checkpoint to restore
    progress: dict[str, Any] | None  # Tune's counters of that checkpoint (from its manifest)
    note: str | None  # why it is not the one asked for; None when it is


def local_checkpoint_folder(checkpoint: Any) -> Path | None:
    """A checkpoint's folder when it lies on this machine's file system (local storage
    or a shared mount), else None (cloud storage: Tune downloads it, unchecked)."""
    if isinstance(checkpoint, str | Path):  # (Tune's Checkpoint is an os.PathLike that refuses)
        return Path(checkpoint)
    path = getattr(checkpoint, "path", None)
    filesystem = getattr(checkpoint, "filesystem", None)
    if isinstance(path, str) and getattr(filesystem, "type_name", None) == "local":
        return Path(path)
    return None


def checkpoint_progress(folder: Path) -> dict[str, Any] | None:
    """Tune's counters (``PROGRESS_KEYS``) the trainable had when it saved the checkpoint
    in ``folder``, from its manifest; None when it has none, or no readable one."""
    try:
        manifest = read_manifest(folder)
    except (OSError, ValueError):
        return None
    progress = (manifest or {}).get("progress")
    return dict(progress) if isinstance(progress, dict) else None


def restore_choice(requested: Path) -> RestoreChoice:
    """The checkpoint a trial restores when Tune asks for ``requested``: it, if whole,
    else the newest whole checkpoint of the same trial saved before it.
    CheckpointDamaged when there is none (each checkpoint's problem in the message)."""
    index = checkpoint_index(requested)
    asked_problem = problem(requested)
    if asked_problem is None:
        return RestoreChoice(requested, checkpoint_progress(requested), None)
    siblings = (
        [p for p in requested.parent.iterdir() if checkpoint_index(p) is not None]
        if index is not None and requested.parent.is_dir()
        else []
    )
    if requested not in siblings:
        siblings.append(requested)
    found: dict[int, tuple[Path, Candidate]] = {}
    for path in siblings:
        i = checkpoint_index(path)
        i = -1 if i is None else i
        trouble = asked_problem if path == requested else problem(path)
        found[i] = (path, Candidate(i, (path / MANIFEST_FILE).is_file(), trouble))
    asked = found[-1 if index is None else index][1]
    chosen = choose(asked.index, [c for _, c in found.values()])
    if chosen is asked:
        return RestoreChoice(requested, checkpoint_progress(requested), None)
    if chosen is None:
        tried = "; ".join(
            f"{path.name} {candidate.problem}"
            for path, candidate in sorted(found.values(), key=lambda pc: -pc[1].index)
            if candidate.index <= asked.index
        )
        raise CheckpointDamaged(f"no intact checkpoint to restore in {requested.parent}: {tried}")
    path = found[chosen.index][0]
    progress = checkpoint_progress(path)
    iteration = (progress or {}).get("training_iteration")
    at = f" (iteration {iteration})" if iteration is not None else ""
    note = (
        f"{requested.name} is damaged ({asked_problem}); restored the newest intact "
        f"checkpoint, {path.name}{at}, instead"
    )
    return RestoreChoice(path, progress, note)


def policy_settings(
    config: Any, training_iteration: int | None, *, observation_filter: Any = None
) -> dict[str, Any] | None:
    """What acting with the policy needs, from the AlgorithmConfig, as JSON (None when
    the env is not a registered id or its settings are not plain data); with
    ``observation_filter`` (an ObservationStats) the statistics its observations go
    through first."""
    env = getattr(config, "env", None)
    if not isinstance(env, str):
        return None
    env_config = dict(getattr(config, "env_config", None) or {})
    try:
        json.dumps(env_config)
    except (TypeError, ValueError):
        return None
    return {
        "algorithm": type(config).__name__.removesuffix("Config"),
        "env_id": env,
        "env_config": env_config,
        "normalize_actions": bool(config.normalize_actions),
        "clip_actions": bool(config.clip_actions),
        "training_iteration": training_iteration,
        "observation_filter": None if observation_filter is None else observation_filter.to_json(),
    }
