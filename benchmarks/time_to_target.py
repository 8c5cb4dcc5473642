"""Time to target: wall time and env steps for a population to reach a mean return of 475
on CartPole, comparing schedulers (PBT, PB2, ASHA+Optuna, random search; with RL Zoo's Optuna
tuning as the user's alternative), env runners (the workbench's fast one against RLlib's),
defaults (RLlib's runner and defaults against the workbench's: before and after), or actor
reuse (a new process per trial start against the workbench's reuse: before and after).

Usage::

    .venv/bin/python benchmarks/time_to_target.py --compare schedulers --seeds 0,1,2 --zoo
    .venv/bin/python benchmarks/time_to_target.py --compare runners --seeds 0,1
    .venv/bin/python benchmarks/time_to_target.py --compare defaults --seeds 0,1,2
    .venv/bin/python benchmarks/time_to_target.py --compare reuse --seeds 0,1,2
    # each run ~1.5-5 min on a 2-core machine; --zoo needs `make zoo-venv`
    .venv/bin/python benchmarks/time_to_target.py --quick          # a smoke run (the test)

Method:

* Each run is one ``workbench run EXPERIMENT --set seed=K ...`` in a subprocess (Ray's start,
  the population, Ray's stop), one after the other; per seed every arm, their order rotating
  from seed to seed so no arm always meets the machine first or last. An arm stops at the
  first row at 475 (``stop.all_at_return``) or at the wall-time budget.
* Schedulers at equal budget: the same 300 s wall-time budget (Tune's time_budget_s, Ray's
  start excluded), the same four half-CPU trials at a time on the same two cores, the same
  PPO, env and target, the same search space (``search_spaces/ppo.yaml``):
  ``pbt`` is the main experiment (``experiments/cartpole_pbt.yaml``, four trials);
  ``pb2`` the same with PB2 (its GP needs numeric bounds, so ``minibatch_size``, a choice
  block, stays at RLlib's default 128); ``asha_optuna`` is ``experiments/cartpole_asha_optuna.yaml``
  (16 trials suggested by Optuna's TPE, four at a time, ASHA rungs at 4, 8, 16, max 32
  iterations); ``random`` is the same 16-trial budget as independent random draws run to 32
  iterations each (no early stopping, no model).
* ``--zoo`` adds the user's alternative as a reference in the same run, per seed:
  ``benchmarks/zoo_reference.py`` in ``.venv-zoo`` (RL Zoo's ``rl_zoo3.train -optimize``,
  16 TPE trials with the median pruner, then SB3 PPO training the best configuration until
  the episodes that ended within 2000 env steps average 475, which is what a workbench
  trial's ``episode_return_mean`` is in RLlib 2.60); its time to 475 is the search's wall
  time plus the training's time to the crossing.
* Read from the trials' ``result.json`` rows (as `benchmarks/main_job.py` does): the wall
  time of the whole command; the time from launch to the first row at 475 (its timestamp
  minus the command's start); the crossing trial's own ``time_total_s``; the env steps the
  whole population sampled until it stopped (the sum of every row's
  ``env_runners/num_env_steps_sampled``) and the crossing trial's
  ``num_env_steps_sampled_lifetime`` (its lineage's: a PBT clone carries its donor's counters).
* Where the time went: the population's sampling and learner shares of its iterations,
  from every row's ``workbench/*`` time split (`workbench diagnose`'s figures).
* Median/min/max over the seeds per arm, and each seed's ratio to the first arm.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a file: python benchmarks/time_to_target.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (
    EXPERIMENT,
    RETURN_METRIC,
    ROOT,
    command_line,
    experiment_name,
    first_crossing,
    number_at,
    print_log_tail,
    read_trials,
    run_logged,
    spread,
    workbench_command,
)

ASHA_EXPERIMENT = ROOT / "experiments" / "cartpole_asha_optuna.yaml"
SEARCH_SPACE = ROOT / "search_spaces" / "ppo.yaml"
ZOO_PYTHON = ROOT / ".venv-zoo" / "bin" / "python"
ZOO_SCRIPT = ROOT / "benchmarks" / "zoo_reference.py"
# Every scheduler arm: the main experiment's budget, stopping at the first crossing
# (no evaluation of the best policy afterwards: it is not part of the time to 475).
EQUAL_BUDGET = ("stop.wall_time_s=300", "stop.all_at_return=true", "evaluation.at_end=none")


@dataclass(frozen=True)
class Arm:
    name: str
    experiment: Path
    sets: tuple[str, ...] = ()
    seeded_search: bool = False  # the file pins search.seed: follow the run's seed
    population_based: bool = False  # PBT/PB2: --quick's two trials need quantile 0.5

    def overrides(self, seed: int, quick: bool = False) -> list[str]:
        sets = [f"seed={seed}", *self.sets]
        if self.seeded_search:
            sets.append(f"search.seed={seed}")
        if quick and self.population_based:
            sets.append("scheduler.quantile_fraction=0.5")
        return sets


def _numeric_space() -> str:
    """search_spaces/ppo.yaml without its choice/grid blocks (PB2 explores bounds only)."""
    blocks = yaml.safe_load(SEARCH_SPACE.read_text())
    kept = {k: v for k, v in blocks.items() if not ({"choice", "grid"} & set(v))}
    return json.dumps({"params": kept})


def arms(compare: str) -> tuple[Arm, ...]:
    if compare == "runners":
        # The runner alone: both arms keep RLlib's defaults for the rest.
        return (
            Arm("fast", EXPERIMENT, ("env_runner=fast", "defaults=rllib"), population_based=True),
            Arm("rllib", EXPERIMENT, ("env_runner=rllib", "defaults=rllib"), population_based=True),
        )
    if compare == "reuse":
        # Before and after actor reuse: a new process for every trial start (Tune's
        # default), then the main experiment as it ships (reset_config, reuse_actors).
        return (
            Arm("new_actors", EXPERIMENT, ("reuse_actors=false",), population_based=True),
            Arm("workbench", EXPERIMENT, (), population_based=True),
        )
    if compare == "defaults":
        # Before and after: RLlib's runner and defaults, then the main experiment as it
        # ships (the fast runner and the small-env defaults, workbench/experiment/defaults.py).
        return (
            Arm("rllib", EXPERIMENT, ("env_runner=rllib", "defaults=rllib"), population_based=True),
            Arm("workbench", EXPERIMENT, (), population_based=True),
        )
    return (
        Arm("pbt", EXPERIMENT, EQUAL_BUDGET, population_based=True),
        Arm(
            "pb2",
            EXPERIMENT,
            ("scheduler.type=pb2", f"search_space={_numeric_space()}", *EQUAL_BUDGET),
            population_based=True,
        ),
        Arm("asha_optuna", ASHA_EXPERIMENT, EQUAL_BUDGET, seeded_search=True),
        Arm(
            "random",
            ASHA_EXPERIMENT,
            (
                "search={type: random}",
                "scheduler={type: fifo}",
                "stop.iterations=32",
                *EQUAL_BUDGET,
            ),
        ),
    )


@dataclass
class Run:
    seed: int
    arm: str
    returncode: int
    wall_s: float
    launch_to_target_s: float | None
    trial_time_to_target_s: float | None
    population_env_steps: float
    trial_env_steps: float | None
    best_return: float
    sampling_share: float
    learner_share: float
    trials: int = 0
    note: str = field(default="")


def run_once(
    seed: int, arm: Arm, root: Path, threshold: float, extra: list[str], quick: bool = False
) -> Run:
    storage = root / f"seed{seed}-{arm.name}"
    log = root / f"seed{seed}-{arm.name}.log"
    sets = [*arm.overrides(seed, quick), f"storage={storage}", *extra]
    command = [
        *workbench_command(),
        "run",
        str(arm.experiment),
        *[arg for item in sets for arg in ("--set", item)],
        "--name",  # the folder read back below (by default each run gets a timestamped name)
        experiment_name(arm.experiment, sets),
    ]
    print(f"seed {seed}, {arm.name}: {' '.join(command)}", flush=True)
    returncode, started_at, wall = run_logged(command, log)
    trials = read_trials(storage / experiment_name(arm.experiment, sets))
    trial_time, launch_time, reached_by, best = first_crossing(trials, threshold, started_at)
    population_steps = sum(
        number_at(row, "env_runners", "num_env_steps_sampled") or 0.0
        for rows in trials.values()
        for row in rows
    )
    trial_steps = None
    if reached_by is not None:
        for row in trials[reached_by]:
            ret = number_at(row, *RETURN_METRIC)
            if ret is not None and ret >= threshold:
                trial_steps = number_at(row, "num_env_steps_sampled_lifetime")
                break
    split = {"iteration_s": 0.0, "sampling_s": 0.0, "learner_s": 0.0}
    for rows in trials.values():
        for row in rows:
            for key in split:
                split[key] += number_at(row, "workbench", key) or 0.0
    total = split["iteration_s"] or math.nan
    if returncode != 0:
        print_log_tail(log, 15, f"  exit status {returncode}; the end of {log}:")
    return Run(
        seed,
        arm.name,
        returncode,
        wall,
        launch_time,
        trial_time,
        population_steps,
        trial_steps,
        best,
        split["sampling_s"] / total,
        split["learner_s"] / total,
        trials=len(trials),
    )


ZOO = "rl_zoo"


def run_zoo(seed: int, root: Path, threshold: float, quick: bool) -> Run:
    """RL Zoo's search then training, in its own virtualenv (benchmarks/zoo_reference.py)."""
    command = [str(ZOO_PYTHON), str(ZOO_SCRIPT), "--seed", str(seed)]
    command += ["--threshold", f"{threshold:g}", "--workdir", str(root / f"seed{seed}-{ZOO}")]
    if quick:
        command += ["--n-trials", "2", "--n-timesteps", "2048", "--n-evaluations", "1"]
        command += ["--train-timesteps", "4096"]
    print(f"seed {seed}, {ZOO}: {' '.join(command)}", flush=True)
    log = root / f"seed{seed}-{ZOO}.log"
    returncode, _, wall = run_logged(command, log)
    lines = log.read_text().splitlines()
    figures: dict[str, object] = {}
    if lines:
        try:
            figures = json.loads(lines[-1])
        except json.JSONDecodeError:
            figures = {}
    code = returncode or int(figures.get("returncode", 1) or 0)  # type: ignore[call-overload]
    if code != 0 or "train_env_steps" not in figures:
        print_log_tail(log, 15, f"  exit status {returncode}; the end of {log}:")
        return Run(seed, ZOO, code or 1, wall, None, None, 0.0, None, math.nan, math.nan, math.nan)
    for line in lines[:-1]:
        if line.startswith(("search:", "train:")) and "rl_zoo3.train" not in line:
            print(f"  {line}")
    to_target = figures.get("to_target_s")
    train_s = figures.get("train_s")
    steps = float(figures["search_env_steps"]) + float(figures["train_env_steps"])  # type: ignore[arg-type]
    return Run(
        seed,
        ZOO,
        0,
        wall,
        float(to_target) if isinstance(to_target, int | float) else None,
        float(train_s) if isinstance(train_s, int | float) else None,
        steps,
        float(figures["train_env_steps"]) if to_target is not None else None,  # type: ignore[arg-type]
        float(figures["best_return"]),  # type: ignore[arg-type]
        math.nan,
        math.nan,
        trials=int(figures["trials"]),  # type: ignore[call-overload]
        note=f"search {float(figures['search_s']):.0f} s, {figures['pruned']} pruned",  # type: ignore[arg-type]
    )


