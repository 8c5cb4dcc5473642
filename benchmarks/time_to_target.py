"""Time to target: wall time and env steps for the main experiment's population to reach a
mean return of 475, with the workbench's fast env runner against RLlib's own.

Usage::

    .venv/bin/python benchmarks/time_to_target.py                  # seeds 0,1: four runs
    .venv/bin/python benchmarks/time_to_target.py --seeds 0,1,2    # six runs
    # each run ~1.5-2 min on a quiet 2-core machine (benchmarks/main_job.py), up to 5 loaded
    .venv/bin/python benchmarks/time_to_target.py --quick          # a smoke run (the test)

Method:

* Each run is one ``workbench run experiments/cartpole_pbt.yaml --set seed=K --set
  env_runner=fast|rllib`` in a subprocess (Ray's start, the population, Ray's stop), one
  after the other; per seed both runners, their order alternating from seed to seed (the
  anchor, RLlib's runner, measured in the same conditions as the case). The population
  stops once one member reaches 475 (or at its 300 s budget).
* Read from the trials' ``result.json`` rows (as `benchmarks/main_job.py` does): the wall
  time of the whole command; the time from launch to the first row at 475 (its timestamp
  minus the command's start); the crossing trial's own ``time_total_s``; the env steps the
  whole population sampled until it stopped (the sum of every row's
  ``env_runners/num_env_steps_sampled``: the population stops right after the crossing) and
  the crossing trial's ``num_env_steps_sampled_lifetime`` (its lineage's, a PBT clone carries
  its donor's counters).
* Where the time went: the population's sampling and learner shares of its iterations,
  from every row's ``workbench/*`` time split (`workbench diagnose`'s figures).
* Median/min/max over the seeds per runner, and each seed's ratio rllib / fast.
"""

from __future__ import annotations

import argparse
import datetime
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job import EXPERIMENT, ROOT, first_crossing, read_trials, workbench_command

RUNNERS = ("fast", "rllib")


@dataclass
class Run:
    seed: int
    runner: str
    returncode: int
    wall_s: float
    launch_to_target_s: float | None
    trial_time_to_target_s: float | None
    population_env_steps: float
    trial_env_steps: float | None
    best_return: float
    sampling_share: float
    learner_share: float


def _nested(row: dict[str, object], *keys: str) -> float | None:
    value: object = row
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, int | float) else None


def run_once(seed: int, runner: str, root: Path, threshold: float, extra: list[str]) -> Run:
    storage = root / f"seed{seed}-{runner}"
    log = root / f"seed{seed}-{runner}.log"
    sets = [f"seed={seed}", f"env_runner={runner}", f"storage={storage}", *extra]
    command = [
        *workbench_command(),
        "run",
        str(EXPERIMENT),
        *[arg for item in sets for arg in ("--set", item)],
    ]
    print(f"seed {seed}, {runner}: {' '.join(command)}", flush=True)
    started_at = time.time()
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    trials = read_trials(storage / "cartpole_pbt")
    trial_time, launch_time, reached_by, best = first_crossing(trials, threshold, started_at)
    population_steps = sum(
        _nested(row, "env_runners", "num_env_steps_sampled") or 0.0
        for rows in trials.values()
        for row in rows
    )
    trial_steps = None
    if reached_by is not None:
        for row in trials[reached_by]:
            ret = _nested(row, "env_runners", "episode_return_mean")
            if ret is not None and ret >= threshold:
                trial_steps = _nested(row, "num_env_steps_sampled_lifetime")
                break
    split = {"iteration_s": 0.0, "sampling_s": 0.0, "learner_s": 0.0}
    for rows in trials.values():
        for row in rows:
            for key in split:
                split[key] += _nested(row, "workbench", key) or 0.0
    total = split["iteration_s"] or math.nan
    if done.returncode != 0:
        print(f"  exit status {done.returncode}; the end of {log}:")
        for line in log.read_text().splitlines()[-15:]:
            print(f"    {line}")
    return Run(
        seed,
        runner,
        done.returncode,
        wall,
        launch_time,
        trial_time,
        population_steps,
        trial_steps,
        best,
        split["sampling_s"] / total,
        split["learner_s"] / total,
    )


def _cell(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None or math.isnan(value) else format(value, fmt)


def _stats(values: list[float], fmt: str = ".1f") -> str:
    if not values:
        return "n/a"
    return (
        f"{format(statistics.median(values), fmt)} "
        f"[{format(min(values), fmt)}-{format(max(values), fmt)}]"
    )


def report(runs: list[Run], threshold: float) -> None:
    print()
    print(
        "| seed | runner | exit | wall s | launch to 475 s | trial time to 475 s | "
        "population env steps | crossing trial's env steps | best | sampling | learner |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r.seed} | {r.runner} | {r.returncode} | {r.wall_s:.1f} | "
            f"{_cell(r.launch_to_target_s)} | {_cell(r.trial_time_to_target_s)} | "
            f"{r.population_env_steps:,.0f} | {_cell(r.trial_env_steps, ',.0f')} | "
            f"{r.best_return:.1f} | {100 * r.sampling_share:.0f}% | "
            f"{100 * r.learner_share:.0f}% |"
        )
    print()
    print(f"median [min-max] over seeds, runs that reached {threshold:g}:")
    print(
        "| runner | reached | wall s | launch to 475 s | trial time to 475 s | "
        "population env steps | sampling share |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for runner in RUNNERS:
        mine = [r for r in runs if r.runner == runner]
        hit = [r for r in mine if r.launch_to_target_s is not None]
        print(
            f"| {runner} | {len(hit)}/{len(mine)} | {_stats([r.wall_s for r in mine])} | "
            f"{_stats([r.launch_to_target_s for r in hit if r.launch_to_target_s is not None])} | "
            f"{_stats([t for r in hit if (t := r.trial_time_to_target_s) is not None])} | "
            f"{_stats([r.population_env_steps for r in hit], ',.0f')} | "
            f"{_stats([100 * r.sampling_share for r in mine], '.0f')}% |"
        )
    ratios = []
    for seed in sorted({r.seed for r in runs}):
        pair = {r.runner: r for r in runs if r.seed == seed}
        fast, rllib = pair.get("fast"), pair.get("rllib")
        if fast and rllib and fast.launch_to_target_s and rllib.launch_to_target_s:
            ratios.append(rllib.launch_to_target_s / fast.launch_to_target_s)
    if ratios:
        shown = ", ".join(f"{r:.2f}x" for r in ratios)
        print(f"\nlaunch to {threshold:g}, rllib / fast per seed: {shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds (default 0,1)")
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="passed on to run"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (the test)")
    parser.add_argument("--keep", action="store_true", help="keep the results folders")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    extra = list(args.set)
    if args.quick:
        seeds = seeds[:1]
        extra += [
            "population=2",
            "scheduler.quantile_fraction=0.5",
            "stop.iterations=2",
            "training.train_batch_size_per_learner=512",
            "evaluation.at_end=none",
        ]

    root = Path(tempfile.mkdtemp(prefix="time_to_target-"))
    now = datetime.datetime.now(datetime.timezone.utc)
    print("command:", " ".join([sys.executable, *sys.argv]))
    print(f"{now:%Y-%m-%d %H:%M:%S} UTC; results under {root}")
    runs = []
    try:
        for i, seed in enumerate(seeds):
            for runner in RUNNERS if i % 2 == 0 else tuple(reversed(RUNNERS)):
                runs.append(run_once(seed, runner, root, args.threshold, extra))
        report(runs, args.threshold)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if any(r.returncode != 0 for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
