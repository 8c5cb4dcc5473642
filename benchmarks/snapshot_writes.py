"""The driver's cost per trial checkpoint of writing Tune's experiment snapshot: Tune's own
``TuneController.save_to_dir`` (the anchor: ``json.dump`` of every trial's entry into the
file in place) against the workbench's (``workbench.tune_ext.state_sync.save_state_whole``:
each trial's entry encoded once, the file written whole under a temporary name and swapped
in), and the workbench's as it was before 4 December, 18:30 UTC (Tune's encoding, the file
renamed over the old one).

    .venv/bin/python benchmarks/snapshot_writes.py [--sizes 4,16,32,64] [--rounds 5] [--quick]

Method. For each population size a controller holds one entry per trial as Tune 2.60 keeps
them (``_trial_metadata``: a trial's state JSON and its runtime JSON, sized as in
``snapshot_reads.py``: 282 KB, as measured on a ``make run`` trial after 8 iterations) and
the controller state of the main experiment's driver (a few scalars, the decisions cached,
a stopper Tune cloudpickles). One write is what one trial checkpoint costs: that trial's
runtime entry is new (its checkpoint moved on; built before the clock starts), every other
trial's is the one the last save had, and the snapshot is saved into the staging folder.
Interleaved rounds, the saves in alternating order; median [min-max] milliseconds a save,
and the ratios.

Then the sync that follows each save in a run: the workbench's snapshot put into a results
folder on the same filesystem whole (``state_sync.replace_whole``), by a copy (the anchor:
the sync until 5 December) and by a hard link (``state_sync.link_or_copy``, what
``upload_whole`` does with the snapshot since), interleaved with the saves.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/snapshot_writes.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import by_population_size, interleaved, spread
from benchmarks.snapshot_reads import _runtime
from workbench.tune_ext import state_sync

SAVES = ("tune", "before", "workbench")
SYNCS = ("copy", "link")


@dataclasses.dataclass
class _Stopper:
    """What Tune cloudpickles into every snapshot beside the trials (the run's stopper)."""

    rules: dict[str, float]
    spent_s: float = 0.0


def save_as_before(controller: Any) -> None:
    """The workbench's save before 4 December, 18:30 UTC: Tune's encoding of the whole
    snapshot (``json.dump``), written under a temporary name and renamed over the old."""
    from ray.tune.utils.serialization import TuneFunctionEncoder

    state = {
        "trial_data": state_sync.trial_states(controller),
        "runner_data": controller.__getstate__(),
        "stats": {"start_time": controller._start_time},
    }
    staging = Path(controller._storage.experiment_driver_staging_path)
    staging.mkdir(parents=True, exist_ok=True)

    def write(to: Path) -> None:
        with open(to, "w") as f:
            json.dump(state, f, cls=TuneFunctionEncoder)

    state_sync.replace_whole(write, staging / controller.experiment_state_file_name)


class Controller:
    """The attributes ``TuneController.save_to_dir`` reads, for ``size`` trials whose
    checkpoints move on one at a time."""

    def __init__(self, size: int, folder: Path, staging: Path) -> None:
        self.folder = folder  # where the trials' checkpoints are (named, never written)
        self.size = size
        self.latest = [3] * size
        self._trial_metadata = {
            f"t_{t:05d}": (json.dumps({"trial_id": f"t_{t:05d}"}), _runtime(folder, t, 3))
            for t in range(size)
        }
        self._trials_to_cache: set[Any] = set()
        self._storage = SimpleNamespace(experiment_driver_staging_path=str(staging))
        self._start_time = 1.7e9
        self._session_str = "bench"
        self.experiment_state_file_name = "experiment_state-bench.json"
        self._search_alg = SimpleNamespace(save_to_dir=lambda *a, **k: None)
        self._callbacks = SimpleNamespace(save_to_dir=lambda *a, **k: None)
        self._stopper = _Stopper({"training_iteration": 40.0})
        self.turn = 0

    def _get_trial_checkpoints(self) -> dict[str, Any]:
        return self._trial_metadata

    def __getstate__(self) -> dict[str, Any]:
        # TuneController.__getstate__ of a running population: its scalars and the stopper.
        return {
            "_iteration": 100 * self.turn,
            "_total_time": 1.5 * self.turn,
            "_cached_trial_decisions": {},
            "_queued_trial_decisions": {},
            "_stopper": self._stopper,
            "_checkpoint_period": "auto",
            "_session_str": self._session_str,
        }

    def next_checkpoint(self) -> None:
        """One trial's checkpoint moves on: its runtime entry is new."""
        trial = self.turn % self.size
        self.turn += 1
        self.latest[trial] += 1
        trial_id = f"t_{trial:05d}"
        state = self._trial_metadata[trial_id][0]
        self._trial_metadata[trial_id] = (state, _runtime(self.folder, trial, self.latest[trial]))
        self._stopper.spent_s += 1.0


def measure_size(size: int, folder: Path, rounds: int, saves: int) -> str:
    """One table row: the three saves and the two syncs, ``saves`` checkpoints a round,
    interleaved."""
    controllers = {}
    for name in SAVES:
        controllers[name] = Controller(size, folder, folder / name)
    functions = {
        "tune": state_sync.TUNES_SAVE_TO_DIR,
        "before": save_as_before,
        "workbench": state_sync.save_state_whole,
    }
    for name in SAVES:  # a first save, as the run's first checkpoint makes
        functions[name](controllers[name])

    snapshot = folder / "workbench" / "experiment_state-bench.json"
    (folder / "results").mkdir()
    put = {"copy": shutil.copyfile, "link": state_sync.link_or_copy}

    def measure(name: str) -> float:
        spent = 0.0
        if name in SYNCS:
            for _ in range(saves):
                start = time.perf_counter()
                state_sync.replace_whole(
                    functools.partial(put[name], snapshot), folder / "results" / snapshot.name
                )
                spent += time.perf_counter() - start
            return 1000 * spent / saves
        controller, save = controllers[name], functions[name]
        for _ in range(saves):
            controller.next_checkpoint()
            start = time.perf_counter()
            save(controller)
            spent += time.perf_counter() - start
        return 1000 * spent / saves

    tune, before, ours, copy, link = interleaved(rounds, [*SAVES, *SYNCS], measure, alternate=True)
    anchor = folder / "tune" / "experiment_state-bench.json"
    # The same snapshot (the runtimes differ only in their checkpoints' random ids).
    ours_read, tunes_read = (json.loads(path.read_text()) for path in (snapshot, anchor))
    assert ours_read.keys() == tunes_read.keys()
    assert ours_read["runner_data"] == tunes_read["runner_data"]
    assert [t[0] for t in ours_read["trial_data"]] == [t[0] for t in tunes_read["trial_data"]]
    ratio = spread([a / b for a, b in zip(tune, ours, strict=True)], unit="x")
    gain = spread([a / b for a, b in zip(before, ours, strict=True)], unit="x")
    megabytes = snapshot.stat().st_size / 1e6
    return (
        f"| {size} | {megabytes:.1f} | {spread(tune)} | {spread(before)} | {spread(ours)} "
        f"| {ratio} | {gain} | {spread(copy)} | {spread(link)} |"
    )


HEADER = (
    "trials",
    "snapshot MB",
    "Tune's save, ms",
    "before 4 December 18:30, ms",
    "workbench, ms",
    "Tune / workbench",
    "before / workbench",
    "sync by copy, ms",
    "sync by link, ms",
)


def main(argv: list[str] | None = None) -> int:
    return by_population_size(
        argv, __doc__ or "", HEADER, measure_size, ("--saves", "checkpoints timed per round")
    )


if __name__ == "__main__":
    sys.exit(main())
