"""Tune's experiment-state sync, without half-written files.

Tune writes its state files into a staging folder atomically: a temporary
``.<uuid4>-<name>`` file, then ``os.replace`` (``ray.tune.utils.util._atomic_save``).
A background thread copies the staging folder to the results folder, and a copy that
listed a temporary file just before it was renamed fails: "Saving experiment state to
storage ... failed" with a 20-line traceback after a successful run (the missing file was
a ``.<uuid>-callback-states-....pkl``), and the results folder keeps an older state until
the next sync. The workbench has the syncer leave those temporary files out: they are
never state, only state being written.

Two of Tune's writes were not atomic (Ray 2.60), and a driver killed in the middle of
either left a truncated ``experiment_state-*.json`` that no resume can read (seen in the
killed-and-resumed drill: "Expecting value: line 1 column 1"):

- ``TuneController.save_to_dir`` writes the experiment state in place (``open(..., "w")``),
  while the previous sync may still be copying it;
- the sync copies each file over the results folder's copy in place (pyarrow's
  ``copy_files``).

The workbench writes the staging file whole under a temporary name and renames it into
place (`swap_in`), and for a results folder on a local (or mounted) filesystem copies each
file by ``os.replace`` from a temporary name. An object
store (S3, GCS) shows an upload whole or not at all, so Tune's upload stays for those.

The same save encodes each trial that reported since the last one (`trial_states`) with
`SnapshotEncoder`. Tune's run metadata of a trial keeps, for every metric of its results
(about 130 for an RLlib trial), its last 5 and last 10 values in deques, which JSON cannot
hold: Tune's encoder reaches each through a failed ``JSONEncoder.default``, adds its text to
``ray.util.debug.log_once``'s set (which keeps every text for the life of the driver: one
more per deque and snapshot, so the driver's memory grows with the run) and pickles it with
cloudpickle. In a profile of the main experiment's driver that encoding was about a third
of its main thread's busy time (docs/benchmarks/snapshot-encoding.md).
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import pickle
import shutil
import uuid
import weakref
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs
from ray.train._internal.storage import _FilesystemSyncer
from ray.tune.execution.tune_controller import TuneController
from ray.tune.utils.serialization import _CLOUDPICKLE_FALLBACK_TYPE, TuneFunctionEncoder

# ".<uuid4>-<name>": 8-4-4-4-12 hexadecimal digits, the prefix _atomic_save gives.
ATOMIC_SAVE_TEMP = ".????????-????-????-????-????????????-*"
_PATCHED = "_workbench_skips_temp_files"
TUNES_SAVE_TO_DIR = TuneController.save_to_dir  # Tune's own, for the tests to compare
EXPERIMENT_STATE = TuneController.CKPT_FILE_TMPL.format("*")  # the snapshot's file names

# The experiment snapshot this process wrote last, by its path: its (mtime_ns, size) right
# after the write and its trial data, so that the checkpoint pruning, which reads the file
# back after trial checkpoints, need not parse what the driver has in memory. One
# entry: a process rarely drives two Tune runs at once, and then the pruning parses.
WRITTEN: dict[str, tuple[tuple[int, int], list[tuple[str, str]]]] = {}


def sync_without_temp_files() -> None:
    """Make every filesystem syncer of this process skip Tune's temporary files and
    replace each file of a local results folder whole, and every Tune controller write
    its experiment state whole (idempotent)."""
    if getattr(_FilesystemSyncer, _PATCHED, False):
        return
    original = _FilesystemSyncer._sync_up_command

    def _sync_up_command(
        self: Any, local_path: str, uri: str, exclude: list[str] | None = None
    ) -> Any:
        exclude = [*(exclude or []), ATOMIC_SAVE_TEMP]
        if isinstance(self.storage_filesystem, pyarrow.fs.LocalFileSystem):
            return upload_whole, {"local_path": local_path, "fs_path": uri, "exclude": exclude}
        return original(self, local_path, uri, exclude=exclude)

    _FilesystemSyncer._sync_up_command = _sync_up_command  # type: ignore[method-assign]
    TuneController.save_to_dir = save_state_whole  # type: ignore[method-assign]
    setattr(_FilesystemSyncer, _PATCHED, True)


def replace_whole(write: Any, path: Path, *, unlink_first: bool = False) -> None:
    """Writes ``path`` through ``write(temporary_path)`` and renames it into place: a
    reader, or a process killed at any moment, sees the old file or the new one (with
    ``unlink_first``, see `swap_in`, also none between the two)."""
    temporary = path.with_name(f".{uuid.uuid4()}-{path.name}")
    try:
        write(temporary)
        if unlink_first:
            path.unlink(missing_ok=True)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def swap_in(write: Any, path: Path) -> None:
    """`replace_whole` for a file only this thread writes and reads, and that the sync may
    find missing: the old file is unlinked before the rename. Renamed over an existing file,
    ext4 (``auto_da_alloc``, on by default) starts writing the new file's data to disk at
    once; the driver's staging snapshot, rewritten after trial checkpoints (10 MB at
    32 trials), paid that in the driver's main thread: 11.8 ms a save against 3.5 here
    (docs/benchmarks/population-scale.md). A process killed between the unlink and the
    rename leaves no staging snapshot, which no resume reads: it resumes from the results
    folder's copy, which the sync replaces whole."""
    replace_whole(write, path, unlink_first=True)


