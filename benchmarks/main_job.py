"""The main job end to end: does `experiments/cartpole_pbt.yaml` reach 475 within 5 minutes?

Usage::

    .venv/bin/python benchmarks/main_job.py                 # seeds 0, 1, 2 (about 3-4 minutes)
    .venv/bin/python benchmarks/main_job.py --seeds 0 --set stop.wall_time_s=30 --keep

Method:

* Each seed K is one ``workbench run experiments/cartpole_pbt.yaml --set seed=K
  --set storage=<tmp>/seed-K`` in a subprocess, one after the other (never two at once: the
  population already fills the machine's cores). Its wall time is measured around the whole
  command with ``time.perf_counter``: Ray's start, the population's training and Ray's shutdown,
  what a person typing ``make run`` waits for. The command's output goes to
  ``<tmp>/seed-K.log``; the script prints the summary lines.
* Time to 475 is read afterwards from the trials' ``result.json`` rows in the run's results
  folder: for each trial, the first row whose ``env_runners/episode_return_mean`` is at least
  475; the run's figure is the smallest ``time_total_s`` of those rows over all trials (a trial's
  own training time; a PBT clone carries on its donor's clock). Beside it, the same rows'
  ``timestamp`` (whole seconds) minus the command's start gives the wall-clock time from
  launch to 475, which also counts Ray's start, actor restarts and checkpoints.
* The target: every run reaches 475 and its whole command ends within 300 s (``--target-s``);
  the population stops once one member reaches 475, so this also bounds the time to 475.
  The script prints median/min/max over the seeds and PASS or FAIL. The exit status is 0
  either way (a measurement, not a test) unless a run fails outright.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "cartpole_pbt.yaml"
RETURN_METRIC = ("env_runners", "episode_return_mean")


@dataclass
class RunFigures:
    seed: int
    returncode: int
    wall_s: float
    best_return: float  # over all rows of all trials (nan if no episode finished)
    trial_time_to_threshold_s: float | None  # smallest time_total_s of a first crossing
    launch_to_threshold_s: float | None  # the row's timestamp minus the command's start
    reached_by: str | None
    log: Path


def workbench_command() -> list[str]:
    """The venv's `workbench` script next to this interpreter, else the CLI module."""
    script = Path(sys.executable).with_name("workbench")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "workbench.cli"]


def _return_of(row: dict[str, object]) -> float | None:
    value: object = row
    for key in RETURN_METRIC:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def read_trials(results_dir: Path) -> dict[str, list[dict[str, object]]]:
    """Each trial's result.json rows, in order (a partly written last line is skipped)."""
    trials: dict[str, list[dict[str, object]]] = {}
    for result_file in sorted(results_dir.glob("*/result.json")):
        rows = []
        for line in result_file.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        trials[result_file.parent.name] = rows
    return trials


def first_crossing(
    trials: dict[str, list[dict[str, object]]], threshold: float, started_at: float
) -> tuple[float | None, float | None, str | None, float]:
    """(time_total_s, seconds since launch, trial) of the earliest crossing, and the best return."""
    best_time: float | None = None
    best_launch: float | None = None
    reached_by: str | None = None
    best_return = math.nan
    for name, rows in trials.items():
        for row in rows:
            value = _return_of(row)
            if value is None:
                continue
            if math.isnan(best_return) or value > best_return:
                best_return = value
            if value < threshold:
                continue
            total = float(row["time_total_s"])  # type: ignore[arg-type]
            if best_time is None or total < best_time:
                best_time, reached_by = total, name
            stamp = row.get("timestamp")
            if isinstance(stamp, (int, float)):
                since = float(stamp) - started_at
                if best_launch is None or since < best_launch:
                    best_launch = since
            break  # the first crossing of this trial
    return best_time, best_launch, reached_by, best_return


