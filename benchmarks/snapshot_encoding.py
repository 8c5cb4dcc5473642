"""The driver's cost of Tune's experiment snapshot, a trial at a time: Tune's own encoding
against the workbench's (`workbench.tune_ext.state_sync.trial_states`).

After every trial checkpoint the workbench has Tune save the experiment, and each save
encodes again every trial that reported since the last one: its state and its run metadata
(the last result, every metric's statistics and its last 5 and last 10 values, the
checkpoint manager with each kept checkpoint's result). This measures one such encoding of
one trial, on the driver's side, with nothing else running:

* the trial is a Tune ``Trial`` that has taken ``--iterations`` real results of the main
  experiment (``experiments/cartpole_pbt.yaml``: RLlib's PPO, trained in this process for
  that many iterations before the timing starts) through Tune's own ``update_last_result``,
  and holds ``--checkpoints`` checkpoint results in Tune's checkpoint manager;
* arms, interleaved over ``--rounds`` rounds: ``tune``, Tune's ``Trial.get_json_state``
  (the anchor); ``workbench``, ``trial_states`` as the workbench's save calls it. Each round
  encodes the trial ``--repeat`` times per arm, with Tune's caches cleared before each, as
  a new result clears them;
* beside the time: the encoded size, and how many texts each encoding adds to
  ``ray.util.debug``'s ``log_once`` set, which lives as long as the driver.

    .venv/bin/python benchmarks/snapshot_encoding.py [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/snapshot_encoding.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import command_line, cpu_model, interleaved, pin_to_one_cpu, spread

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "cartpole_pbt.yaml"
ARMS = ("tune", "workbench")


def real_results(iterations: int) -> list[dict[str, Any]]:
    """``iterations`` results of the main experiment's algorithm, as its trials return them."""
    import torch

    from workbench.experiment.resolve import load_and_resolve
    from workbench.trial.config import algorithm_config

    torch.set_num_threads(1)
    resolved = load_and_resolve(EXPERIMENT, check_results=False)
    config = algorithm_config(resolved.experiment, resolved.defaults)
    algo = config.env_runners(num_env_runners=0).build_algo()
    try:
        return [algo.train() for _ in range(iterations)]
    finally:
        algo.stop()