def link_or_copy(source: Path, to: Path) -> None:
    """``to`` becomes ``source``: a hard link where both lie on one filesystem, else a copy.

    Only for a file nothing rewrites in place: the staging snapshot, which `swap_in`
    replaces by a new file each time, so the inode the results folder shares never
    changes. The snapshot grows with the population (10 MB at 32 trials) and the sync
    copied it after each snapshot: 13% of the driver's CPU at 16 trials
    (docs/benchmarks/population-scale.md)."""
    try:
        os.link(source, to)
    except FileNotFoundError:
        raise  # swapped out under the listing: the caller's to handle
    except OSError:  # another filesystem, or one without hard links
        shutil.copyfile(source, to)


def upload_whole(local_path: str, fs_path: str, exclude: list[str]) -> None:
    """Copies the folder ``local_path`` into ``fs_path`` on the local filesystem, each
    file replaced whole; ``exclude`` as Tune's (fnmatch patterns of relative paths)."""
    source, target = Path(local_path), Path(fs_path)
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_whole(lambda to: shutil.copyfile(source, to), target)
        return
    for folder, _dirs, files in os.walk(source):
        for name in files:
            path = Path(folder, name)
            relative = path.relative_to(source).as_posix()
            if any(fnmatch.fnmatch(relative, pattern) for pattern in exclude):
                continue
            if not path.is_file():
                continue  # renamed away since the listing: a temporary file
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shared = fnmatch.fnmatch(name, EXPERIMENT_STATE)
            copy = functools.partial(link_or_copy if shared else shutil.copyfile, path)
            try:
                replace_whole(copy, destination)
            except FileNotFoundError:
                if not path.exists():
                    continue  # a temporary file, renamed away since the listing
                # Swapped in between (`swap_in`: gone, then back): the new one is whole.
                replace_whole(copy, destination)


def save_state_whole(self: Any) -> None:
    """``TuneController.save_to_dir`` (Ray 2.60) with the experiment state written whole:
    the trials, the controller's own state and the searcher's and callbacks' (Tune writes
    those two whole already)."""
    trial_data = trial_states(self)
    rest = {"runner_data": self.__getstate__(), "stats": {"start_time": self._start_time}}
    staging = Path(self._storage.experiment_driver_staging_path)
    staging.mkdir(parents=True, exist_ok=True)
    chunks = snapshot_chunks(self, trial_data, json.dumps(rest, cls=TuneFunctionEncoder))

    def write(to: Path) -> None:
        with open(to, "w") as f:
            f.writelines(chunks)

    path = staging / self.experiment_state_file_name
    swap_in(write, path)
    written = path.stat()
    WRITTEN.clear()
    WRITTEN[str(path)] = ((written.st_mtime_ns, written.st_size), trial_data)
    self._search_alg.save_to_dir(str(staging), session_str=self._session_str)
    self._callbacks.save_to_dir(str(staging), session_str=self._session_str)


# Per controller, each trial's entry of the snapshot's trial data as JSON text, with the
# (state, run metadata) pair it encodes: see `snapshot_chunks`.
_ENTRIES: weakref.WeakKeyDictionary[Any, dict[int, tuple[tuple[str, str], str]]] = (
    weakref.WeakKeyDictionary()
)


def snapshot_chunks(controller: Any, trial_data: list[tuple[str, str]], rest: str) -> list[str]:
    """The experiment snapshot's text, ``{"trial_data": [...], ...rest}``, in pieces to write
    one after the other: what Tune's ``json.dump`` writes, but each trial's entry encoded
    once. An entry is a pair of JSON texts (a few hundred KB for an RLlib trial) that JSON
    must escape again as strings: Tune did that for every trial at every save, in the
    pure-Python encoder ``json.dump`` uses, though a save follows trial checkpoints and
    most trials have not changed since the last (`trial_states` keeps their pairs).
    ``rest``: the snapshot's other keys, encoded."""
    cache = _ENTRIES.get(controller, {})
    chunks, kept = ['{"trial_data": ['], {}
    for i, pair in enumerate(trial_data):
        cached = cache.get(id(pair))
        entry = cached[1] if cached is not None and cached[0] is pair else json.dumps(pair)
        kept[id(pair)] = (pair, entry)
        chunks += [", ", entry] if i else [entry]
    _ENTRIES[controller] = kept  # the pairs of trials that changed are let go
    chunks.append("], " + rest[1:])
    return chunks


