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
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a file: python benchmarks/main_job.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (
    EXPERIMENT,
    experiment_name,
    first_crossing,
    median_min_max,
    print_log_tail,
    read_trials,
    run_logged,
    workbench_command,
)


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
        "--name",  # the folder read back below (by default each run gets a timestamped name)
        experiment_name(experiment, extra),
    ]
    print(f"seed {seed}: {' '.join(command)}", flush=True)
    returncode, started_at, wall = run_logged(command, log)
    trials = read_trials(storage / experiment_name(experiment, extra))
    trial_time, launch_time, reached_by, best = first_crossing(trials, threshold, started_at)
    for line in log.read_text().splitlines():
        if line.startswith(("Experiment ", "Best trial ", "No trial ")):
            print(f"  {line}")
    if returncode != 0:
        print_log_tail(log, 20, f"  exit status {returncode}; the end of {log}:")
    return RunFigures(seed, returncode, wall, best, trial_time, launch_time, reached_by, log)


def _seconds(value: float | None, missing: str) -> str:
    return missing if value is None else f"{value:.1f}"


def _stats(values: list[float]) -> str:
    if not values:
        return "n/a"
    median, low, high = median_min_max(values)
    return f"median {median:6.1f} s   min {low:6.1f} s   max {high:6.1f} s"


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
