"""The driver's cost per trial checkpoint of reading Tune's experiment snapshot back, which the
checkpoint pruning (``workbench.tune_ext.checkpoints``) does to spare what a resume would
restore: decoding every trial's state (the anchor, what it did before 3 December) against
decoding only the trials whose state changed since the last read (``_Snapshots``).

    .venv/bin/python benchmarks/snapshot_reads.py [--sizes 4,16,32,64] [--rounds 5] [--quick]

Method. For each population size a snapshot is built as Tune 2.60 writes it: per trial its
state JSON and its runtime JSON, in which the checkpoint manager is cloudpickled. Each
trial's runtime state is sized as measured on a ``make run`` trial after 8 iterations
(282 KB: a checkpoint manager of 4 results with 17 KB of metrics each, Tune's per-metric
statistics about 120 KB). One read is what one trial checkpoint costs: the snapshot is
written again with one trial's latest checkpoint moved on, into the staging folder and (the
sync) the results folder, and both are read back; the anchor parses both files and decodes
every trial, the workbench's reader parses the new version once and decodes the changed
trial, and takes the staging file's trials from memory as the driver does (the driver wrote
it: ``state_sync.WRITTEN``). A third arm is that reader as it was before 4 December: its
texts keyed by hashlib's blake2b rather than Python's own hash, the staging file parsed.
Interleaved rounds; median [min-max] milliseconds per read, and the ratios.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/snapshot_reads.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import by_population_size, interleaved, spread
from workbench.tune_ext import state_sync

METRICS_PER_RESULT = 600  # about 17 KB of JSON, as a result of the main experiment
STATISTICS = 1_400  # Tune's metric_analysis and metric_n_steps: about 120 KB


def _result(folder: Path, trial: int, index: int) -> Any:
    from ray.tune import Checkpoint

    metrics = {f"learners/default_policy/metric_{k}": k * 0.001 + index for k in range(600)}
    path = folder / f"trial_{trial}" / f"checkpoint_{index:06d}"
    return SimpleNamespace(checkpoint=Checkpoint(str(path)), metrics=metrics)


def _runtime(folder: Path, trial: int, latest: int) -> str:
    from ray.tune.utils.serialization import TuneFunctionEncoder

    results = [_result(folder, trial, i) for i in range(latest - 3, latest + 1)]
    manager = SimpleNamespace(_latest_checkpoint_result=results[-1], _checkpoint_results=results)
    statistics = {
        f"metric_{k}": {"max": k, "min": 0.0, "avg": 0.5, "last": k} for k in range(STATISTICS)
    }
    state = {"checkpoint_manager": manager, "metric_analysis": statistics, "last_result": {}}
    return json.dumps(state, cls=TuneFunctionEncoder)


class Population:
    """A snapshot file of ``size`` trials whose latest checkpoints move on one at a time."""

    def __init__(self, size: int, folder: Path) -> None:
        self.folder = folder
        self.size = size
        self.latest = [3] * size
        self.runtime = [_runtime(folder, t, 3) for t in range(size)]
        (folder / "staging").mkdir()
        self.path = folder / "staging" / "experiment_state-bench.json"
        self.synced = folder / "experiment_state-bench.json"
        self.turn = 0

    def checkpoint(self) -> None:
        """One trial checkpoints; the snapshot is written again."""
        trial = self.turn % self.size
        self.turn += 1
        self.latest[trial] += 1
        self.runtime[trial] = _runtime(self.folder, trial, self.latest[trial])
        data = [[json.dumps({"trial_id": str(t)}), r] for t, r in enumerate(self.runtime)]
        text = json.dumps({"trial_data": data})
        self.path.write_text(text)  # the driver's staging copy, then the sync's
        info = self.path.stat()
        state_sync.WRITTEN[str(self.path)] = ((info.st_mtime_ns, info.st_size), data)
        self.synced.write_text(text)


def read_all(*paths: Path) -> set[str]:
    """The anchor: every trial's state of both files decoded."""
    from workbench.tune_ext.checkpoints import _restores

    named = set()
    for path in paths:
        snapshot = json.loads(path.read_text())
        named |= {p for _t, r in snapshot["trial_data"] if (p := _restores(r))}
    return named


def _blake2b(data: str | bytes) -> bytes:
    """The reader's keys before 4 December."""
    return hashlib.blake2b(
        data if isinstance(data, bytes) else data.encode(), digest_size=16
    ).digest()


@contextlib.contextmanager
def as_before() -> Any:
    """The reader as it was before 4 December: blake2b keys, every file parsed."""
    from workbench.tune_ext import checkpoints

    digest, written = checkpoints._digest, state_sync.WRITTEN
    checkpoints._digest = _blake2b  # type: ignore[assignment]
    state_sync.WRITTEN = {}
    try:
        yield
    finally:
        checkpoints._digest, state_sync.WRITTEN = digest, written


def measure_size(size: int, folder: Path, rounds: int, reads: int) -> str:
    """One table row: the three readers, ``reads`` checkpoints a round, interleaved."""
    import pyarrow.fs

    from workbench.tune_ext.checkpoints import _Snapshots

    population = Population(size, folder)
    population.checkpoint()
    storage = SimpleNamespace(
        storage_filesystem=pyarrow.fs.LocalFileSystem(),
        experiment_fs_path=str(folder),
        experiment_driver_staging_path=str(folder / "staging"),
    )
    reader, before = _Snapshots(), _Snapshots()
    reader.named(storage)
    with as_before():
        before.named(storage)

    def measure(case: str) -> float:
        spent = 0.0
        for _ in range(reads):
            population.checkpoint()
            start = time.perf_counter()
            if case == "anchor":
                named = read_all(population.path, population.synced)
            elif case == "before":
                with as_before():
                    named = before.named(storage)
            else:
                named = reader.named(storage)
            spent += time.perf_counter() - start
            assert len(named) == size
        return 1000 * spent / reads

    anchor, old, ours = interleaved(
        rounds, ["anchor", "before", "workbench"], measure, alternate=True
    )
    megabytes = population.path.stat().st_size / 1e6
    ratio = [a / b for a, b in zip(anchor, ours, strict=True)]
    gain = [a / b for a, b in zip(old, ours, strict=True)]
    return (
        f"| {size} | {megabytes:.1f} | {spread(anchor)} | {spread(old)} | {spread(ours)} "
        f"| {spread(ratio, unit='x')} | {spread(gain, unit='x')} |"
    )


HEADER = (
    "trials",
    "snapshot MB",
    "anchor: decode all, ms",
    "before 4 December, ms",
    "workbench, ms",
    "anchor / workbench",
    "before / workbench",
)


def main(argv: list[str] | None = None) -> int:
    return by_population_size(
        argv, __doc__ or "", HEADER, measure_size, ("--reads", "checkpoints timed per round")
    )


if __name__ == "__main__":
    sys.exit(main())