def run_seed(
    seed: int, experiment: Path, storage: Path, threshold: float, extra: list[str]
) -> RunFigures:
    log = storage.parent / f"{storage.name}.log"
    command = [
        *workbench_command(),
        "run",
        str(experiment),
        "--set",
        f"seed={seed}",
        "--set",
        f"storage={storage}",
        *[arg for item in extra for arg in ("--set", item)],
    ]
    print(f"seed {seed}: {' '.join(command)}", flush=True)
    started_at = time.time()
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    name = _experiment_name(experiment, extra)
    trials = read_trials(storage / name)
    trial_time, launch_time, reached_by, best = first_crossing(trials, threshold, started_at)
    lines = log.read_text().splitlines()
    for line in lines:
        if line.startswith(("Experiment ", "Best trial ", "No trial ")):
            print(f"  {line}")
    if done.returncode != 0:
        print(f"  exit status {done.returncode}; the end of {log}:")
        for line in lines[-20:]:
            print(f"    {line}")
    return RunFigures(seed, done.returncode, wall, best, trial_time, launch_time, reached_by, log)


def _experiment_name(experiment: Path, extra: list[str]) -> str:
    for item in extra:
        key, _, value = item.partition("=")
        if key.strip() == "name":
            return value.strip()
    return str(yaml.safe_load(experiment.read_text())["name"])


def _seconds(value: float | None, missing: str) -> str:
    return missing if value is None else f"{value:.1f}"


def _stats(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"median {statistics.median(values):6.1f} s   min {min(values):6.1f} s   "
        f"max {max(values):6.1f} s"
    )


def report(figures: list[RunFigures], threshold: float, target_s: float) -> bool:
    print()
    print(
        f"{'seed':>4}  {'exit':>4}  {'wall (s)':>8}  {'best return':>11}  "
        f"{'t_total to ' + f'{threshold:g}':>15}  {'launch to ' + f'{threshold:g}':>14}  trial"
    )
    for f in figures:
        trial_t = _seconds(f.trial_time_to_threshold_s, "never")
        launch_t = _seconds(f.launch_to_threshold_s, "-")
        print(
            f"{f.seed:>4}  {f.returncode:>4}  {f.wall_s:>8.1f}  {f.best_return:>11.1f}  "
            f"{trial_t:>15}  {launch_t:>14}  {f.reached_by or '-'}"
        )
    trial_times = [t for f in figures if (t := f.trial_time_to_threshold_s) is not None]
    launch_times = [t for f in figures if (t := f.launch_to_threshold_s) is not None]
    print()
    print(f"wall time of the command:      {_stats([f.wall_s for f in figures])}")
    print(
        f"time to {threshold:g} (time_total_s): {_stats(trial_times)}"
        f"   ({len(trial_times)}/{len(figures)} runs reached it)"
    )
    print(f"time to {threshold:g} (since launch): {_stats(launch_times)}")
    ok = all(
        f.returncode == 0 and f.trial_time_to_threshold_s is not None and f.wall_s <= target_s
        for f in figures
    )
    worst = max(f.wall_s for f in figures)
    verdict = "PASS" if ok else "FAIL"
    print(
        f"{verdict}: {len(trial_times)}/{len(figures)} runs reached {threshold:g}; slowest whole "
        f"command {worst:.1f} s (target: every run reaches {threshold:g} and ends within "
        f"{target_s:g} s)"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--target-s", type=float, default=300.0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="passed on to run"
    )
    parser.add_argument("--keep", action="store_true", help="keep the results folder")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]

    root = Path(tempfile.mkdtemp(prefix="main_job-"))
    now = datetime.datetime.now(datetime.timezone.utc)
    print(f"{now:%Y-%m-%d %H:%M:%S} UTC; results under {root}")
    figures = []
    try:
        for seed in seeds:
            figures.append(
                run_seed(seed, args.experiment, root / f"seed-{seed}", args.threshold, args.set)
            )
        report(figures, args.threshold, args.target_s)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if any(f.returncode != 0 for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