def _cell(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None or math.isnan(value) else format(value, fmt)


def _share(value: float) -> str:
    return "-" if math.isnan(value) else f"{100 * value:.0f}%"


def report(runs: list[Run], threshold: float, names: list[str]) -> None:
    target = f"{threshold:g}"
    print()
    print(
        f"| seed | arm | exit | trials | wall s | launch to {target} s | "
        f"trial time to {target} s | population env steps | crossing trial's env steps | "
        "best | sampling | learner |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r.seed} | {r.arm} | {r.returncode} | {r.trials} | {r.wall_s:.1f} | "
            f"{_cell(r.launch_to_target_s)} | {_cell(r.trial_time_to_target_s)} | "
            f"{r.population_env_steps:,.0f} | {_cell(r.trial_env_steps, ',.0f')} | "
            f"{_cell(r.best_return)} | {_share(r.sampling_share)} | {_share(r.learner_share)} |"
            + (f" {r.note}" if r.note else "")
        )
    print()
    print(f"median [min-max] over seeds; times and env steps of the runs that reached {target}:")
    print(
        f"| arm | reached | wall s | launch to {target} s | trial time to {target} s | "
        "population env steps | sampling share |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        mine = [r for r in runs if r.arm == name]
        hit = [r for r in mine if r.launch_to_target_s is not None]
        shares = [100 * r.sampling_share for r in mine if not math.isnan(r.sampling_share)]
        print(
            f"| {name} | {len(hit)}/{len(mine)} | {spread([r.wall_s for r in mine])} | "
            f"{spread([r.launch_to_target_s for r in hit if r.launch_to_target_s is not None])} | "
            f"{spread([t for r in hit if (t := r.trial_time_to_target_s) is not None])} | "
            f"{spread([r.population_env_steps for r in hit], ',.0f')} | "
            f"{spread(shares, '.0f')}{'%' if shares else ''} |"
        )
    anchor = names[0]
    for name in names[1:]:
        ratios = []
        for seed in sorted({r.seed for r in runs}):
            pair = {r.arm: r for r in runs if r.seed == seed}
            a, b = pair.get(anchor), pair.get(name)
            if a and b and a.launch_to_target_s and b.launch_to_target_s:
                ratios.append(f"{b.launch_to_target_s / a.launch_to_target_s:.2f}x")
        if ratios:
            print(f"launch to {target}, {name} / {anchor} per seed: {', '.join(ratios)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--compare",
        choices=("schedulers", "runners", "defaults", "reuse"),
        default="schedulers",
        help="schedulers: pbt, pb2, asha_optuna, random; runners: fast vs rllib (PBT, RLlib's "
        "defaults); defaults: RLlib's runner and defaults vs the workbench's (PBT); reuse: a "
        "new process per trial start vs the workbench's actor reuse (PBT)",
    )
    parser.add_argument("--arms", default=None, help="comma-separated subset of the arms")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument(
        "--zoo", action="store_true", help="add RL Zoo's tuning as a reference (make zoo-venv)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="passed on to run"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (the test)")
    parser.add_argument("--keep", action="store_true", help="keep the results folders")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    chosen = arms(args.compare)
    if args.arms:
        wanted = [a.strip() for a in args.arms.split(",") if a.strip()]
        unknown = sorted(set(wanted) - {a.name for a in chosen})
        if unknown:
            parser.error(f"--arms: no arm {unknown} in {[a.name for a in chosen]}")
        chosen = tuple(a for a in chosen if a.name in wanted)
    if args.zoo and not ZOO_PYTHON.is_file():
        parser.error(f"--zoo needs {ZOO_PYTHON}: run `make zoo-venv` first")
    extra = list(args.set)
    if args.quick:
        seeds = seeds[:1]
        extra += [
            "population=2",
            "max_concurrent=2",
            "stop.iterations=2",
            "training.train_batch_size_per_learner=512",
            "evaluation.at_end=none",
        ]

    root = Path(tempfile.mkdtemp(prefix="time_to_target-"))
    now = datetime.datetime.now(datetime.timezone.utc)
    print("command:", command_line())
    print(f"{now:%Y-%m-%d %H:%M:%S} UTC; results under {root}")
    names = [a.name for a in chosen] + ([ZOO] if args.zoo else [])
    runs = []
    try:
        for i, seed in enumerate(seeds):
            order = [*chosen, ZOO] if args.zoo else list(chosen)
            turn = i % len(order)
            for arm in order[turn:] + order[:turn]:
                if isinstance(arm, Arm):
                    runs.append(run_once(seed, arm, root, args.threshold, extra, args.quick))
                else:
                    runs.append(run_zoo(seed, root, args.threshold, args.quick))
        report(runs, args.threshold, names)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if any(r.returncode != 0 for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