class SnapshotEncoder(TuneFunctionEncoder):
    """Tune's encoder, with a deque pickled directly by the standard pickler into the
    blob Tune's own decoder reads (`_loads_with_cloudpickle`), and a numpy number written
    as the number (Tune pickles it too, after a ``log_once`` text of its value): no failed
    ``default``, no ``log_once`` text, no cloudpickle (the module's docstring)."""

    def default(self, obj: Any) -> Any:
        if type(obj) is deque:
            return _blob(obj)
        if isinstance(obj, _NUMPY_NUMBERS):
            return obj.item()  # RLlib's counters and means: the number, read back as one
        return super().default(obj)  # type: ignore[no-untyped-call]


_NUMPY_NUMBERS = (np.integer, np.floating, np.bool_)


def _plain(value: Any) -> Any:
    """A numpy number as Python's (as `SnapshotEncoder` writes it); anything else as is."""
    return value.item() if isinstance(value, _NUMPY_NUMBERS) else value


def trial_states(controller: Any) -> list[tuple[str, str]]:
    """``TuneController._get_trial_checkpoints`` (Ray 2.60) with `SnapshotEncoder`, in
    compact JSON: each trial that changed since the last save is encoded again (its state
    and its run metadata, into the caches Tune clears when they change), the others are
    reused."""
    for trial in controller._trials_to_cache:
        controller._trial_metadata[trial.trial_id] = _json_state(trial)
    controller._trials_to_cache.clear()
    return list(controller._trial_metadata.values())


def _json_state(trial: Any) -> tuple[str, str]:
    """``Trial.get_json_state`` (Ray 2.60) with `SnapshotEncoder`, and the run metadata's
    two pickled parts each as one blob: every metric's windows (`Windows`) and the
    checkpoint manager (by the standard pickler: its classes are importable, and
    cloudpickle took twice as long)."""
    if trial._state_json is None:
        state = trial.__getstate__()
        state.pop("run_metadata", None)
        trial._state_json = json.dumps(state, cls=SnapshotEncoder)
    metadata = trial.run_metadata
    if getattr(metadata, "_cached_json", None) is None:
        data = {k: v for k, v in vars(metadata).items() if k != "_cached_json"}
        if isinstance(data.get("metric_n_steps"), dict):
            data["metric_n_steps"] = _blob(Windows(data["metric_n_steps"]))
        if data.get("checkpoint_manager") is not None:
            data["checkpoint_manager"] = _blob(data["checkpoint_manager"])
        metadata._cached_json = json.dumps(data, cls=SnapshotEncoder)
    return trial._state_json, metadata._cached_json


def _blob(value: Any) -> dict[str, str]:
    """``value`` pickled into the blob Tune's decoder reads (`_loads_with_cloudpickle`)."""
    return {"_type": _CLOUDPICKLE_FALLBACK_TYPE, "value": pickle.dumps(value).hex()}


class Windows:
    """Tune's last-n windows of a trial's metrics (``metric_n_steps``: metric -> n -> a
    deque of at most n values), pickled as plain lists of plain numbers and read back as
    the same deques. Pickled one deque at a time, through `SnapshotEncoder.default`, the
    windows of an RLlib trial's some 120 metrics were two thirds of its run metadata's
    encoding, which the driver repeats for every trial that reported since the last
    snapshot (docs/benchmarks/snapshot-encoding.md)."""

    __slots__ = ("windows",)

    def __init__(self, windows: dict[str, dict[str, deque[Any]]]) -> None:
        self.windows = windows

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        plain = {
            metric: {n: (window.maxlen, [_plain(v) for v in window]) for n, window in by_n.items()}
            for metric, by_n in self.windows.items()
        }
        return _windows, (plain,)


def _windows(
    plain: dict[str, dict[str, tuple[int | None, list[Any]]]],
) -> dict[str, dict[str, deque[Any]]]:
    """What a pickled `Windows` reads back as: Tune's deques."""
    return {
        metric: {n: deque(values, maxlen=maxlen) for n, (maxlen, values) in by_n.items()}
        for metric, by_n in plain.items()
    }
