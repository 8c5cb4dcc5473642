"""The main job end to end: does `experiments/cartpole_pbt.yaml` solve CartPole, confirmed
by an evaluation, within 90 seconds?

Usage::

    .venv/bin/python benchmarks/main_job.py                 # seeds 0, 1, 2 (about 2 minutes)
    .venv/bin/python benchmarks/main_job.py --seeds 0 --set stop.eval_from=475 --keep

Method:

* Each seed K is one ``workbench run experiments/cartpole_pbt.yaml --set seed=K
  --set storage=<tmp>/seed-K`` in a subprocess, one after the other (never two at once: the
  population already fills the machine's cores). Its wall time is measured around the whole
  command with ``time.perf_counter``: Ray's start, the population's training, the evaluations
  and Ray's shutdown, what a person typing ``make run`` waits for. The command's output goes
  to ``<tmp>/seed-K.log``; the script prints the summary lines.
* Solved means an evaluation said so: the population stops when a member's score reaches
  ``stop.eval_from`` and its policy then returns at least ``stop.return_mean`` over
  ``stop.eval_episodes`` deterministic episodes (workbench.trial.score). The figure read back
  from the trials' ``result.json`` rows is the best such evaluation (``eval`` in a row), its
  trial and iteration. Beside it, the first row whose training score (``score/return_mean``,
  the last 20 episodes) reached the threshold, if any: the figure the population used to stop
  on.
* The target: every run's evaluation reaches the threshold and its whole command ends within
  ``--target-s`` (90 s). The script prints median/min/max over the seeds and PASS or FAIL. The
  exit status is 0 either way (a measurement, not a test) unless a run fails outright.
"""

from __future__ import annotations

import argparse
import datetime
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/main_job.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (
    EXPERIMENT,
    experiment_name,
    first_crossing,
    median_min_max,
    number_at,
    print_log_tail,
    read_trials,
    run_logged,
    workbench_command,
)

SCORE = ("score", "return_mean")  # the windowed training score (workbench.trial.score)


@dataclass
class Evaluation:
    trial: str
    iteration: int
    mean: float
    std: float
    episodes: int


def best_evaluation(trials: dict[str, list[dict[str, Any]]]) -> Evaluation | None:
    """The highest evaluated return of any row (the stop's confirmation), or None."""
    best: Evaluation | None = None
    for name, rows in trials.items():
        for row in rows:
            mean = number_at(row, "eval", "return_mean")
            if mean is None or math.isnan(mean) or (best is not None and mean <= best.mean):
                continue
            std = number_at(row, "eval", "return_std")
            episodes = number_at(row, "eval", "episodes")
            best = Evaluation(
                name,
                int(row["training_iteration"]),
                mean,
                math.nan if std is None else std,
                0 if episodes is None else int(episodes),
            )
    return best


@dataclass
class RunFigures:
    seed: int
    returncode: int
    wall_s: float
    best_return: float  # training score, over all rows of all trials (nan if none)
    trial_time_to_threshold_s: float | None  # smallest time_total_s of a first crossing
    launch_to_threshold_s: float | None  # the row's timestamp minus the command's start
    reached_by: str | None
    log: Path
    evaluation: Evaluation | None = None  # the best evaluation any member reported


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
    trial_time, launch_time, reached_by, best = first_crossing(
        trials, threshold, started_at, metric=SCORE
    )
    for line in log.read_text().splitlines():
        if line.startswith(("Experiment ", "Stopped ", "Return target ", "No trial ")):
            print(f"  {line}")
    if returncode != 0:
        print_log_tail(log, 20, f"  exit status {returncode}; the end of {log}:")
    return RunFigures(
        seed,
        returncode,
        wall,
        best,
        trial_time,
        launch_time,
        reached_by,
        log,
        best_evaluation(trials),
    )


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
        f"{'seed':>4}  {'exit':>4}  {'wall (s)':>8}  {'evaluation (trial, iteration)':>38}  "
        f"{'best score':>10}  {'score ' + f'{threshold:g}' + ' at t_total':>20}"
    )
    for f in figures:
        e = f.evaluation
        evaluated = (
            "none"
            if e is None
            else f"{e.mean:.1f} +- {e.std:.1f} / {e.episodes} ({e.trial}, {e.iteration})"
        )
        trial_t = _seconds(f.trial_time_to_threshold_s, "never")
        print(
            f"{f.seed:>4}  {f.returncode:>4}  {f.wall_s:>8.1f}  {evaluated:>38}  "
            f"{f.best_return:>10.1f}  {trial_t:>20}"
        )
    solved = [f for f in figures if f.evaluation and f.evaluation.mean >= threshold]
    print()
    print(f"wall time of the command: {_stats([f.wall_s for f in figures])}")
    evaluated_means = [f.evaluation.mean for f in figures if f.evaluation]
    if evaluated_means:
        median, low, high = median_min_max(evaluated_means)
        print(f"evaluated return:         median {median:6.1f}   min {low:6.1f}   max {high:6.1f}")
    ok = len(solved) == len(figures) and all(
        f.returncode == 0 and f.wall_s <= target_s for f in figures
    )
    worst = max(f.wall_s for f in figures)
    verdict = "PASS" if ok else "FAIL"
    print(
        f"{verdict}: {len(solved)}/{len(figures)} runs evaluated at {threshold:g} or more; "
        f"slowest whole command {worst:.1f} s (target: every run's evaluation reaches "
        f"{threshold:g} and the command ends within {target_s:g} s)"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--target-s", type=float, default=90.0)
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