def reported_trial(results: list[dict[str, Any]], checkpoints: int, folder: Path) -> Any:
    """A Tune trial that has taken ``results`` as Tune's controller records them, with
    ``checkpoints`` checkpoint results kept by Tune's checkpoint manager."""
    from ray.train import Checkpoint, CheckpointConfig
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    from ray.tune.experiment import Trial

    trial = Trial(
        "PPO",
        config=results[-1].get("config", {}),
        trial_id="bench_00000",
        stub=True,
        placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
    )
    manager = _CheckpointManager(checkpoint_config=CheckpointConfig())
    trial.run_metadata.checkpoint_manager = manager
    every = max(1, len(results) // max(checkpoints, 1))
    for i, result in enumerate(results, start=1):
        result = next_result(results, i - 1)
        trial.update_last_result(result)
        if checkpoints and i % every == 0 and len(manager.best_checkpoint_results) < checkpoints:
            path = folder / f"checkpoint_{i:06d}"
            path.mkdir()
            checkpoint = Checkpoint.from_directory(str(path))
            manager.register_checkpoint(_TrainingResult(checkpoint=checkpoint, metrics=result))
    return trial


# The counters of a result that grow from one result to the next.
_COUNTERS = ("training_iteration", "time_total_s", "timestamp", "iterations_since_restore")


def next_result(results: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """The trial's ``n``-th result: a real one, its counters (the iteration, the times, every
    ``*_lifetime`` figure) advanced as they would have by then, and its other floats made
    new."""
    base = results[n % len(results)]
    laps = n // len(results)

    def advanced(tree: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            if isinstance(value, dict):
                out[key] = advanced(value)
            elif isinstance(value, int | float) and (key in _COUNTERS or "lifetime" in key):
                last = results[-1]
                out[key] = value + laps * (_leaf(last, key) or 0)
            elif isinstance(value, float) and laps:
                # A real run's losses, returns and timings do not repeat from one result
                # to another: each lap's copy differs from the last in the 12th digit.
                out[key] = value * (1.0 + laps * 1e-12)
            else:
                out[key] = value
        return out

    return advanced({k: v for k, v in base.items() if k != "config"})


def _leaf(tree: dict[str, Any], key: str) -> Any:
    """The first value under ``key`` anywhere in the nested dict."""
    for name, value in tree.items():
        if name == key and not isinstance(value, dict):
            return value
        if isinstance(value, dict) and (found := _leaf(value, key)) is not None:
            return found
    return None


def encode_once(arm: str, trial: Any) -> tuple[float, int]:
    """One encoding of the trial as the arm's save does it: seconds and characters."""
    from workbench.tune_ext.state_sync import trial_states

    trial.invalidate_json_state()
    trial.run_metadata.invalidate_cache()
    start = time.perf_counter()
    if arm == "tune":
        state = trial.get_json_state()
    else:
        (state,) = trial_states(SimpleNamespace(_trials_to_cache={trial}, _trial_metadata={}))
    return time.perf_counter() - start, sum(len(part) for part in state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=40, help="encodings per arm and round")
    parser.add_argument("--iterations", type=int, default=12, help="results the trial took")
    parser.add_argument("--checkpoints", type=int, default=4, help="checkpoint results kept")
    parser.add_argument("--core", type=int, default=None, help="pin to this CPU (default: last)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    core = pin_to_one_cpu(args.core, default="last")
    from ray.util import debug

    results = real_results(args.iterations)
    with tempfile.TemporaryDirectory() as folder:
        trial = reported_trial(results, args.checkpoints, Path(folder))
        metrics = len(trial.run_metadata.metric_n_steps)
        for arm in ARMS:  # warm both paths once
            encode_once(arm, trial)
        texts: dict[str, list[float]] = {arm: [] for arm in ARMS}
        kept: dict[str, list[float]] = {arm: [] for arm in ARMS}
        counter = [len(results)]
        sizes: dict[str, int] = {}

        def measure(arm: str) -> float:
            seconds = []
            for _ in range(args.repeat):
                counter[0] += 1
                trial.update_last_result(next_result(results, counter[0]))
                before = set(debug._logged)
                took, sizes[arm] = encode_once(arm, trial)
                added = debug._logged - before
                texts[arm].append(len(added))
                kept[arm].append(sum(sys.getsizeof(text) for text in added))
                seconds.append(took)
            return statistics.median(seconds) * 1e3

        figures = interleaved(args.rounds, ARMS, measure, alternate=True)

    print(f"# {command_line()}")
    print(
        f"# {cpu_model()}, {platform.python_version()}, pinned to CPU {core}, "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
    print(
        f"one trial's encoding in Tune's experiment snapshot: {metrics} metrics tracked, "
        f"{args.checkpoints} checkpoint results, median of {args.repeat} encodings a round, "
        f"{args.rounds} rounds"
    )
    print(
        "| arm | ms an encoding | vs tune | characters "
        "| log_once texts added an encoding (bytes kept) |"
    )
    print("|---|---|---|---|---|")
    anchor = statistics.median(figures[0])
    for arm, values in zip(ARMS, figures, strict=True):
        ratio = anchor / statistics.median(values)
        print(
            f"| {arm} | {spread(values, '.2f')} | {ratio:.2f}x faster | {sizes[arm]:,} "
            f"| {statistics.median(texts[arm]):.0f} ({statistics.median(kept[arm]):,.0f}) |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "ms": dict(zip(ARMS, figures, strict=True)),
                    "sizes": sizes,
                    "texts": texts,
                    "bytes_kept": kept,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
